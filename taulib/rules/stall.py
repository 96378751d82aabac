"""Stalls: when a running attempt is judged stalled, and in which words. Pure (tests/test_rules_stall.py).

A running attempt is stalled when its allocation has written no heartbeat for the plan's `windows.stall_seconds`
(the allocation itself is hung or gone while the scheduler still runs it), or when its client reported progress
(a count of records done in `TAU_PROGRESS_FILE`) and that count has not advanced for `windows.progress_stall_seconds`
(the client is hung while its allocation beats on). A client that never reports progress is judged by the heartbeat
alone; `progress_stall_seconds` null turns the progress rule off. What a stalled attempt gets is the plan's
`windows.stall_action`: `report` shows it stalled in every status, `stop` also stops it (its stop.json, `by`
stall), so that it ends failed with the stall as its reason and the budget retries its shard.
"""

from __future__ import annotations

from typing import Any

ACTIONS = ("report", "stop")


def heartbeat(age_seconds: float, stall_seconds: int) -> str | None:
    """Why an attempt whose last heartbeat is `age_seconds` old is stalled, or None."""
    if age_seconds <= stall_seconds:
        return None
    return (f"no heartbeat for {age_seconds:.0f}s (the run's stall_seconds is {stall_seconds}); the attempt is "
            "still running as far as the scheduler knows")


def progress(records_done: int | None, records: int, still_seconds: float | None,
             progress_stall_seconds: int | None) -> str | None:
    """Why an attempt whose client reported `records_done` of `records`, unchanged for `still_seconds`, is stalled,
    or None (no progress reported, the rule off, or not long enough)."""
    if records_done is None or still_seconds is None or progress_stall_seconds is None:
        return None
    if still_seconds <= progress_stall_seconds or records_done >= records:
        return None
    return (f"no progress for {still_seconds:.0f}s: {records_done} of {records} records done (the run's "
            f"progress_stall_seconds is {progress_stall_seconds})")


def stops(windows: dict[str, Any]) -> bool:
    """Whether the plan stops a stalled attempt (`windows.stall_action` stop)."""
    return windows.get("stall_action") == "stop"  # a plan without one reports (rules.plan.WINDOWS)


def reason(why: str) -> str:
    """The reason a stopped stalled attempt fails with, in every status."""
    return f"stalled: {why}; stopped, as the run's stall_action says"
