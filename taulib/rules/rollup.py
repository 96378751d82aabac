"""The roll-up: a shard's state from its winner and its newest attempt's verdict, and a run's from its shards'.

Pure (tests/test_rules_rollup.py). A shard with a winner is sealed (succeeded) whatever else is recorded; without
one it is its newest attempt's verdict, where an attempt that succeeded but whose winner is not published yet is a
`candidate`. A run succeeds when every shard has; otherwise the least advanced live state names it; a run none of
whose shards is live, and not all succeeded, has failed. A run is degraded exactly when some shard failed or is
unknown (retryable), and its reason names the first few of them.
"""

from __future__ import annotations

SHARD_STATES = ("succeeded", "candidate", "running", "accounting_lag", "pending", "unknown", "failed")
RETRYABLE = frozenset({"failed", "unknown"})
REASON_SHARDS = 5  # shards named in a run's reason; the shards list has every one


def shard_state(has_winner: bool, latest: tuple[str, str] | None) -> tuple[str, str]:
    """(state, reason) of a shard: sealed by a winner, else its latest attempt's verdict (state, reason)."""
    if has_winner:
        return "succeeded", "sealed by its winner"
    if latest is None:
        return "pending", "not submitted yet"
    state, reason = latest
    if state == "succeeded":
        return "candidate", "the latest attempt succeeded; its winner is not published yet (run tau-winner)"
    return state, reason


def run_state(counts: dict[str, int]) -> str:
    """The run's state from the count of its shards in each state."""
    total = sum(counts.values())
    if total and counts.get("succeeded", 0) == total:
        return "succeeded"
    for state in ("running", "candidate", "accounting_lag", "pending", "unknown"):
        if counts.get(state):
            return "running" if state == "candidate" else state
    return "failed"


def degraded_reason(shards: list[dict]) -> str | None:
    """Why a run is degraded (some shard failed or unknown), in the words every tau status uses; None when it
    is not. `shards` are the shard entries of a run status ({"id", "state", "reason", ...})."""
    bad = [s for s in shards if s["state"] in RETRYABLE]
    if not bad:
        return None
    parts = [f"{s['id']} {s['state']}: {s['reason']}" for s in bad[:REASON_SHARDS]]
    if len(bad) > REASON_SHARDS:
        parts.append(f"and {len(bad) - REASON_SHARDS} more")
    return "; ".join(parts)
