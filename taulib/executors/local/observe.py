"""Observing local attempts (`tau-observe` under the local executor): the supervisor's and tasks' records read the
way squeue and sacct see a Slurm job (see `taulib.executors.local`). Reads records and /proc; writes nothing."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from taulib.executors.local import records
from taulib.jsonio import Record
from taulib.processes import alive

if TYPE_CHECKING:
    from taulib.rundir.run import Run

CANCEL_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def observe(run: Run, attempts: list[Record]) -> list[Record]:
    """Normalised observations of local attempts."""
    supervisors: dict[str, bool] = {}
    out = []
    for attempt in attempts:
        sched = attempt["scheduler"]
        sub, index = sched["job_id"], sched["task_index"]
        if sub not in supervisors:
            rec = run.dir.read(records.supervisor(sub), "tau.local-supervisor")
            supervisors[sub] = rec is not None and alive(rec["pid"], rec["start_ticks"])
        task = run.dir.read(records.task(sub, index), "tau.local-task")
        queue = accounting = None
        if task is None:
            if supervisors[sub]:
                queue = {"state": "pending", "raw": "PENDING", "exit_code": None, "reason": None}
        elif task["state"] == "running":
            if alive(task["pid"], task["start_ticks"]):
                queue = {"state": "running", "raw": "RUNNING", "exit_code": None, "reason": None}
        elif task["state"] == "skipped":
            accounting = {"state": "cancelled", "raw": "CANCELLED", "exit_code": None,
                          "reason": "never started: its shard was cancelled"}
        else:
            accounting = finished(task)
        out.append({"shard_id": attempt["shard_id"], "attempt_id": attempt["attempt_id"], "scheduler": sched,
                    "queue": queue, "accounting": accounting})
    return out


def finished(task: Record) -> Record:
    """The accounting view of a finished task (one the supervisor stopped past its time limit ended timed out,
    however it exited)."""
    if task.get("timed_out"):
        return {"state": "timed_out", "raw": "TIMEOUT", "exit_code": task["exit_code"],
                "reason": "TIMEOUT: the supervisor stopped it at its time limit (scheduler.local.time_limit)"}
    killed = task.get("memory_killed")
    if killed is not None:
        used = "" if killed["rss_bytes"] is None else f"its processes used {_mib(killed['rss_bytes'])}"
        if killed["cause"] == "limit":
            why = (f"{used}, over the {_mib(killed['limit_bytes'])} it asked for; killed by the supervisor, which "
                   "samples its memory every second (scheduler.local.mem)")
        else:
            why = (f"{used} (sampled); " if used else "") + ("killed by the kernel's OOM killer (its memory cgroup "
                                                             "counted an oom_kill)")
        return {"state": "out_of_memory", "raw": "OUT_OF_MEMORY", "exit_code": None, "reason": f"OUT_OF_MEMORY: {why}"}
    sig = task["signal"]
    if sig is not None:
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        state = "cancelled" if sig in CANCEL_SIGNALS else "failed"
        return {"state": state, "raw": f"SIGNALED {name}", "exit_code": None, "reason": f"killed by {name}"}
    code = task["exit_code"]
    if code == 0:
        return {"state": "completed", "raw": "COMPLETED", "exit_code": 0, "reason": None}
    return {"state": "failed", "raw": "FAILED", "exit_code": code, "reason": f"exited with status {code}"}


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"
