"""The memory of a local submission's tasks: its limit (the window's request, else `scheduler.local.mem`) and the
supervisor's sampling, as Slurm's `JobAcctGatherParams=OverMemoryKill` enforces memory without cgroups.

Reads: /proc (each task's process tree, `processes.tree_rss`), /proc/self/cgroup and the cgroup's memory.events.
Writes nothing; signals only the process group of a task the supervisor started (SIGKILL over its limit).
Promises: every SAMPLE seconds the resident memory of each task's whole process tree is summed (services and their
children included) and its peak kept; a task over its limit is killed at once and says why (`killed`); a task
that failed while the supervisor's memory cgroup counted an OOM kill (the kernel's OOM killer, cgroup v2 or v1)
says so too. Tasks that share the cgroup cannot be told apart by that count: a task that failed while it rose is
named the OOM killer's victim.
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING, Protocol

from taulib import processes

if TYPE_CHECKING:
    from collections.abc import Mapping

    from taulib.jsonio import Record
    from taulib.rundir.run import Run

SAMPLE = 1.0  # seconds between samples of the tasks' memory (Slurm's --acctg-freq=task=1)


class Sampled(Protocol):
    """What the sampling keeps of a running task (`supervisor.Running`)."""

    peak: int
    killed: Record | None
    oom_kills: int | None  # the cgroup's oom_kill count when it started


def mem_limit(run: Run, sub: Record) -> int | None:
    """The most memory, in bytes, a task of this submission's processes may use together: the window's request
    (grown by retry.escalate, or granted), else the plan's `scheduler.local.mem`; None when neither says."""
    from taulib.rules.escalation import mem_mib

    asked = (sub.get("resources") or {}).get("mem") or run.plan["scheduler"]["local"].get("mem")
    return None if not asked else int(mem_mib(asked) * 1024 * 1024)


class Memory:
    """The memory limit of a submission's tasks and its sampling: every SAMPLE seconds the resident memory of each
    task's whole process tree is summed (services and their children included), its peak kept, and a task over the
    limit is killed at once (SIGKILL to its process group, as Slurm's OverMemoryKill kills a step). The kernel's
    OOM killer is seen in the supervisor's memory cgroup (its oom_kill count): a task that failed while that count
    rose ends out of memory too. A process a task left behind, adopted by the supervisor, is no longer counted as
    the task's (it is swept when the task ends)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.next_sample = 0.0
        self.events = _cgroup_events()

    def sample(self, running: Mapping[int, Sampled]) -> None:
        now = time.monotonic()
        if not running or now < self.next_sample:
            return
        self.next_sample = now + SAMPLE
        for pid, used in processes.tree_rss(list(running)).items():
            task = running[pid]
            task.peak = max(task.peak, used)
            if self.limit is not None and used > self.limit and task.killed is None:
                task.killed = {"cause": "limit", "rss_bytes": used, "limit_bytes": self.limit}
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def killed(self, task: Sampled, code: int) -> Record | None:
        """Why a task that ended with `code` (not 0) was killed for memory: over its limit, or by the kernel's OOM
        killer (the cgroup's oom_kill count rose while it ran: the killer takes the largest process, most often
        the client, which tau-attempt then reports killed by SIGKILL); None else."""
        if task.killed is not None or code == 0 or task.oom_kills is None:
            return task.killed
        now = self.oom_kills()
        if now is None or now <= task.oom_kills:
            return None
        return {"cause": "oom_killer", "rss_bytes": task.peak or None, "limit_bytes": self.limit}

    def oom_kills(self) -> int | None:
        """The cgroup's oom_kill count now (None where it cannot be read)."""
        return None if self.events is None else _oom_kill_count(self.events)


def _cgroup_events() -> str | None:
    """The file of this process's memory cgroup that counts its OOM kills (`oom_kill`): memory.events under cgroup
    v2, memory.oom_control under v1's memory controller; None where neither can be read."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            found = f"/sys/fs/cgroup{path.rstrip('/')}/memory.events"
        elif "memory" in controllers.split(","):
            found = f"/sys/fs/cgroup/memory{path.rstrip('/')}/memory.oom_control"
        else:
            continue
        if _oom_kill_count(found) is not None:
            return found
    return None


def _oom_kill_count(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        return None
    return None
