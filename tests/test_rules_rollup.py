"""taulib.rules.rollup: a shard's state, a run's state and a run's degraded reason, reached directly."""

from __future__ import annotations

import pytest

from taulib.rules.rollup import (LIFECYCLE, SHARD_STATES, at_work, degraded_reason, lifecycle, run_state, settled,
                                 shard_state, time_left)


def test_shard_state_is_sealed_by_a_winner_whatever_its_latest_attempt_says():
    assert shard_state(True, ("failed", "x")) == ("succeeded", "sealed by its winner")
    assert shard_state(True, None) == ("succeeded", "sealed by its winner")


def test_shard_state_without_a_winner_follows_the_latest_attempt():
    assert shard_state(False, None) == ("pending", "not submitted yet")
    assert shard_state(False, ("succeeded", "done")) == (
        "candidate", "the latest attempt succeeded; its winner is not published yet (run tau-winner)")
    for effective in ("running", "accounting_lag", "pending", "unknown", "failed"):
        assert shard_state(False, (effective, "why")) == (effective, "why")


def test_a_shard_a_retry_cannot_help_is_exhausted_at_once_with_why_and_only_when_it_would_be_retried():
    futile = "ran out of memory asking for 2G, the cap (retry.escalate.max_mem)"
    assert shard_state(False, ("failed", "killed"), 1, 5, None, futile) == ("exhausted", f"killed; {futile}")
    assert shard_state(False, ("unknown", "gone"), 1, 5, None, futile) == ("exhausted", f"gone; {futile}")
    assert shard_state(False, ("running", "r"), 1, 5, None, futile) == ("running", "r")
    assert shard_state(False, ("failed", "x"), 1, 5, "cancelled by the user", futile) == (
        "cancelled", "cancelled by the user")
    assert shard_state(True, ("failed", "x"), 1, 5, None, futile) == ("succeeded", "sealed by its winner")


@pytest.mark.parametrize("counts, expected", [
    ({"succeeded": 3}, "succeeded"),
    ({"succeeded": 2, "running": 1, "failed": 1}, "running"),
    ({"succeeded": 2, "candidate": 1}, "running"),
    ({"accounting_lag": 1, "pending": 1, "failed": 1}, "accounting_lag"),
    ({"pending": 1, "unknown": 1}, "pending"),
    ({"unknown": 1, "failed": 1, "succeeded": 1}, "unknown"),
    ({"failed": 1, "succeeded": 5}, "failed"),
    ({"succeeded": 0, "failed": 2}, "failed"),
])
def test_run_state_rolls_up_shard_counts(counts, expected):
    assert run_state(counts) == expected


@pytest.mark.parametrize("state, expected", [
    ("succeeded", "succeeded"), ("running", "running"), ("accounting_lag", "running"), ("pending", "pending"),
    ("unknown", "unknown"), ("failed", "failed"), ("cancelled", "failed")])
def test_a_runs_lifecycle_is_its_state_in_the_words_a_workloads_status_uses(state, expected):
    assert lifecycle(state) == expected


def test_every_run_state_reachable_from_any_counts_has_a_lifecycle_word():
    from taulib.k8s.jobs import STATES

    for one in SHARD_STATES:
        for other in SHARD_STATES:
            assert lifecycle(run_state({one: 1, other: 1})) in STATES
    assert set(LIFECYCLE.values()) <= set(STATES)


# -- properties over random observation histories -------------------------------------------------------------


def shard(n: int, st: str, reason: str = "why") -> dict:
    return {"id": f"shard-{n:05d}", "state": st, "reason": reason}


def test_a_run_without_failed_or_unknown_shards_is_not_degraded():
    shards = [shard(0, "succeeded"), shard(1, "running"), shard(2, "accounting_lag"), shard(3, "candidate"),
              shard(4, "pending")]
    assert degraded_reason(shards) is None


def test_the_reason_names_failed_and_unknown_shards_in_order_with_their_own_reasons():
    shards = [shard(0, "succeeded"), shard(1, "failed", "the client exited with status 3"),
              shard(2, "running"), shard(3, "unknown", "absent from queue and accounting after the deadline")]
    assert degraded_reason(shards) == ("shard-00001 failed: the client exited with status 3; "
                                             "shard-00003 unknown: absent from queue and accounting after the "
                                             "deadline")


def test_the_reason_names_five_shards_and_counts_the_rest():
    shards = [shard(n, "failed", f"exit {n}") for n in range(12)]
    reason = degraded_reason(shards)
    assert reason.split("; ")[:5] == [f"shard-{n:05d} failed: exit {n}" for n in range(5)]
    assert reason.endswith("; and 7 more")


# -- at work, settled, time left ----------------------------------------------------------------------------------


def entry(n: int, st: str, effective: str | None, stalled: str | None = None) -> dict:
    """A shard entry of a run status: its state, its newest attempt's verdict, and why it is stalled."""
    return {"id": f"shard-{n:05d}", "state": st, "reason": "why", "stalled": stalled,
            "evidence": None if effective is None else {"effective_state": effective}}


def test_an_attempt_submitted_running_or_in_accounting_lag_is_at_work_and_an_ended_one_is_not():
    shards = [entry(0, "pending", "pending"), entry(1, "running", "running"), entry(2, "accounting_lag",
              "accounting_lag"), entry(3, "succeeded", None), entry(4, "candidate", "succeeded"),
              entry(5, "failed", "failed"), entry(6, "unknown", "unknown"), entry(7, "pending", None)]
    assert at_work(shards) == 3


def test_a_stalled_attempt_is_at_work_but_not_getting_anything_done():
    shards = [entry(0, "running", "running", stalled="no heartbeat for 9s"), entry(1, "running", "running")]
    assert (at_work(shards), at_work(shards, stalled=False)) == (2, 1)


def test_a_cancelled_run_whose_attempt_still_runs_has_not_settled_until_it_ends():
    running = [entry(0, "cancelled", "running"), entry(1, "cancelled", None)]
    assert settled("cancelled", running) is False
    assert settled("cancelled", [entry(0, "cancelled", "failed"), entry(1, "cancelled", None)]) is True


@pytest.mark.parametrize("state", ["succeeded", "failed", "cancelled"])
def test_an_ended_run_without_attempts_at_work_has_settled(state):
    assert settled(state, [entry(0, "succeeded", None), entry(1, state, "failed")]) is True


@pytest.mark.parametrize("state", ["running", "pending", "accounting_lag", "unknown"])
def test_a_run_that_has_not_ended_has_not_settled_even_with_nothing_at_work(state):
    assert settled(state, [entry(0, "pending", None)]) is False


def test_the_time_left_is_the_mean_duration_times_the_rounds_the_parallelism_needs():
    counts = {"succeeded": 4, "running": 2, "pending": 3, "failed": 1}
    assert time_left("running", False, counts, 2, [10, 20], 2) == 15 * 3  # 6 left, 2 at a time
    assert time_left("running", False, counts, 2, [10, 20], None) == 15 * 3  # the 2 running are the slots
    assert time_left("running", False, counts, 2, [10, 20], 6) == 15


@pytest.mark.parametrize("state", ["succeeded", "failed", "cancelled"])
def test_an_ended_run_has_no_time_left_to_estimate(state):
    assert time_left(state, False, {"failed": 1, "succeeded": 7}, 0, [3], 4) is None
    assert time_left(state, False, {"failed": 1, "running": 1}, 1, [3], 4) is None  # a cancelled one still ending


def test_a_run_whose_budget_stopped_it_has_no_time_left_to_estimate():
    assert time_left("running", True, {"running": 1, "failed": 5}, 1, [3], 4) is None


def test_a_run_with_nothing_at_work_has_no_time_left_to_estimate():
    # a hung run: its one running attempt stalled (not counted at work), or shards waiting for a retry or a submit
    assert time_left("running", False, {"running": 1, "succeeded": 7}, 0, [5], 4) is None
    assert time_left("pending", False, {"pending": 8}, 0, [5], 4) is None


def test_a_run_whose_attempts_have_not_finished_any_has_no_time_left_to_estimate_yet():
    assert time_left("running", False, {"running": 8}, 8, [], 4) is None


# -- cancelled and exhausted shards, and the runs they make ---------------------------------------------------------

CANCELLED = "cancelled by the user at 2026-12-01T11:34:57.941906Z"


def test_a_cancelled_shard_is_cancelled_with_why_whatever_its_attempt_says_unless_a_winner_sealed_it():
    for latest in (None, ("running", "running"), ("failed", "exit 3"), ("succeeded", "done")):
        assert shard_state(False, latest, 1, 3, cancelled=CANCELLED) == ("cancelled", CANCELLED)
    assert shard_state(True, ("failed", "x"), 1, 3, cancelled=CANCELLED) == ("succeeded", "sealed by its winner")


@pytest.mark.parametrize("state", ["failed", "unknown"])
def test_a_retryable_verdict_with_every_attempt_of_the_budget_used_is_exhausted(state):
    assert shard_state(False, (state, "the client exited with status 3"), 3, 3) == (
        "exhausted", "the client exited with status 3; 3 attempts used of a budget of 3, not retried "
        "(tau-retry --shard grants one more)")
    assert shard_state(False, (state, "why"), 4, 3)[0] == "exhausted"  # a granted attempt that failed too
    assert shard_state(False, (state, "why"), 2, 3) == (state, "why")  # one attempt left
    assert shard_state(False, (state, "why"), 5) == (state, "why")  # no budget given: never exhausted


def test_a_shard_state_counts_no_attempts_unless_told():
    assert shard_state(False, ("failed", "why"), max_attempts=1) == ("failed", "why")


@pytest.mark.parametrize("state", ["running", "pending", "accounting_lag"])
def test_a_verdict_that_is_not_retried_is_never_exhausted(state):
    assert shard_state(False, (state, "why"), 3, 3) == (state, "why")


@pytest.mark.parametrize("counts, expected", [
    ({"cancelled": 4}, "cancelled"),
    ({"cancelled": 2, "succeeded": 2}, "cancelled"),
    ({"cancelled": 1, "failed": 1}, "failed"),
    ({"cancelled": 1, "exhausted": 1}, "failed"),
    ({"cancelled": 1, "failed": 1, "exhausted": 1}, "failed"),
    ({"cancelled": 1, "failed": 0, "exhausted": 0, "succeeded": 3}, "cancelled"),
    ({"exhausted": 2, "succeeded": 1}, "failed"),
    ({"cancelled": 2, "running": 1}, "running"),
    ({"cancelled": 1, "pending": 1}, "pending"),
    ({"succeeded": 2, "failed": 0}, "succeeded"),
    ({"candidate": 1}, "running"),
    ({}, "failed"),
])
def test_a_run_none_of_whose_shards_is_live_is_cancelled_only_when_no_shard_failed_or_is_exhausted(counts, expected):
    assert run_state(counts) == expected


def test_every_state_a_live_shard_can_be_in_keeps_its_run_from_ending():
    for state in ("running", "candidate", "accounting_lag", "pending", "unknown"):
        assert run_state({state: 1, "cancelled": 1, "failed": 1, "exhausted": 1}) not in ("failed", "cancelled")


def test_the_reason_names_exhausted_and_stalled_shards_and_a_stalled_failed_one_by_its_state():
    shards = [dict(shard(1, "exhausted", "exit 3; 3 attempts used"), stalled=None),
              dict(shard(2, "running"), stalled="no heartbeat for 901s"),
              dict(shard(3, "failed", "exit 1"), stalled="no heartbeat for 950s"),
              dict(shard(4, "succeeded"), stalled=None), dict(shard(5, "cancelled"), stalled=None)]
    assert degraded_reason(shards) == ("shard-00001 exhausted: exit 3; 3 attempts used; "
                                       "shard-00002 stalled: no heartbeat for 901s; shard-00003 failed: exit 1")


def test_a_run_whose_only_trouble_is_a_stalled_shard_is_degraded_by_it():
    assert degraded_reason([shard(1, "succeeded"), dict(shard(2, "running"), stalled="no progress for 1801s")]) == (
        "shard-00002 stalled: no progress for 1801s")


def test_the_reason_counts_the_rest_only_past_the_limit():
    at = [shard(n, "failed", f"exit {n}") for n in range(5)]
    assert degraded_reason(at) == "; ".join(f"shard-{n:05d} failed: exit {n}" for n in range(5))
    assert degraded_reason(at + [shard(5, "unknown", "gone")]).endswith("shard-00004 failed: exit 4; and 1 more")


def test_only_attempts_that_are_not_stalled_count_at_work_without_stalled():
    shards = [entry(0, "running", "running", stalled="no heartbeat for 9s"), entry(1, "running", "running"),
              entry(2, "pending", "pending", stalled=None), entry(3, "failed", "failed", stalled="no heartbeat")]
    assert at_work(shards, stalled=False) == 2
    assert at_work(shards) == 3


def test_one_attempt_at_work_is_enough_to_estimate_the_time_left():
    assert time_left("running", False, {"running": 1, "succeeded": 3}, 1, [30], None) == 30


def test_without_a_parallelism_the_running_shards_are_the_slots_and_at_least_one():
    counts = {"running": 0, "pending": 4, "succeeded": 2}
    assert time_left("pending", False, counts, 1, [10], None) == 40  # nothing running: one slot
    assert time_left("running", False, {"pending": 4}, 1, [10], None) == 40  # no running count at all
    assert time_left("running", False, {"running": 2, "pending": 3}, 2, [10], None) == 30  # 5 left, 2 at a time


def test_the_rounds_are_whole_the_last_one_partly_filled():
    assert time_left("running", False, {"running": 3, "pending": 4}, 3, [10], 3) == 30  # 7 left: 3 rounds of 3
    assert time_left("running", False, {"running": 1}, 1, [10, 11], 4) == 10  # round(10.5 * 1)
