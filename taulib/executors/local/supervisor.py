"""The local executor's supervisor: one detached process per submission that runs its tasks, each as its own
process group (see `taulib.executors.local`), at most `max_parallel` of the whole run's at once, with the GPUs of
`scheduler.local.gpus` that its services need, no GPU given to two live tasks.

Reads: the submission plan. Writes: its records (`local.records`), through the one writer, under its lock held for
its whole life. A task's place and GPUs are the locks `local-slot-K` and `local-gpu-K` (`rundir.locks.try_hold`):
every supervisor of the run takes them before it starts a task, shares them with the task's process, and lets them
go once the task and all it left are gone. Memory is sampled and limited as Slurm's OverMemoryKill does (`memory`).
Promises: a task is never run twice (a task with a record was started by an earlier supervisor of the submission);
nothing of a task outlives it: its process group is killed when it ends, and the supervisor is the subreaper of
everything its tasks start, so what a killed task left behind is adopted and stopped (SIGTERM, SIGKILL KILL_WAIT
seconds later) before its place and GPUs are given to another; a task past its time limit
(`scheduler.local.time_limit`, or its window's grown request) is stopped as Slurm stops one and ends timed out;
every task's record says what it used (wait4's rusage).
"""

from __future__ import annotations

import os
import signal
import time
from types import FrameType
from typing import TYPE_CHECKING, BinaryIO

from taulib import env, jsonio, processes
from taulib.errors import Busy
from taulib.executors.local import records, variables
from taulib.executors.local.memory import Memory, mem_limit
from taulib.jsonio import Record
from taulib.processes import alive, start_ticks as process_start_ticks
from taulib.rules import services as service_rules
from taulib.rundir import locks, state
from taulib.rundir.journal import tasks
from taulib.rundir.run import Run

if TYPE_CHECKING:
    import subprocess

STARTUP_WAIT = 5.0


# -- starting ---------------------------------------------------------------------------------------------------

SWEEP_GRACE = 2.0  # seconds a starting supervisor waits for its lock: a sweeper holds it for milliseconds


def spawn(run: Run, submission_id: str) -> None:
    """Start the detached supervisor of a submission (it exits at once if one already runs)."""
    log = run.dir.open_append(f"submissions/{submission_id}/local/supervisor.log")
    try:
        import subprocess  # only where a process is started: tau-reconcile's sweep needs none (~2 ms)

        proc = subprocess.Popen(processes.module_argv("taulib.executors.local", run.path, submission_id),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                close_fds=True)
    finally:
        os.close(log)
    # Wait (briefly) until it has recorded itself, so that an observation right after tau-submit sees its tasks
    # pending instead of absent. A supervisor that exits at once (another one runs) ends the wait too.
    deadline = time.monotonic() + STARTUP_WAIT
    while time.monotonic() < deadline and proc.poll() is None:
        record = run.dir.read(records.supervisor(submission_id), "tau.local-supervisor")
        if record is not None and record["pid"] == proc.pid:
            return
        time.sleep(0.01)


def supervise(run_dir: str, submission_id: str) -> int:
    """The supervisor's main loop; returns its exit status."""
    os.umask(0o077)
    with Run(run_dir) as run:
        sub = run.dir.require(f"submissions/{submission_id}/plan.json", "tau.submission-plan")
        max_parallel = run.plan["scheduler"]["local"]["max_parallel"]
        try:  # a live supervisor holds the lock for its whole life; a sweeper (`sweep`) for moments
            with locks.hold(run.dir, records.supervisor_lock(submission_id), timeout=SWEEP_GRACE):
                return _supervise(run, sub, max_parallel)
        except Busy:
            return 0  # another supervisor already runs this submission


def _supervise(run: Run, sub: Record, max_parallel: int) -> int:
    sid = sub["submission_id"]
    me = os.getpid()
    rel = records.supervisor(sid)
    previous = run.dir.read(rel, "tau.local-supervisor")
    run.dir.replace(rel, {
        "kind": "tau.local-supervisor", "schema_version": 1, "run_id": run.run_id, "submission_id": sid,
        "pid": me, "start_ticks": process_start_ticks(me) or 0, "started_at": jsonio.now_rfc3339(),
        "max_parallel": max_parallel, "revision": 1 if previous is None else previous["revision"] + 1})
    running: dict[int, Running] = {}
    stopping: dict[str, int | None] = {"signal": None}
    limit = time_limit(run, sub)
    memory = Memory(mem_limit(run, sub))
    places = Places(run, max_parallel)
    processes.become_subreaper()  # what a task leaves behind when it dies is ours to stop

    def forward(signum: int, frame: FrameType | None) -> None:
        """A stop signal for the whole job (as scancel sends it): pass it on to every task, then wait for them."""
        stopping["signal"] = signum
        for pid in running:
            try:
                os.killpg(pid, signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    queue = sorted(tasks(sub), key=lambda t: t["task_index"])
    for task in queue:
        if stopping["signal"] is not None:
            break
        index = task["task_index"]
        record_rel = records.task(sid, index)
        if run.dir.exists(record_rel):
            continue  # started by an earlier supervisor of this submission: never run a task twice
        held = places.take()
        while held is None and stopping["signal"] is None:
            _reap(run, running, limit, memory, block=False)  # a place (and GPUs) frees up, here or elsewhere
            held = places.take()
        if held is None:
            break
        if _cancelled(run, task):
            held.release()
            _skip(run, sid, index)
            continue
        proc = _start_task(run, sub, index, held)
        pid = proc.pid
        running[pid] = Running(index, record_rel, time.monotonic(), held, proc, memory.oom_kills())
        ticks = process_start_ticks(pid) or 0
        run.dir.replace(record_rel, {
            "kind": "tau.local-task", "schema_version": 1, "run_id": run.run_id, "submission_id": sid,
            "task_index": index, "revision": 1, "state": "running", "pid": pid, "start_ticks": ticks,
            "started_at": jsonio.now_rfc3339(), "finished_at": None, "exit_code": None, "signal": None})
    while running:
        _reap(run, running, limit, memory)
    processes.sweep(grace=KILL_WAIT)
    for task in queue:  # stopped (a cancelled run): what never started says so, so that it is not awaited
        if not run.dir.exists(records.task(sid, task["task_index"])) and _cancelled(run, task):
            _skip(run, sid, task["task_index"])
    _ended(run, sid)
    return 0


def _ended(run: Run, submission_id: str) -> None:
    """Mark the supervisor's record ended (its folder holds no write of its in progress any more)."""
    rel = records.supervisor(submission_id)
    record = run.dir.read(rel, "tau.local-supervisor")
    if record is not None and not record.get("ended_at"):
        run.dir.replace(rel, dict(record, revision=record["revision"] + 1, ended_at=jsonio.now_rfc3339()))


def sweep(run: Run) -> list[str]:
    """Tidy the folder of every local supervisor that died without ending (SIGKILL, a crash, a reboot): under its
    lock (not waited for: a live supervisor holds it), the temp files it left are removed and its record is marked
    ended, so each is swept once. Run by tau-reconcile; returns the submissions swept."""
    from taulib.rundir.journal import SUBMISSIONS, Journal

    swept = []
    for sid in Journal(run, SUBMISSIONS).ids():
        rel = records.supervisor(sid)
        folder = rel.rpartition("/")[0]
        record = run.dir.read(rel, "tau.local-supervisor")
        if record is None:  # killed before its first record, or starting now: only debris to look for
            if not run.dir.has_folder(folder):
                continue
        elif record.get("ended_at") or alive(record["pid"], record["start_ticks"]):
            continue
        try:
            with locks.hold(run.dir, records.supervisor_lock(sid), timeout=0):
                run.dir.clean_debris(folder)
                _ended(run, sid)
        except Busy:
            continue
        swept.append(sid)
    return swept


def _cancelled(run: Run, task: Record) -> bool:
    """Whether the task's shard is cancelled or its attempt asked to stop: it is never started."""
    return (state.cancellation(run, task["shard_id"], state.run_cancel(run)) is not None
            or state.attempt_stop(run, task["shard_id"], task["attempt_id"]) is not None)


def _skip(run: Run, submission_id: str, index: int) -> None:
    """The record of a task never started because its shard was cancelled."""
    now = jsonio.now_rfc3339()
    run.dir.replace(records.task(submission_id, index), {
        "kind": "tau.local-task", "schema_version": 1, "run_id": run.run_id, "submission_id": submission_id,
        "task_index": index, "revision": 1, "state": "skipped", "pid": 0, "start_ticks": 0, "started_at": now,
        "finished_at": now, "exit_code": None, "signal": int(signal.SIGTERM)})


def stop(run: Run, attempts: list[Record], whole_run: bool) -> list[Record]:
    """Stop the live local attempts: SIGTERM to the process group of each one's task (tau-attempt passes it on to
    the client), and with `whole_run` to the supervisors of their submissions too (they stop starting tasks).
    Only processes tau recorded, known by pid and start time, are signalled. Returns the attempts signalled."""
    stopped = []
    supervisors = set()
    for attempt in attempts:
        sub, index = attempt["scheduler"]["job_id"], attempt["scheduler"]["task_index"]
        supervisors.add(sub)
        task = run.dir.read(records.task(sub, index), "tau.local-task")
        if task is None and attempt["state"] == "running":
            task = _recorded_soon(run, sub, index)
        if task is not None and task["state"] == "running" and alive(task["pid"], task["start_ticks"]):
            try:
                os.killpg(task["pid"], signal.SIGTERM)
                stopped.append(attempt)
            except ProcessLookupError:
                pass
    if whole_run:
        for sub in sorted(supervisors):
            record = run.dir.read(records.supervisor(sub), "tau.local-supervisor")
            if record is not None and alive(record["pid"], record["start_ticks"]):
                try:
                    os.kill(record["pid"], signal.SIGTERM)
                except ProcessLookupError:
                    pass
    return stopped


def _recorded_soon(run: Run, submission_id: str, index: int, patience: float = 5.0) -> Record | None:
    """The task record of an attempt that is running already: its supervisor writes it right after starting the
    task, so it is waited for (up to `patience` seconds) while that supervisor lives."""
    record = run.dir.read(records.supervisor(submission_id), "tau.local-supervisor")
    deadline = time.monotonic() + patience
    while record is not None and alive(record["pid"], record["start_ticks"]) and time.monotonic() < deadline:
        time.sleep(0.02)
        task = run.dir.read(records.task(submission_id, index), "tau.local-task")
        if task is not None:
            return task
    return None


def _start_task(run: Run, sub: Record, index: int, held: Held) -> subprocess.Popen[bytes]:
    sid = sub["submission_id"]
    child = env.current()
    child.update({variables.JOB_ID.name: sid, variables.TASK_ID.name: str(index)})
    child.pop(variables.GPUS.name, None)
    if held.gpus is not None:
        child[variables.GPUS.name] = ",".join(held.gpus)
    log = run.dir.open_append(records.task_log(sid, index))
    try:
        import subprocess

        proc = subprocess.Popen(processes.module_argv("taulib.cli.attempt", "run", run.path, "--submission", sid),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                close_fds=True, env=child, pass_fds=held.fds())
    finally:
        os.close(log)
    return proc


class Held:
    """A task's place and GPUs: the open lock files that hold them (shared with the task's process), and the
    GPUs' ids (None when the run hands out none)."""

    __slots__ = ("files", "gpus")

    def __init__(self, files: list[BinaryIO], gpus: list[str] | None) -> None:
        self.files, self.gpus = files, gpus

    def fds(self) -> tuple[int, ...]:
        return tuple(fh.fileno() for fh in self.files)

    def release(self) -> None:
        for fh in self.files:
            fh.close()
        self.files = []


class Places:
    """The run's places for live tasks (`max_parallel` of them, run-wide) and its GPUs (`scheduler.local.gpus`), of
    which each task takes those its services need."""

    def __init__(self, run: Run, max_parallel: int) -> None:
        self.run, self.max_parallel = run, max_parallel
        self.gpus: list[str] | None = run.plan["scheduler"]["local"].get("gpus")
        self.need = service_rules.gpus_needed(run.plan.get("services") or [])

    def take(self) -> Held | None:
        """A free place and the GPUs a task needs, locked now; None when the run has none free."""
        for k in range(self.max_parallel):
            place = locks.try_hold(self.run.dir, records.slot(k))
            if place is not None:
                break
        else:
            return None
        files, ids = [place], list[str]()
        for k, gpu in enumerate(self.gpus or []):
            if len(ids) == self.need:
                break
            fh = locks.try_hold(self.run.dir, records.gpu(k))
            if fh is not None:
                files.append(fh)
                ids.append(gpu)
        held = Held(files, None if self.gpus is None else ids)
        if len(ids) < self.need:
            held.release()
            return None
        return held


class Running:
    """A task the supervisor started and has not reaped: its index, record, start (monotonic), place and GPUs, its
    Popen and, once past the time limit, when it was told to stop. The Popen is kept until the task is reaped by
    `_reap` (wait4, for its rusage): a Popen dropped while its process lives is waited for by the next Popen this
    process makes (the subprocess module's clean-up), which would take the task's exit from `_reap`."""

    __slots__ = ("index", "record", "started", "held", "proc", "stopped", "peak", "killed", "oom_kills")

    def __init__(self, index: int, record: str, started: float, held: Held, proc: subprocess.Popen[bytes],
                 oom_kills: int | None = None) -> None:
        self.index, self.record, self.started, self.held, self.proc = index, record, started, held, proc
        self.stopped: float | None = None
        self.peak = 0  # the largest sum of its processes' resident memory sampled (bytes)
        self.killed: Record | None = None  # why it was killed for memory
        self.oom_kills = oom_kills  # the cgroup's oom_kill count when it started


KILL_WAIT = 5.0  # seconds between SIGTERM and SIGKILL of a task past its time limit (Slurm's KillWait)
POLL = 0.1  # seconds between looks at the tasks while a time or memory limit applies


def time_limit(run: Run, sub: Record) -> float | None:
    """The longest a task of this submission may run, in seconds: the window's grown request (retry.escalate),
    else the plan's `scheduler.local.time_limit`; None when neither says."""
    from taulib.rules.escalation import limit_seconds

    grown = (sub.get("resources") or {}).get("time")
    return limit_seconds(grown if grown is not None else run.plan["scheduler"]["local"].get("time_limit"))


def _reap(run: Run, running: dict[int, Running], limit: float | None, memory: Memory, block: bool = True) -> None:
    """Reap one task that ended (waiting for it), recording how it ended and what it used (wait4's rusage: the
    task and every process it waited for), then stop what it left behind and let its place and GPUs go. With a
    time limit (or not `block`), look every POLL seconds instead, and stop a task past the limit as Slurm does:
    SIGTERM to its process group, SIGKILL KILL_WAIT seconds later; it ends timed out."""
    try:
        polling = limit is not None or memory.limit is not None or memory.events is not None or not block
        pid, status, usage = os.wait4(-1, os.WNOHANG if polling else 0)
    except ChildProcessError:
        for gone in running.values():
            gone.held.release()
        running.clear()
        time.sleep(0 if block else POLL)
        return
    except InterruptedError:
        return
    if pid == 0:
        _enforce(running, limit)
        memory.sample(running)
        time.sleep(POLL)
        return
    task = running.pop(pid) if pid in running else None
    if task is None:
        return  # a process a dead task left, adopted and now ended
    code = os.waitstatus_to_exitcode(status)
    task.proc.returncode = code  # reaped here: its Popen must never wait for it again
    elapsed = time.monotonic() - task.started
    try:
        os.killpg(pid, signal.SIGKILL)  # like Slurm ending a job step: nothing of the task outlives it
    except (ProcessLookupError, PermissionError):
        pass
    processes.sweep(keep=frozenset(running), grace=KILL_WAIT)  # what it left in other process groups
    task.held.release()
    record = run.dir.read(task.record, "tau.local-task")
    if record is None:  # finished before its running record was written
        return
    record = dict(record, revision=record["revision"] + 1, state="finished", finished_at=jsonio.now_rfc3339(),
                  exit_code=code if code >= 0 else None, signal=-code if code < 0 else None,
                  timed_out=task.stopped is not None,
                  usage={"elapsed_seconds": round(elapsed, 3),
                         "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
                         "max_rss_bytes": max(usage.ru_maxrss * 1024, task.peak)})  # ru_maxrss counts KiB
    killed = memory.killed(task, code)
    if killed is not None:
        record["memory_killed"] = killed
    run.dir.replace(task.record, record)


def _enforce(running: dict[int, Running], limit: float | None) -> None:
    """Stop the tasks past the time limit (SIGTERM once, SIGKILL after KILL_WAIT)."""
    if limit is None:
        return
    now = time.monotonic()
    for pid, task in running.items():
        if task.stopped is None and now - task.started >= limit:
            task.stopped = now
            _signal_group(pid, signal.SIGTERM)
        elif task.stopped is not None and now - task.stopped >= KILL_WAIT:
            _signal_group(pid, signal.SIGKILL)


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
