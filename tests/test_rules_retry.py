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


def test_only_failed_and_unknown_shards_are_retried_and_the_rest_left_alone():
    assert select_retry(SHARDS, explicit=False) == (["shard-00001", "shard-00003"], [])


def test_shards_named_explicitly_that_are_not_retryable_are_reported_with_their_state_and_reason():
    chosen, skipped = select_retry(SHARDS, explicit=True)
    assert chosen == ["shard-00001", "shard-00003"]
    assert skipped == [{"shard_id": s.shard_id, "state": s.state, "reason": "not retryable: " + s.reason}
                       for s in SHARDS if s.state not in ("failed", "unknown")]


def test_nothing_retryable_selects_nothing():
    assert select_retry([SHARDS[0], SHARDS[2]], explicit=False) == ([], [])
    assert select_retry([], explicit=True) == ([], [])


def test_the_first_submission_gives_an_attempt_to_every_shard_that_has_none():
    assert select_initial([("shard-00000", 0), ("shard-00001", 2), ("shard-00002", 0)]) == ["shard-00000",
                                                                                           "shard-00002"]
    assert select_initial([("shard-00000", 1)]) == []
