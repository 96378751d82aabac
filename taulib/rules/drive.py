"""Driving a run: when a run is done being driven, and what a person is told when it changes. Pure
(tests/test_rules_drive.py).

A run is finished when it succeeded, or when nothing of it is live any more (no shard pending, running, in
accounting lag, unknown or waiting for its winner; no shard deferred by the scheduler's limits) and no retry would
be made (no retryable shard, or the run is past its failure budget): a run stopped by its budget, by cancellation or
by shards that used every attempt. Until then tau-drive keeps cycling.
The events a notification is sent for are changes against what was last told: the run finished (`done` when it
succeeded, `stopped` otherwise: once each time it finishes, so a run reopened and finished again is told again),
and each shard newly exhausted (`exhausted`, once per shard, however many drivers look).
"""

from __future__ import annotations

from typing import Any

LIVE = ("running", "pending", "accounting_lag", "candidate", "unknown")


def finished(status: dict[str, Any]) -> str | None:
    """Why the run is finished (`succeeded`, or the reason it stopped), or None while a cycle may still move it."""
    if status["state"] == "succeeded":
        return "succeeded"
    if any(status["counts"][state] for state in LIVE):
        return None
    if status["deferred"] is not None and status["deferred"]["shards"]:
        return None
    if status["retryable"] and status["budget"]["stopped"] is None:
        return None
    return status["reason"] or f"the run is {status['state']}"


def events(told: dict[str, Any], status: dict[str, Any]) -> list[dict[str, Any]]:
    """The notifications owed: [{event, shard_id}] against `told` ({state, exhausted}: what was last told)."""
    exhausted = [s["id"] for s in status["shards"] if s["state"] == "exhausted"]
    out = [{"event": "exhausted", "shard_id": sid} for sid in exhausted if sid not in told["exhausted"]]
    if finished(status) is not None and told["state"] != status["state"]:
        out.append({"event": "done" if status["state"] == "succeeded" else "stopped", "shard_id": None})
    return out


def told_after(told: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """What has been told once `events(told, status)` were sent."""
    exhausted = sorted(set(told["exhausted"]) | {s["id"] for s in status["shards"] if s["state"] == "exhausted"})
    return {"state": status["state"] if finished(status) is not None else None, "exhausted": exhausted}
