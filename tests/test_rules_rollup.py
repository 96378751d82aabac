"""taulib.rules.rollup: a shard's state, a run's state and a run's degraded reason, reached directly."""

from __future__ import annotations

import pytest

from taulib.rules.rollup import LIFECYCLE, SHARD_STATES, degraded_reason, lifecycle, run_state, shard_state


def test_shard_state_is_sealed_by_a_winner_whatever_its_latest_attempt_says():
    assert shard_state(True, ("failed", "x")) == ("succeeded", "sealed by its winner")
    assert shard_state(True, None) == ("succeeded", "sealed by its winner")


def test_shard_state_without_a_winner_follows_the_latest_attempt():
    assert shard_state(False, None) == ("pending", "not submitted yet")
    state, reason = shard_state(False, ("succeeded", "done"))
    assert state == "candidate" and "run tau-winner" in reason
    for effective in ("running", "accounting_lag", "pending", "unknown", "failed"):
        assert shard_state(False, (effective, "why")) == (effective, "why")


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
