"""Retry selection (SPEC 6): which shards get a new attempt. Pure (tests/test_rules_retry.py).

A shard is retryable when it has no winner and its newest attempt's verdict is failed or unknown (`RETRYABLE`):
a sealed shard is never touched, a live one never doubled. The first submission gives an attempt to every shard
that has none. The caller feeds the states it read from the run's records under the submit lock, so concurrent
callers see each other's attempts and converge.
"""

from __future__ import annotations

from typing import NamedTuple

from taulib.rules.rollup import RETRYABLE


class ShardFacts(NamedTuple):
    shard_id: str
    state: str  # the shard's rolled-up state (rules.rollup.shard_state)
    reason: str


def select_retry(shards: list[ShardFacts], explicit: bool) -> tuple[list[str], list[dict]]:
    """(shard ids to retry, skipped). With `explicit` (the caller named these shards), each shard that is not
    retryable is reported as skipped with its state and why; otherwise it is simply left alone."""
    chosen, skipped = [], []
    for shard in shards:
        if shard.state in RETRYABLE:
            chosen.append(shard.shard_id)
        elif explicit:
            skipped.append({"shard_id": shard.shard_id, "state": shard.state,
                            "reason": "not retryable: " + shard.reason})
    return chosen, skipped


def select_initial(attempt_counts: list[tuple[str, int]]) -> list[str]:
    """The shards (of (shard id, number of attempts)) that have no attempt yet, in order."""
    return [sid for sid, count in attempt_counts if count == 0]
