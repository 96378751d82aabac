"""Resources that grow on retry: the memory and time an attempt asks for, from its shard's attempt before it. Pure
(tests/test_rules_escalation.py).

The plan's `retry.escalate` says by how much: `mem` and `time` are factors (1 to 16), `max_mem` and `max_time` caps
in Slurm's own spelling. An attempt asks for what the attempt before it asked for, times `mem` when that one ran out
of memory, times `time` when it ran out of time (its terminal classification `out_of_memory` or `timed_out`); any
other failure changes nothing, and a first attempt asks for the plan's own request. A grown request never passes its
cap, and a request the plan does not set (no `mem`, no `time`) is never invented: only what was asked can grow.
Memory is spelt as Slurm spells it (`4096`, `512M`, `4G`, `1T`: mebibytes unless suffixed) and written back in
whole mebibytes or the largest unit that divides it; time as Slurm spells it (`M`, `M:S`, `H:M:S`, `D-H`,
`D-H:M`, `D-H:M:S`) and written back as `D-HH:MM:SS` or `HH:MM:SS`, rounded up to whole seconds.

What the next attempt of a failed shard does (`next_attempt`), so that a killed request is never asked again:
  - ran out of memory (or time): it asks for the grown request; when the cap holds it where it was (the request
    killed was the cap's), a retry would ask the same again: the shard is exhausted at once, with the cap named;
  - killed without a word on why (no result of its own, or its client killed by SIGKILL: what a memory kill looks
    like before the scheduler's accounting says more) while memory grows on retry and the executor has not measured
    it yet: its retry waits for the measurement, at most until the end of the accounting window after it ended;
  - anything else (or once the window has passed): it asks for the same request again.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Mapping

_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
_MEM = re.compile(r"^([0-9]+)([KMGT]?)\Z")
_TIME = re.compile(r"^(?:([0-9]+)-)?([0-9]+)(?::([0-9]{1,2}))?(?::([0-9]{1,2}))?\Z")


def mem_mib(text: str) -> float:
    """Slurm's `--mem` value in mebibytes (ValueError for anything else)."""
    match = _MEM.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a memory size like 4G")
    return int(match[1]) * _UNITS[match[2] or "M"]


def format_mem(mib: float) -> str:
    """Mebibytes as `--mem` takes them: the largest unit that holds them exactly, whole mebibytes at least."""
    whole = math.ceil(mib)
    for unit, size in (("T", 1024 * 1024), ("G", 1024)):
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}M"


def time_seconds(text: str) -> int:
    """Slurm's `--time` value in seconds (ValueError for anything else)."""
    match = _TIME.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a time limit like 10:00 or 1-00:00:00")
    days, first, second, third = match.groups()
    if days is not None:  # D-H, D-H:M, D-H:M:S
        return int(days) * 86400 + int(first) * 3600 + int(second or 0) * 60 + int(third or 0)
    if third is not None:  # H:M:S
        return int(first) * 3600 + int(second) * 60 + int(third)
    return int(first) * 60 + int(second or 0)  # M, M:S


def limit_seconds(limit: int | str | None) -> int | None:
    """A time limit given in seconds or in `--time`'s spelling (the local executor's `time_limit`), in seconds;
    None when none is given."""
    if limit is None or isinstance(limit, int):
        return limit
    return time_seconds(limit)


def format_time(seconds: float) -> str:
    """Seconds as `--time` takes them: D-HH:MM:SS from a day up, else HH:MM:SS, rounded up."""
    whole = math.ceil(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def next_request(previous: Mapping[str, str | None], classification: str | None,
                 escalate: Mapping[str, Any] | None) -> dict[str, str | None]:
    """The request ({mem, time}, Slurm's spelling, None where not set) of the attempt after one that asked for
    `previous` and ended as `classification`."""
    grown = dict(previous)
    if not escalate:
        return grown
    if classification == "out_of_memory" and previous.get("mem") and escalate.get("mem", 1) != 1:
        before = mem_mib(str(previous["mem"]))
        mib = before * float(escalate["mem"])
        if escalate.get("max_mem"):
            mib = min(mib, mem_mib(str(escalate["max_mem"])))
        grown["mem"] = previous["mem"] if mib <= before else format_mem(mib)  # a grant past the cap never shrinks
    if classification == "timed_out" and previous.get("time") and escalate.get("time", 1) != 1:
        before = time_seconds(str(previous["time"]))
        seconds = before * float(escalate["time"])
        if escalate.get("max_time"):
            seconds = min(seconds, time_seconds(str(escalate["max_time"])))
        grown["time"] = previous["time"] if seconds <= before else format_time(seconds)
    return grown


MEASURED = {"OUT_OF_MEMORY": "out_of_memory", "TIMEOUT": "timed_out"}  # executors' accounting states that say why


def ended_as(recorded: str | None, scheduler: str | None, measured: Mapping[str, Any] | None = None) -> str | None:
    """What ended an attempt, as escalation reads it: the scheduler's terminal classification when it says the
    attempt ran out of memory or time (from inside, the allocation sees only its client killed by a signal); else
    the executor's accounting when its state says so (sacct's OUT_OF_MEMORY of a task whose allocation recorded its
    own end, and so was never observed again; the local executor's likewise); else out of memory when the executor
    measured its peak above the memory it requested and it did not complete (Slurm enforcing memory without
    cgroups, `JobAcctGatherParams=OverMemoryKill`, ends such a job FAILED by SIGKILL, not OUT_OF_MEMORY); else the
    classification the attempt recorded itself (None when it recorded none)."""
    if scheduler in ("out_of_memory", "timed_out"):
        return scheduler
    if measured is not None and measured["state"] in MEASURED:  # an attempt that ended itself is not observed
        return MEASURED[measured["state"]]
    if (measured is not None and measured["state"] != "COMPLETED" and measured["max_rss_bytes"] is not None
            and measured["mem_requested_bytes"] and measured["max_rss_bytes"] > measured["mem_requested_bytes"]):
        return "out_of_memory"
    return recorded


class Next(NamedTuple):
    """What a failed shard's next attempt does: `action` submit (asking `request`), wait (until `until`, an epoch)
    or exhausted (no retry can help: `reason` says why and how to grant more)."""

    action: str
    request: dict[str, str | None]
    reason: str | None = None
    until: float | None = None
    cause: str | None = None  # what named the end out of memory or time when only the executor's figures did


CAPS = {"out_of_memory": ("mem", "max_mem", "memory", "--mem SIZE"),
        "timed_out": ("time", "max_time", "time", "--time LIMIT")}


def next_attempt(previous: Mapping[str, str | None], ended: str | None, escalate: Mapping[str, Any] | None,
                 killed: bool, measured: bool, ended_at: float, window: float, now: float) -> Next:
    """The next attempt of a shard whose newest attempt asked for `previous` and ended as `ended` (`ended_as`), at
    `ended_at`; `killed`: it recorded no end of its own, or its client was killed by SIGKILL; `measured`: its
    executor's figures are in; `window`: the accounting window (seconds) a wait is bounded by."""
    grown = next_request(previous, ended, escalate)
    if ended in CAPS and escalate:
        key, cap, what, option = CAPS[ended]
        if previous.get(key) and escalate.get(key, 1) != 1 and grown[key] == previous[key]:
            return Next("exhausted", grown, f"ran out of {what} asking for {previous[key]}, the cap "
                        f"(retry.escalate.{cap}): a retry would ask the same; tau-retry --shard S {option} grants "
                        "more")
        return Next("submit", grown)
    if (ended not in ("cancelled", "node_failed", "preempted", "fenced") and killed and not measured and escalate
            and previous.get("mem") and escalate.get("mem", 1) != 1 and now < ended_at + window):
        return Next("wait", grown, f"killed without a cause yet: its retry waits for the executor's measure of its "
                    f"memory, so that a memory kill is not retried with the same {previous['mem']}",
                    ended_at + window)
    return Next("submit", grown)


def measured_cause(ended: str | None, recorded: str | None, scheduler: str | None,
                   measured: Mapping[str, Any] | None) -> str | None:
    """When only the executor's figures say an attempt ran out of memory or time (`ended`, from `ended_as`), the
    words that name that evidence for a person; None when the attempt or the scheduler said it already."""
    if ended not in CAPS or ended in (recorded, scheduler) or measured is None:
        return None
    said = f"out of {CAPS[ended][2]}: the executor's accounting says {measured['state']}"
    if ended == "out_of_memory" and measured["max_rss_bytes"] and measured["mem_requested_bytes"]:
        said += (f", peak {measured['max_rss_bytes'] / 1048576:.1f} MiB of the "
                 f"{measured['mem_requested_bytes'] / 1048576:.1f} MiB asked")
    return said
