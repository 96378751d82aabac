"""What a Slurm task's own output says ended it when accounting does not: a task killed by Slurm's memory
enforcement without cgroups (`JobAcctGatherParams=OverMemoryKill`) ends FAILED by SIGKILL in sacct, never
OUT_OF_MEMORY, and only slurmstepd's line in the task's output names the cause; a task cancelled at its time limit
may end CANCELLED with `DUE TO TIME LIMIT` in its output. Pure (tests/test_slurm_kills.py).

slurmstepd's own words, as Slurm 22.05 to 24.x print them at the start of a line of the task's output (as
`slurmstepd:` or, where it names its node, `slurmstepd-NODE:`):
  slurmstepd-node1: error: StepId=123_4.batch exceeded memory limit (768344064 > 268435456), being killed
  slurmstepd: error: Detected 1 oom_kill event in StepId=123_4.batch. Some of the step tasks have been OOM Killed.
  slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT 2026-12-06T15:51:13 DUE TO TIME LIMIT ***
The output is the client's too, so a line is believed only where accounting agrees that the task was killed (its
row FAILED or CANCELLED, never COMPLETED) and, for a memory line, only when the limit it names is the memory the
attempt asked for (when it asked): a client that prints such a line cannot make an attempt look killed for memory
at a size it never ran at.
"""

from __future__ import annotations

import re
from typing import NamedTuple

TAIL = 64 * 1024  # bytes of a task's output read from its end: slurmstepd writes its line last
_STEPD = rb"^slurmstepd(?:-[A-Za-z0-9._-]{1,255})?: error: "
_OVER = re.compile(_STEPD + rb"[^\n]{0,120}? exceeded memory limit \(([0-9]{1,20}) > ([0-9]{1,20})\), being killed",
                   re.MULTILINE)
_OOM = re.compile(_STEPD + rb"Detected ([0-9]{1,9}) oom[-_]kill events? in [^\n]{0,120}", re.MULTILINE)
_TIME = re.compile(_STEPD + rb"\*\*\* (?:JOB|STEP) [^\n]{0,120}? DUE TO TIME LIMIT \*\*\*", re.MULTILINE)


class Cause(NamedTuple):
    state: str  # out_of_memory | timed_out (tau's vocabulary)
    evidence: str  # slurmstepd's words, quoted


def cause(tail: bytes, accounting_state: str, requested_bytes: int | None) -> Cause | None:
    """What the output's `tail` says killed a task whose accounting row is in `accounting_state` (tau's
    vocabulary), asked for `requested_bytes` of memory (None: unknown or none); None when it says nothing
    believable."""
    if accounting_state not in ("failed", "cancelled"):
        return None
    for match in reversed(list(_OVER.finditer(tail))):
        used, limit = int(match[1]), int(match[2])
        if used > limit and (requested_bytes is None or limit == requested_bytes):
            return Cause("out_of_memory", _quote(match[0]))
    found = list(_OOM.finditer(tail))
    if found and int(found[-1][1]) > 0:
        return Cause("out_of_memory", _quote(found[-1][0]))
    found = list(_TIME.finditer(tail))
    if found:
        return Cause("timed_out", _quote(found[-1][0]))
    return None


def _quote(line: bytes) -> str:
    return line.decode("ascii", errors="replace")
