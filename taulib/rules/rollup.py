"""The roll-up: a shard's state from its winner, its cancellation and its newest attempt's verdict, and a run's
from its shards'.

Pure (tests/test_rules_rollup.py). A shard with a winner is sealed (succeeded) whatever else is recorded; a shard
the user cancelled is `cancelled`; otherwise it is its newest attempt's verdict, where an attempt that succeeded
but whose winner is not published yet is a `candidate`, and a retryable verdict with every attempt of the budget
used is `exhausted`. A run succeeds when every shard has; otherwise the least advanced live state names it; a run
none of whose shards is live has failed when a shard failed or is exhausted, else it is cancelled. A run is degraded
exactly when some shard failed, is unknown or exhausted, or stalled (running without a heartbeat), and its reason
names the first few of them. `lifecycle` says a run's state in the words a Kubernetes workload's status uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taulib.rules.budget import RETRYABLE, exhausted

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

SHARD_STATES = ("succeeded", "candidate", "running", "accounting_lag", "pending", "unknown", "failed", "exhausted",
                "cancelled")
DEGRADED = RETRYABLE | {"exhausted"}
REASON_SHARDS = 5  # shards named in a run's reason; the shards list has every one
# a run's state -> its `lifecycle`, the cross-engine word a Kubernetes workload's status carries too (tau-status(7)):
# still settling is running, and a run that ended without succeeding (cancelled included) has failed
LIFECYCLE = {"succeeded": "succeeded", "running": "running", "accounting_lag": "running", "pending": "pending",
             "unknown": "unknown", "failed": "failed", "cancelled": "failed"}


def shard_state(has_winner: bool, latest: tuple[str, str] | None, attempts: int = 0,
                max_attempts: int | None = None, cancelled: str | None = None) -> tuple[str, str]:
    """(state, reason) of a shard: sealed by a winner, else cancelled (`cancelled` is why), else its latest
    attempt's verdict (state, reason), `exhausted` when that would be retried but `attempts` reached
    `max_attempts`."""
    if has_winner:
        return "succeeded", "sealed by its winner"
    if cancelled is not None:
        return "cancelled", cancelled
    if latest is None:
        return "pending", "not submitted yet"
    state, reason = latest
    if state == "succeeded":
        return "candidate", "the latest attempt succeeded; its winner is not published yet (run tau-winner)"
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
    if total and counts.get("succeeded", 0) == total:
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
