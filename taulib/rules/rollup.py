"""The roll-up: a shard's state from its winner, its cancellation and its newest attempt's verdict, and a run's
from its shards'.

Pure (tests/test_rules_rollup.py). A shard with a winner is sealed (succeeded) whatever else is recorded; a shard
the user cancelled is `cancelled`; otherwise it is its newest attempt's verdict, where an attempt that succeeded
but whose winner is not published yet is a `candidate`, and a retryable verdict with every attempt of the budget
used is `exhausted`. A run succeeds when every shard has; otherwise the least advanced live state names it; a run
none of whose shards is live has failed when a shard failed or is exhausted, else it is cancelled. A run is degraded
exactly when some shard failed, is unknown or exhausted, or stalled (running without a heartbeat), and its reason
names the first few of them. `lifecycle` says a run's state in the words a Kubernetes workload's status uses.
A run has settled when it ended and none of its attempts is still submitted or running; the time left is estimated
only while some attempt is at work and the run has not ended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taulib.rules.budget import RETRYABLE, exhausted

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

ENDED = ("succeeded", "failed", "cancelled")  # a run's states with nothing left that would run without a new command
AT_WORK = ("pending", "running", "accounting_lag")  # an attempt's verdicts while it is submitted or running
LEFT = ("running", "pending", "accounting_lag", "candidate", "unknown", "failed")  # shards still to be done
SHARD_STATES = ("succeeded", "candidate", "running", "accounting_lag", "pending", "unknown", "failed", "exhausted",
                "cancelled")
DEGRADED = RETRYABLE | {"exhausted"}
REASON_SHARDS = 5  # shards named in a run's reason; the shards list has every one
# a run's state -> its `lifecycle`, the cross-engine word a Kubernetes workload's status carries too (tau-status(7)):
# still settling is running, and a run that ended without succeeding (cancelled included) has failed
LIFECYCLE = {"succeeded": "succeeded", "running": "running", "accounting_lag": "running", "pending": "pending",
             "unknown": "unknown", "failed": "failed", "cancelled": "failed"}


def shard_state(has_winner: bool, latest: tuple[str, str] | None, attempts: int = 0,
                max_attempts: int | None = None, cancelled: str | None = None,
                futile: str | None = None) -> tuple[str, str]:
    """(state, reason) of a shard: sealed by a winner, else cancelled (`cancelled` is why), else its latest
    attempt's verdict (state, reason), `exhausted` when that would be retried but `attempts` reached
    `max_attempts`, or a retry could not help (`futile` says why: `rules.escalation.next_attempt`)."""
    if has_winner:
        return "succeeded", "sealed by its winner"
    if cancelled is not None:
        return "cancelled", cancelled
    if latest is None:
        return "pending", "not submitted yet"
    state, reason = latest
    if state == "succeeded":
        return "candidate", "the latest attempt succeeded; its winner is not published yet (run tau-winner)"
    if futile is not None and state in RETRYABLE:
        return "exhausted", f"{reason}; {futile}"
    if max_attempts is not None and exhausted(state in RETRYABLE, attempts, max_attempts):
        return "exhausted", (f"{reason}; {attempts} attempts used of a budget of {max_attempts}, not retried "
                             "(tau-retry --shard grants one more)")
    return state, reason


def lifecycle(run_state: str) -> str:
    """The run's state in the words every tau status shares with a workload's (`LIFECYCLE`)."""
    return LIFECYCLE[run_state]


def run_state(counts: dict[str, int]) -> str:
    """The run's state from the count of its shards in each state."""
    total = sum(counts.values())
    if total and counts.get("succeeded") == total:
        return "succeeded"
    for state in ("running", "candidate", "accounting_lag", "pending", "unknown"):
        if counts.get(state):
            return "running" if state == "candidate" else state
    if counts.get("cancelled") and not (counts.get("failed") or counts.get("exhausted")):
        return "cancelled"
    return "failed"


def degraded_reason(shards: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a run is degraded (some shard failed, unknown, exhausted or stalled), in the words every tau status uses;
    None when it is not. `shards` are the shard entries of a run status ({"id", "state", "reason", ...}; a
    "stalled" entry, when present, says why the shard is stalled)."""
    bad = [s for s in shards if s["state"] in DEGRADED or s.get("stalled")]
    if not bad:
        return None
    parts = [f"{s['id']} stalled: {s['stalled']}" if s.get("stalled") and s["state"] not in DEGRADED
             else f"{s['id']} {s['state']}: {s['reason']}" for s in bad[:REASON_SHARDS]]
    if len(bad) > REASON_SHARDS:
        parts.append(f"and {len(bad) - REASON_SHARDS} more")
    return "; ".join(parts)


def at_work(shards: Sequence[Mapping[str, Any]], *, stalled: bool = True) -> int:
    """How many shard entries of a run status have an attempt submitted or running (its verdict, the entry's
    `evidence.effective_state`, is pending, running or in accounting lag); with `stalled=False`, not counting the
    ones that are stalled (a hung attempt is not getting anything done)."""
    return sum(1 for s in shards if ((s.get("evidence") or {}).get("effective_state") in AT_WORK
                                     and (stalled or not s.get("stalled"))))


def settled(run_state: str, shards: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a run has come to rest: it ended (succeeded, failed, cancelled) and none of its attempts is still
    submitted or running (a cancelled shard's attempt may run on until the executor has stopped it)."""
    return run_state in ENDED and not at_work(shards)


def time_left(run_state: str, stopped: bool, counts: Mapping[str, int], working: int, durations: Sequence[float],
              parallel: int | None) -> int | None:
    """Seconds until every shard left is done, estimated from finished attempts' `durations`: their mean times the
    rounds the executor's parallelism (`parallel`, or else the shards running now, at least 1) needs for the shards
    left. None when there is no end to estimate: the run ended (`run_state` succeeded, failed or cancelled) or its
    budget `stopped` it, no attempt is at work (`working`: submitted or running and not stalled; a hung or idle run
    waits on a person, not on time), or no attempt has finished yet."""
    if run_state in ENDED or stopped or working <= 0 or not durations:
        return None
    left = max(sum(counts.get(state, 0) for state in LEFT), working)
    slots = parallel or counts.get("running") or 1
    return round(sum(durations) / len(durations) * -(-left // slots))
