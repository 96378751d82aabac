"""What attempts cost and whether their requests were right: seff's arithmetic over the figures executors measured.
Pure (tests/test_rules_efficiency.py).

An attempt's CPU efficiency is its CPU time over its wall time times its cores (`cpu_seconds / (elapsed_seconds *
cpus)`), its memory efficiency its peak resident memory over the memory it requested; either is None when its
denominator is zero or unknown (a task that never started, memory nobody requested), never a guess. A run's figures
add up every measured attempt, failed ones too (they cost the same): core-hours and GPU-hours of allocation, CPU
efficiency over the whole (total CPU time over total core time), memory efficiency as the mean of its attempts'
and the largest of them, the largest peak, and the slowest attempts. Attempts that finished without figures yet
(accounting lags, or a tau that measured nothing ran them) are counted apart, never as zero; so are attempts that
ran and asked for memory but have no peak (`memory_unmeasured`: under Slurm, a task shorter than the accounting's
sampling period, JobAcctGatherFrequency, is never sampled), which are neither "no memory requested" nor a zero peak.
"""

from __future__ import annotations

from typing import Any

SLOWEST = 5  # attempts a run's summary names as its slowest
FIGURES = ("state", "source", "elapsed_seconds", "cpu_seconds", "cpus", "gpus", "max_rss_bytes",
           "mem_requested_bytes", "time_limit_seconds")


def _ratio(part: float | None, whole: float | None) -> float | None:
    if part is None or not whole:
        return None
    return round(part / whole, 4)


def attempt(figures: dict[str, Any] | None) -> dict[str, Any]:
    """A shard's `usage` in the status: the figures of its attempt and its two efficiencies (`measured` False and
    every figure None while it has none)."""
    if figures is None:
        return {"measured": False, **{key: None for key in FIGURES}, "cpu_efficiency": None,
                "memory_efficiency": None}
    return {"measured": True, **{key: figures[key] for key in FIGURES},
            "cpu_efficiency": _ratio(figures["cpu_seconds"], figures["elapsed_seconds"] * figures["cpus"]),
            "memory_efficiency": _ratio(figures["max_rss_bytes"], figures["mem_requested_bytes"])}


def memory_unmeasured(figures: dict[str, Any]) -> bool:
    """Whether an attempt's figures (or its `usage`) lack the peak of memory it asked for although it ran: a task
    that never started (no wall time) had nothing to sample."""
    return figures["max_rss_bytes"] is None and bool(figures["mem_requested_bytes"]) and figures["elapsed_seconds"] > 0


def summary(measured: list[dict[str, Any]], unmeasured: int, reason: str | None = None) -> dict[str, Any]:
    """The run's `efficiency` from the figures of every measured attempt (each with its `shard_id` and
    `attempt_id`), the count of finished attempts without figures, and why the executor could not be asked for
    them now (None: it could)."""
    core = sum(f["elapsed_seconds"] * f["cpus"] for f in measured)
    cpu = sum(f["cpu_seconds"] for f in measured)
    memory = [r for r in (_ratio(f["max_rss_bytes"], f["mem_requested_bytes"]) for f in measured) if r is not None]
    peaks = [f["max_rss_bytes"] for f in measured if f["max_rss_bytes"] is not None]
    unsampled = sum(1 for f in measured if memory_unmeasured(f))
    slowest = sorted(measured, key=lambda f: (-f["elapsed_seconds"], f["shard_id"], f["attempt_id"]))[:SLOWEST]
    return {
        "measured": len(measured), "unmeasured": unmeasured, "reason": reason,
        "core_hours": round(core / 3600, 4),
        "gpu_hours": round(sum(f["elapsed_seconds"] * f["gpus"] for f in measured) / 3600, 4),
        "cpu_seconds": round(cpu, 3),
        "cpu_efficiency": _ratio(cpu, core),
        "memory_efficiency": round(sum(memory) / len(memory), 4) if memory else None,
        "memory_efficiency_max": max(memory) if memory else None,
        "max_rss_bytes": max(peaks) if peaks else None,
        "memory_unmeasured": unsampled,
        "slowest": [{"shard_id": f["shard_id"], "attempt_id": f["attempt_id"],
                     "elapsed_seconds": f["elapsed_seconds"]} for f in slowest],
    }
