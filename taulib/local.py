"""The embedded local executor: a tiny Slurm for one machine, with no daemon.

`tau-submit` starts one detached supervisor process per submission (`python -m taulib.local RUN SUBMISSION`). The
supervisor runs each task of the submission (`tau-attempt run`) as its own process group, at most `max_parallel`
at once, and keeps two kinds of records in `submissions/<id>/local/`, written through the one writer:

  supervisor.json     its pid and process start time (so a recycled pid is never mistaken for it)
  task-NNNNN.json     per task: running (pid, start time) then finished (exit code or signal)

`observe` reads them the way squeue and sacct see a Slurm job:
  queue       a task whose recorded process is alive is running; an unstarted task under a live supervisor is
              pending
  accounting  a finished task: exit 0 completed, non-zero failed, SIGTERM/SIGINT/SIGHUP cancelled, other signals
              failed
  absent      a task recorded running whose process is gone without a finished record, or an unstarted task
              whose supervisor is gone: the attempt vanished, and reconcile treats it like a job missing from
              both squeue and sacct (accounting lag, then unknown)

Only the supervisor writes its folder, under the lock `locks/local-<submission>.lock` held for its lifetime.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from taulib import jsonio, layout, locks
from taulib.errors import Busy, TauError

CANCEL_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
STARTUP_WAIT = 5.0


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


# -- starting ---------------------------------------------------------------------------------------------------

def spawn_supervisor(run, submission_id: str) -> None:
    """Start the detached supervisor of a submission (it exits at once if one already runs)."""
    log = run.dir.open_append(f"submissions/{submission_id}/local/supervisor.log")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "taulib.local", run.path, submission_id],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                close_fds=True)
    finally:
        os.close(log)
    # Wait (briefly) until it has recorded itself, so that an observation right after tau-submit sees its tasks
    # pending instead of absent. A supervisor that exits at once (another one runs) ends the wait too.
    deadline = time.monotonic() + STARTUP_WAIT
    while time.monotonic() < deadline and proc.poll() is None:
        record = run.dir.read(layout.local_supervisor(submission_id), "tau.local-supervisor")
        if record is not None and record["pid"] == proc.pid:
            return
        time.sleep(0.01)


def supervise(run_dir: str, submission_id: str) -> int:
    """The supervisor's main loop; returns its exit status."""
    from taulib.run import Run

    os.umask(0o077)
    with Run(run_dir) as run:
        sub = run.dir.require(f"submissions/{submission_id}/plan.json", "tau.submission-plan")
        max_parallel = run.plan["scheduler"]["local"]["max_parallel"]
        try:
            with locks.hold(run.dir, f"local-{submission_id}", timeout=0):
                return _supervise(run, sub, max_parallel)
        except Busy:
            return 0  # another supervisor already runs this submission


def _supervise(run, sub: dict, max_parallel: int) -> int:
    sid = sub["submission_id"]
    me = os.getpid()
    rel = layout.local_supervisor(sid)
    previous = run.dir.read(rel, "tau.local-supervisor")
    run.dir.replace(rel, {
        "kind": "tau.local-supervisor", "schema_version": 1, "run_id": run.run_id, "submission_id": sid,
        "pid": me, "start_ticks": process_start_ticks(me) or 0, "started_at": jsonio.now_rfc3339(),
        "max_parallel": max_parallel, "revision": 1 if previous is None else previous["revision"] + 1})
    running: dict[int, tuple[int, str]] = {}  # pid -> (task index, record path)
    stopping = {"signal": None}

    def forward(signum, frame):  # scancel of the whole job: pass it on to every task, then wait for them
        stopping["signal"] = signum
        for pid in running:
            try:
                os.killpg(pid, signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    queue = sorted(sub["tasks"], key=lambda t: t["task_index"])
    for task in queue:
        if stopping["signal"] is not None:
            break
        index = task["task_index"]
        record_rel = layout.local_task(sid, index)
        if run.dir.exists(record_rel):
            continue  # started by an earlier supervisor of this submission: never run a task twice
        while len(running) >= max_parallel:
            _reap(run, running, block=True)
        if stopping["signal"] is not None:
            break
        pid = _start_task(run, sub, index)
        running[pid] = (index, record_rel)
        ticks = process_start_ticks(pid) or 0
        run.dir.replace(record_rel, {
            "kind": "tau.local-task", "schema_version": 1, "run_id": run.run_id, "submission_id": sid,
            "task_index": index, "revision": 1, "state": "running", "pid": pid, "start_ticks": ticks,
            "started_at": jsonio.now_rfc3339(), "finished_at": None, "exit_code": None, "signal": None})
    while running:
        _reap(run, running, block=True)
    return 0


def _start_task(run, sub: dict, index: int) -> int:
    sid = sub["submission_id"]
    env = dict(os.environ)
    env.update({"TAU_LOCAL_JOB_ID": sid, "TAU_LOCAL_TASK_ID": str(index)})
    log = run.dir.open_append(f"submissions/{sid}/local/task-{index:05d}.log")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "taulib.cli.attempt", "run", run.path, "--submission", sid],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                close_fds=True, env=env)
    finally:
        os.close(log)
    return proc.pid


def _reap(run, running: dict, block: bool) -> None:
    try:
        pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
    except ChildProcessError:
        running.clear()
        return
    except InterruptedError:
        return
    if pid == 0 or pid not in running:
        return
    index, record_rel = running.pop(pid)
    try:
        os.killpg(pid, signal.SIGKILL)  # like Slurm ending a job step: nothing of the task outlives it
    except (ProcessLookupError, PermissionError):
        pass
    record = run.dir.read(record_rel, "tau.local-task")
    if record is None:  # finished before its running record was written
        return
    code = os.waitstatus_to_exitcode(status)
    record = dict(record, revision=record["revision"] + 1, state="finished", finished_at=jsonio.now_rfc3339(),
                  exit_code=code if code >= 0 else None, signal=-code if code < 0 else None)
    run.dir.replace(record_rel, record)


# -- observing --------------------------------------------------------------------------------------------------

def observe(run, attempts: list[dict]) -> list[dict]:
    """Normalised observations of local attempts (see the module docstring)."""
    supervisors: dict[str, bool] = {}
    out = []
    for attempt in attempts:
        sched = attempt["scheduler"]
        sub, index = sched["job_id"], sched["task_index"]
        if sub not in supervisors:
            rec = run.dir.read(layout.local_supervisor(sub), "tau.local-supervisor")
            supervisors[sub] = rec is not None and alive(rec["pid"], rec["start_ticks"])
        task = run.dir.read(layout.local_task(sub, index), "tau.local-task")
        queue = accounting = None
        if task is None:
            if supervisors[sub]:
                queue = {"state": "pending", "raw": "PENDING", "exit_code": None, "reason": None}
        elif task["state"] == "running":
            if alive(task["pid"], task["start_ticks"]):
                queue = {"state": "running", "raw": "RUNNING", "exit_code": None, "reason": None}
        else:
            accounting = _finished(task)
        out.append({"shard_id": attempt["shard_id"], "attempt_id": attempt["attempt_id"], "scheduler": sched,
                    "queue": queue, "accounting": accounting})
    return out


def _finished(task: dict) -> dict:
    sig = task["signal"]
    if sig is not None:
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        state = "cancelled" if sig in CANCEL_SIGNALS else "failed"
        return {"state": state, "raw": f"SIGNALED {name}", "exit_code": None, "reason": f"killed by {name}"}
    code = task["exit_code"]
    if code == 0:
        return {"state": "completed", "raw": "COMPLETED", "exit_code": 0, "reason": None}
    return {"state": "failed", "raw": "FAILED", "exit_code": code, "reason": f"exited with status {code}"}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m taulib.local RUN_DIR SUBMISSION_ID", file=sys.stderr)
        return 2
    try:
        return supervise(args[0], args[1])
    except TauError as exc:
        sys.stderr.write(jsonio.canonical({"error": exc.name, "code": exc.code, "command": "tau-local",
                                           "message": f"tau-local: {exc.message}"}).decode())
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
