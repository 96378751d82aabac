"""Processes of the local executor, known by pid and start time, so that a recycled pid is never mistaken for one
of ours. Reads /proc/PID/stat; writes nothing."""

from __future__ import annotations


def process_start_ticks(pid: int) -> int | None:
    """Start time of a live, non-zombie process in clock ticks since boot, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text[text.rfind(")") + 2:].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def alive(pid: int, start_ticks: int) -> bool:
    return process_start_ticks(pid) == start_ticks
