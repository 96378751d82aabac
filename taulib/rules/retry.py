"""Retry selection (tau-retry(1)): which shards get a new attempt. Pure (tests/test_rules_retry.py).

A shard is retryable when it has no winner, is not cancelled, and its newest attempt's verdict is failed or
unknown (`RETRYABLE`) with attempts left in its budget (`rules.budget`): a sealed shard is never touched, a live one
never doubled, a cancelled one never started again. The first submission gives an attempt to every shard
that has none; a shard the scheduler's limits deferred (no attempt yet, after the first submission) gets its first
from the next tau-submit or tau-retry. The caller feeds the states it read from the run's records under the submit
lock, so concurrent callers see each other's attempts and converge.
"""

from __future__ import annotations

from typing import NamedTuple

from taulib.rules.budget import RETRYABLE


class ShardFacts(NamedTuple):
    shard_id: str
    state: str  # the shard's rolled-up state (rules.rollup.shard_state)
    reason: str
    attempts: int = 0  # how many attempts it has had


def select_retry(shards: list[ShardFacts], explicit: bool, stopped: str | None = None, unsubmitted: bool = False
                 ) -> tuple[list[str], list[dict[str, str]], list[str]]:
    """(shard ids to retry, skipped, granted). Without `explicit`, every retryable shard, or none when the run is
    past its failure budget (`stopped` says why). With `explicit` (a person named these shards), each retryable
    shard, and each exhausted one as a grant of one more attempt, whatever the run's budget; each other shard is
    reported as skipped with its state and why. With `unsubmitted` (the run's first submission was made, and the
    scheduler's limits deferred some of its shards), a pending shard without any attempt gets its first too."""
    if stopped is not None and not explicit:
        return [], [], []
    chosen: list[str] = []
    skipped: list[dict[str, str]] = []
    granted: list[str] = []
    for shard in shards:
        if shard.state in RETRYABLE or (unsubmitted and shard.state == "pending" and shard.attempts == 0):
            chosen.append(shard.shard_id)
        elif explicit and shard.state == "exhausted":
            chosen.append(shard.shard_id)
            granted.append(shard.shard_id)
        elif explicit:
            skipped.append({"shard_id": shard.shard_id, "state": shard.state,
                            "reason": "not retryable: " + shard.reason})
    return chosen, skipped, granted


def select_initial(attempt_counts: list[tuple[str, int]], cancelled: frozenset[str] = frozenset(),
                   only: frozenset[str] | None = None, limit: int | None = None) -> tuple[list[str], int]:
    """(the shards, of (shard id, number of attempts), that have no attempt yet and are not cancelled, in order;
    how many of those were held back). A canary takes `only` the named shards, or the first `limit` of them: the
    rest are held back for the next submission."""
    fresh = [sid for sid, count in attempt_counts if count == 0 and sid not in cancelled]
    chosen = fresh if only is None else [sid for sid in fresh if sid in only]
    if limit is not None:
        chosen = chosen[:limit]
    return chosen, len(fresh) - len(chosen)
