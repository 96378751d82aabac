"""taulib.rules.retry: which shards get a new attempt."""

from __future__ import annotations

from taulib.rules.retry import ShardFacts, select_initial, select_retry

SHARDS = [ShardFacts("shard-00000", "succeeded", "sealed by its winner"),
          ShardFacts("shard-00001", "failed", "the client exited with status 3"),
          ShardFacts("shard-00002", "running", "running"),
          ShardFacts("shard-00003", "unknown", "absent past the deadline"),
          ShardFacts("shard-00004", "candidate", "its winner is not published yet"),
          ShardFacts("shard-00005", "accounting_lag", "not yet in accounting"),
          ShardFacts("shard-00006", "pending", "queued")]


EXHAUSTED = ShardFacts("shard-00007", "exhausted", "the client exited with status 3; 3 attempts used")
CANCELLED = ShardFacts("shard-00008", "cancelled", "cancelled by the user at 2026-12-01T10:00:00.000000Z")


def test_only_failed_and_unknown_shards_are_retried_and_the_rest_left_alone():
    assert select_retry(SHARDS + [EXHAUSTED, CANCELLED], explicit=False) == (["shard-00001", "shard-00003"], [], [])


def test_shards_named_explicitly_that_are_not_retryable_are_reported_with_their_state_and_reason():
    chosen, skipped, granted = select_retry(SHARDS + [CANCELLED], explicit=True)
    assert chosen == ["shard-00001", "shard-00003"] and granted == []
    assert skipped == [{"shard_id": s.shard_id, "state": s.state, "reason": "not retryable: " + s.reason}
                       for s in SHARDS + [CANCELLED] if s.state not in ("failed", "unknown")]


def test_an_exhausted_shard_named_explicitly_is_granted_one_more_attempt():
    assert select_retry([EXHAUSTED], explicit=False) == ([], [], [])
    assert select_retry([EXHAUSTED, SHARDS[1]], explicit=True) == (["shard-00007", "shard-00001"], [],
                                                                   ["shard-00007"])


def test_a_run_past_its_failure_budget_retries_nothing_unless_a_person_names_shards():
    stopped = "past the run's failure budget"
    assert select_retry(SHARDS, explicit=False, stopped=stopped) == ([], [], [])
    assert select_retry([SHARDS[1], EXHAUSTED], explicit=True, stopped=stopped) == (
        ["shard-00001", "shard-00007"], [], ["shard-00007"])


def test_nothing_retryable_selects_nothing():
    assert select_retry([SHARDS[0], SHARDS[2]], explicit=False) == ([], [], [])
    assert select_retry([], explicit=True) == ([], [], [])


def test_the_first_submission_gives_an_attempt_to_every_shard_that_has_none_and_is_not_cancelled():
    assert select_initial([("shard-00000", 0), ("shard-00001", 2), ("shard-00002", 0)]) == (
        ["shard-00000", "shard-00002"], 0)
    assert select_initial([("shard-00000", 1)]) == ([], 0)
    assert select_initial([("shard-00000", 0), ("shard-00001", 0)], frozenset({"shard-00000"})) == (
        ["shard-00001"], 0)


FRESH = [("shard-00000", 0), ("shard-00001", 1), ("shard-00002", 0), ("shard-00003", 0), ("shard-00004", 0)]


def test_a_canary_takes_the_first_shards_without_an_attempt_and_holds_the_rest_back():
    assert select_initial(FRESH, limit=2) == (["shard-00000", "shard-00002"], 2)
    assert select_initial(FRESH, limit=10) == (["shard-00000", "shard-00002", "shard-00003", "shard-00004"], 0)
    assert select_initial(FRESH, frozenset({"shard-00002"}), limit=2) == (["shard-00000", "shard-00003"], 1)


def test_a_canary_of_named_shards_takes_only_those_that_have_no_attempt_yet():
    only = frozenset({"shard-00001", "shard-00003"})
    assert select_initial(FRESH, only=only) == (["shard-00003"], 3)
    assert select_initial(FRESH, only=only, limit=1) == (["shard-00003"], 3)
    assert select_initial(FRESH, frozenset({"shard-00003"}), only=only) == ([], 3)


def test_after_the_first_submission_a_shard_the_limits_deferred_gets_its_first_attempt_from_a_retry():
    facts = [ShardFacts("shard-00000", "failed", "exit 1", 1),
             ShardFacts("shard-00001", "pending", "not submitted yet"),
             ShardFacts("shard-00002", "pending", "queued", 1), ShardFacts("shard-00003", "cancelled", "by user")]
    assert select_retry(facts, explicit=False, unsubmitted=True) == (["shard-00000", "shard-00001"], [], [])
    assert select_retry(facts, explicit=False) == (["shard-00000"], [], [])  # before it: tau-submit's to give
    assert select_retry(facts, explicit=False, stopped="past the budget", unsubmitted=True) == ([], [], [])
