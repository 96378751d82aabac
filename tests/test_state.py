"""The run status roll-up's degraded reason (taulib.state.degraded_reason), reached directly."""

from __future__ import annotations

from taulib import state


def shard(n: int, st: str, reason: str = "why") -> dict:
    return {"id": f"shard-{n:05d}", "state": st, "reason": reason}


def test_a_run_without_failed_or_unknown_shards_is_not_degraded():
    shards = [shard(0, "succeeded"), shard(1, "running"), shard(2, "accounting_lag"), shard(3, "candidate"),
              shard(4, "pending")]
    assert state.degraded_reason(shards) is None


def test_the_reason_names_failed_and_unknown_shards_in_order_with_their_own_reasons():
    shards = [shard(0, "succeeded"), shard(1, "failed", "the client exited with status 3"),
              shard(2, "running"), shard(3, "unknown", "absent from queue and accounting after the deadline")]
    assert state.degraded_reason(shards) == ("shard-00001 failed: the client exited with status 3; "
                                             "shard-00003 unknown: absent from queue and accounting after the "
                                             "deadline")


def test_the_reason_names_five_shards_and_counts_the_rest():
    shards = [shard(n, "failed", f"exit {n}") for n in range(12)]
    reason = state.degraded_reason(shards)
    assert reason.split("; ")[:5] == [f"shard-{n:05d} failed: exit {n}" for n in range(5)]
    assert reason.endswith("; and 7 more")
