"""taulib.rules.shard: one decision per shard, from the facts its records hold: a winner seals it, a cancellation
ends it, the user's own stops spend nothing, the budget exhausts it, a failed attempt says what its next one asks,
and a running attempt is stalled by its heartbeat or its progress."""

from __future__ import annotations

from taulib.rules.evidence import Evidence
from taulib.rules.shard import Facts, Policy, cancel_reason, decide, following, policy, since, spared, stalled_by

NOW = 10_000.0
POLICY = Policy(3, None, 300.0, 60, 120)
GROW = {"mem": 2, "max_mem": "2G"}
ASKED = {"mem": "256M", "time": "1:00:00"}


def attempt(ordinal=1, state="failed", reason="the client exited with status 1", classification="failed"):
    terminal = None if state not in ("failed", "succeeded") else {"reason": reason, "classification": classification}
    return {"attempt_id": f"attempt-{ordinal:04d}", "ordinal": ordinal, "state": state, "terminal": terminal}


def ended(ordinal=1, state="failed", **kw):
    """The facts of a shard whose newest attempt `ordinal` is in `state`, none of its attempts stopped."""
    fields = dict(attempt=attempt(ordinal, state), stopped_by=(None,) * ordinal, request=ASKED, updated_at=NOW - 50)
    fields.update(kw)
    return Facts(**fields)


def evidence(state="failed", classification="failed", changed_at=NOW - 10):
    return Evidence(state, "accounting", True, NOW - 5, changed_at, classification=classification)


def test_a_winner_seals_its_shard_and_every_attempt_before_it_failed():
    decision = decide(Facts(won=3, attempt=attempt(3, "succeeded")), POLICY, NOW)
    assert (decision.state, decision.reason, decision.attempts, decision.failed) == (
        "succeeded", "sealed by its winner", 3, 2)
    assert decision.verdict == ("succeeded", "the winner's attempt")
    assert decision.next is None and decision.stalled is None
    assert decide(Facts(won=1), POLICY, NOW).failed == 0


def test_the_facts_of_a_shard_never_submitted_hold_nothing():
    empty = Facts()
    assert [getattr(empty, name) for name in Facts.__slots__] == [
        None, None, None, None, (), None, None, None, None, None, 0.0, None, None, None, 0]


def test_the_schedulers_evidence_weighs_in_the_newest_attempts_verdict():
    said = decide(ended(1, "running", evidence=evidence("node_failed", "node_failed")), POLICY, NOW)
    assert said.verdict is not None and said.verdict.state == "failed" and said.state == "failed"
    seen = decide(ended(1, "submitted", evidence=Evidence("running", "queue", False, NOW, NOW)), POLICY, NOW)
    assert (seen.state, seen.reason) == ("running", "allocated, the attempt has not started yet")


def test_an_attempt_the_user_is_stopping_is_not_counted_but_the_ones_before_it_are():
    stopping = decide(ended(2, "running", stopped_by=(None, "user"), stopped="asked by the user"), POLICY, NOW)
    assert (stopping.state, stopping.reason, stopping.failed) == ("running", "stopping: asked by the user", 1)


def test_a_shard_never_submitted_is_pending_and_a_cancelled_one_says_when_it_was_asked():
    pending = decide(Facts(), POLICY, NOW)
    assert (pending.state, pending.reason, pending.attempts, pending.failed, pending.verdict) == (
        "pending", "not submitted yet", 0, 0, None)
    cancelled = decide(Facts(cancelled="2026-01-02T03:04:05.000000Z"), POLICY, NOW)
    assert (cancelled.state, cancelled.reason, cancelled.failed) == (
        "cancelled", "cancelled by the user at 2026-01-02T03:04:05.000000Z", 0)
    assert cancel_reason("T") == "cancelled by the user at T"


def test_a_failed_attempt_counts_against_the_budget_and_says_what_its_next_attempt_asks():
    decision = decide(ended(1), POLICY, NOW)
    assert (decision.state, decision.reason, decision.attempts, decision.failed) == (
        "failed", "the client exited with status 1", 1, 1)
    assert decision.next is not None and (decision.next.action, decision.next.request) == ("submit", ASKED)
    second = decide(ended(2), POLICY, NOW)
    assert (second.state, second.failed) == ("failed", 2)


def test_every_attempt_used_exhausts_the_shard_and_names_the_grant():
    decision = decide(ended(3), POLICY, NOW)
    assert decision.state == "exhausted" and decision.failed == 3
    assert decision.reason == ("the client exited with status 1; 3 attempts used of a budget of 3, not retried "
                               "(tau-retry --shard grants one more)")


def test_a_failure_no_retry_can_mend_exhausts_the_shard_at_once_saying_why_and_the_way_forward():
    changed = attempt(1, reason="image changed: /i.sif has sha256:aa, the run pins sha256:bb")
    changed["terminal"]["code"] = "image_changed"
    decision = decide(ended(1, attempt=changed), POLICY, NOW)
    assert (decision.state, decision.failed, decision.next.action) == ("exhausted", 1, "exhausted")
    assert decision.reason == ("image changed: /i.sif has sha256:aa, the run pins sha256:bb; not retried: a different "
                               "image is a different run (tau-init NEW --from RUN, with the image pinned anew)")
    assert decide(ended(1, attempt=changed, cancelled="T"), POLICY, NOW).state == "cancelled"


def test_a_cancelled_shard_is_cancelled_whatever_its_attempt_and_its_newest_failure_is_not_counted():
    decision = decide(ended(2, cancelled="T"), POLICY, NOW)
    assert (decision.state, decision.reason, decision.failed, decision.next) == (
        "cancelled", "cancelled by the user at T", 1, None)
    assert decision.verdict is not None and decision.verdict.state == "failed"


def test_the_newest_attempt_the_user_stopped_spends_neither_the_shards_attempts_nor_the_budget():
    facts = ended(3, stopped_by=(None, None, "user"), stopped="stopped by the user")
    decision = decide(facts, POLICY, NOW)
    assert (decision.state, decision.reason, decision.failed) == ("failed", "stopped by the user", 2)
    assert spared(facts) == [3]
    stall = decide(ended(3, stopped_by=(None, None, "stall"), stopped="stalled"), POLICY, NOW)
    assert (stall.state, stall.failed) == ("exhausted", 3)  # a stall's stop is a failure of the client


def test_an_earlier_attempt_the_user_cancelled_is_spared_only_while_a_cancellation_was_ever_recorded():
    lifted = ended(2, classified=("cancelled", "failed"))
    decision = decide(lifted, Policy(2, None, 300.0, 60, 120), NOW)
    assert spared(lifted) == [1]
    assert (decision.state, decision.failed) == ("failed", 1)
    # the same end, no cancellation ever recorded: an administrator's
    never = decide(ended(2), Policy(2, None, 300.0, 60, 120), NOW)
    assert (never.state, never.failed) == ("exhausted", 2)
    assert spared(ended(2, classified=("failed", "timed_out"))) == []


def test_a_newest_attempt_ended_cancelled_under_a_lifted_cancellation_is_spared_and_not_counted():
    facts = ended(2, classified=("failed", "cancelled"))
    decision = decide(facts, Policy(2, None, 300.0, 60, 120), NOW)
    assert spared(facts) == [2]
    assert (decision.state, decision.failed) == ("failed", 1)


def test_a_running_attempt_is_stalled_by_its_silent_heartbeat_or_its_still_progress():
    running = dict(attempt=attempt(1, "running"), stopped_by=(None,), request=ASKED, records=10)
    fresh = decide(Facts(**running, beat_at=NOW - 30, readiness={"records_done": 4}), POLICY, NOW)
    assert (fresh.state, fresh.stalled, fresh.failed, fresh.next) == ("running", None, 0, None)
    silent = decide(Facts(**running, beat_at=NOW - 100.04, readiness={}), POLICY, NOW)
    assert silent.stalled == ("no heartbeat for 100s (the run's stall_seconds is 60); the attempt is still running "
                              "as far as the scheduler knows")
    still = Facts(**running, beat_at=NOW - 1, progress_at=NOW - 500, readiness={"records_done": 4})
    assert decide(still, POLICY, NOW).stalled == ("no progress for 500s: 4 of 10 records done (the run's "
                                                  "progress_stall_seconds is 120)")
    assert decide(Facts(**running), POLICY, NOW).stalled is None  # no readiness record yet
    ahead = Facts(**running, beat_at=NOW, progress_at=NOW + 5, readiness={"records_done": 4})
    assert stalled_by(ahead, Policy(3, None, 300.0, 60, 0), NOW) is None  # a writer's clock ahead: still for 0s
    assert stalled_by(Facts(**running, beat_at=NOW, progress_at=NOW - 500), POLICY, NOW) is None  # no count
    assert decide(ended(1, beat_at=NOW - 1000), POLICY, NOW).stalled is None  # only a running attempt stalls


def test_time_since_is_by_the_observers_clock_to_a_tenth_and_never_negative():
    assert since(100.0, 58.66) == 41.3
    assert since(100.0, 130.0) == 0.0


def test_the_policy_is_the_plans_retry_and_windows():
    got = policy({"retry": {"max_attempts": 4, "escalate": GROW},
                  "windows": {"accounting_lag_seconds": 90, "stall_seconds": 600, "progress_stall_seconds": None}})
    assert (got.max_attempts, got.escalate, got.window, got.stall_seconds, got.progress_stall_seconds) == (
        4, GROW, 90.0, 600, None)
    assert isinstance(got.window, float)
    other = policy({"retry": {"max_attempts": 1}, "windows": {
        "accounting_lag_seconds": 1, "stall_seconds": 2, "progress_stall_seconds": 3}})
    assert (other.max_attempts, other.escalate, other.window, other.stall_seconds, other.progress_stall_seconds) == (
        1, None, 1.0, 2, 3)


def test_out_of_memory_asks_for_more_and_at_the_cap_exhausts_the_shard():
    grow = Policy(3, GROW, 300.0, 60, 120)
    oom = ended(1, attempt=attempt(1, classification="out_of_memory"))
    decision = decide(oom, grow, NOW)
    assert decision.next is not None and decision.next.request == {"mem": "512M", "time": "1:00:00"}
    assert decision.state == "failed" and decision.failed == 1
    capped = decide(ended(1, attempt=attempt(1, classification="out_of_memory"), request={"mem": "2G", "time": None}),
                    grow, NOW)
    assert capped.state == "exhausted"
    assert capped.reason == ("the client exited with status 1; ran out of memory asking for 2G, the cap "
                             "(retry.escalate.max_mem): a retry would ask the same; tau-retry --shard S --mem SIZE "
                             "grants more")


def test_the_schedulers_terminal_word_names_the_end_and_the_time_a_wait_is_bounded_by():
    grow = Policy(3, GROW, 300.0, 60, 120)
    said = ended(1, evidence=evidence("out_of_memory", "out_of_memory"), result={"signal": 9})
    assert following(said, grow, NOW).request["mem"] == "512M"
    killed = ended(1, evidence=evidence(changed_at=NOW - 20), result=None)
    wait = following(killed, grow, NOW)
    assert (wait.action, wait.until) == ("wait", NOW - 20 + 300.0)  # from the scheduler's word on its end
    unseen = ended(1, evidence=Evidence("running", "queue", False, NOW, NOW - 30))
    assert following(unseen, grow, NOW).until == NOW - 50 + 300.0  # no terminal word: when its record last changed


def test_a_kill_without_a_cause_waits_for_the_measure_only_when_the_plan_escalates():
    grow = Policy(3, GROW, 300.0, 60, 120)
    for result in (None, {"signal": 9}):
        nxt = following(ended(1, result=result), grow, NOW)
        assert nxt.action == "wait" and nxt.until == NOW - 50 + 300.0
    for result in ({"signal": 15}, {"signal": None, "exit_code": 1}):
        assert following(ended(1, result=result), grow, NOW).action == "submit"
    assert following(ended(1, result=None), POLICY, NOW).action == "submit"  # no escalation: nothing to wait for
    assert following(ended(1, result=None), Policy(3, {}, 300.0, 60, 120), NOW).action == "submit"
    measured = {"state": "FAILED", "max_rss_bytes": 1, "mem_requested_bytes": 2}
    assert following(ended(1, result=None, measured=measured), grow, NOW).action == "submit"


def test_an_end_only_the_executors_figures_name_is_said_in_the_shards_reason():
    measured = {"state": "OUT_OF_MEMORY", "max_rss_bytes": 300 << 20, "mem_requested_bytes": 256 << 20}
    decision = decide(ended(1, measured=measured), Policy(3, GROW, 300.0, 60, 120), NOW)
    assert decision.next is not None and decision.next.request["mem"] == "512M"
    assert decision.reason == ("the client exited with status 1; out of memory: the executor's accounting says "
                               "OUT_OF_MEMORY, peak 300.0 MiB of the 256.0 MiB asked")
    big = {"state": "OUT_OF_MEMORY", "max_rss_bytes": 100_000 << 20, "mem_requested_bytes": 65_536 << 20}
    assert following(ended(1, measured=big), Policy(3, GROW, 300.0, 60, 120), NOW).cause == (
        "out of memory: the executor's accounting says OUT_OF_MEMORY, peak 100000.0 MiB of the 65536.0 MiB asked")
    for own in ({"attempt": attempt(1, classification="out_of_memory")},  # the attempt said it itself
                {"evidence": evidence("out_of_memory", "out_of_memory")}):  # the scheduler said it
        assert following(ended(1, measured=measured, **own), Policy(3, GROW, 300.0, 60, 120), NOW).cause is None
    plain = decide(ended(1), Policy(3, GROW, 300.0, 60, 120), NOW)
    assert plain.reason == "the client exited with status 1" and plain.next is not None and plain.next.cause is None
