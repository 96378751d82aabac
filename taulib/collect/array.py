"""A collection's tasks at work (tau-collect(1) "Tasks"): each Slurm array task (`tau-collect RUN --worker ID`), or
each worker process of the local executor (`python -m taulib.collect.array`), writes its own partitions into the
collection's stage; the last one done publishes the dataset.

Reads: the collection journal, the winners (`collect.stage`). Writes: the task's partition files in the stage (no
lock held: tasks write at the same time, each its own files, all with the dataset's modes: `destination.open_stage`),
then under collect.lock its task record (`collect.tasks`) and, when every task is done, `_tau_collection.json` and
the publication (the caller's `publish`).
Promises: a Slurm task writes only while the journal names its array job (its fence is checked before it writes and
again before it records); a task that fails with an error retires the collection (its stage removed, the next
tau-collect starts anew), while a task stopped by a signal or killed leaves its partial files for the rerun of
that task to remove; a local worker process writes files only, and its parent records them.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from taulib import failpoints, jsonio, processes
from taulib.collect import stage, tasks
from taulib.collect.destination import RESULT, open_parent, open_stage, read_result, remove_stage, stage_name
from taulib.collect.report import progress
from taulib.errors import Busy, Conflict, Refused, TauError
from taulib.rundir import locks

if TYPE_CHECKING:
    from typing import Callable

    from taulib.collect.destination import Destination
    from taulib.collect.winners import Winner
    from taulib.fs.tree import Tree
    from taulib.jsonio import Record
    from taulib.progress import Meter
    from taulib.rundir.journal import Journal
    from taulib.rundir.run import Run

    # (plan, status, staged, result) -> its summary: the stage of a collection whose tasks are all done, published
    Publish = Callable[[Record, Record, str, Record], Record]
    # (plan, status, result) -> its summary: a dataset that is already published, adopted
    Finish = Callable[[Record, Record, Record], Record]

UNFINISHED = ("submitted", "running")


class Killed(Busy):
    """A local task's worker process was killed by a signal (the OOM killer, a person): the tasks that are done
    stay done, and the next tau-collect reruns the others (75, try again)."""


def lanes(count: int, allotted: int | None = None) -> int:
    """Threads for one of `count` tasks on this machine: the CPUs this process may use (and at most the `allotted`
    ones, the CPUs Slurm gave the task, where a cluster does not bind tasks to them), shared among the tasks that run
    here at once (a Slurm task has its own CPUs: count 1)."""
    cpus = len(os.sched_getaffinity(0))
    if allotted is not None and allotted > 0:
        cpus = min(cpus, allotted)
    return max(1, min(cpus // max(1, count), stage.LANES))


def publish_when_done(run: Run, plan: Record, status: Record, parent: Tree, name: str,
                      publish: Publish) -> Record | None:
    """Caller holds collect.lock. When every task has its record: the dataset's `_tau_collection.json` written into
    the stage, and `publish(plan, status, staged, result)` (the publication and the journal); its summary. None
    while a task is undone."""
    records = tasks.done(run, plan)
    if len(records) < tasks.count(plan):
        return None
    staged = stage_name(plan)
    with open_stage(parent, plan) as folder:
        files = tasks.files(plan, records, folder)
        folder.remove_file(RESULT)  # one a crash left before the publication: written again, from the records
        result = stage.finish(plan, folder, files)
    return publish(plan, status, staged, result)


def work(run: Run, book: Journal, plan: Record, job_id: str, task: int, found: list[Winner], where: Destination,
         publish: Publish, finish: Finish, cpus: int | None = None) -> Record:
    """Slurm array task `task` of job `job_id` (the worker's fence was awaited), with the `cpus` Slurm allotted it:
    write its partitions, record them, publish when it is the last. `finish(plan, status, result)` adopts a dataset
    already published."""
    if not 0 <= task < tasks.count(plan):
        raise Refused(f"task {task} is not a task of collection {plan['collection_id']} (it has "
                      f"{tasks.count(plan)}); this worker writes nothing")
    failpoints.task = f"tau-collect-task-{task}"  # failpoints may be armed for one task
    staged = stage_name(plan)
    with locks.hold(run.dir, "collect"):
        status = _fenced(book, plan, job_id)
        if status["state"] == "submitted":
            status = book.advance(status, state="running")
        with open_parent(where) as parent:
            if parent.exists(where.name):
                result = read_result(parent, where.name)
                if result is not None and result["plan_sha256"] == jsonio.digest(plan):
                    return finish(plan, status, result)
                raise Conflict(f"destination {where.path!r} already exists; tau never overwrites a dataset")
            if not parent.exists(staged):
                raise Refused(f"the stage of collection {plan['collection_id']} is gone; this worker writes nothing")
        written = task in tasks.done(run, plan)
    if not written:
        try:
            with open_parent(where) as parent, open_stage(parent, plan) as folder:
                files = stage.write_task(run, plan, found, folder, task, lanes(1, cpus))
        except Exception as exc:
            _retire(run, book, plan, job_id, where, exc)
            raise
    try:
        with locks.hold(run.dir, "collect"):
            status = _fenced(book, plan, job_id)
            if not written:
                tasks.record(run, plan, task, job_id, files)
            with open_parent(where) as parent:
                done = publish_when_done(run, plan, status, parent, where.name, publish)
    except (Refused, Busy):
        raise  # fenced off, or the lock not granted: nothing of the collection's is this task's to end
    except Exception as exc:
        _retire(run, book, plan, job_id, where, exc)
        raise
    return done if done is not None else dict(progress(plan, status, False), task=task)


def _fenced(book: Journal, plan: Record, job_id: str) -> Record:
    status = book.run.dir.require(book.status_rel(plan["collection_id"]), book.kind.status_kind)
    if status["job_id"] != job_id or status["state"] not in UNFINISHED:
        raise Refused(f"collection {plan['collection_id']} is no longer bound to job {job_id} ({status['state']}, "
                      f"job {status['job_id']}); writing nothing", collection_id=plan["collection_id"])
    return status


def reason(exc: Exception) -> str:
    """Why a collection failed, in words, for its journal."""
    if isinstance(exc, TauError):
        return exc.message
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
    return f"{type(exc).__name__}: {exc}"


def _retire(run: Run, book: Journal, plan: Record, job_id: str, where: Destination, exc: Exception) -> None:
    """A task's error ends the collection (its stage removed): the next tau-collect starts a new one."""
    try:
        with locks.hold(run.dir, "collect"):
            status = _fenced(book, plan, job_id)
            with open_parent(where) as parent:
                remove_stage(parent, stage_name(plan))
            book.retire(status, reason(exc))
    except (TauError, OSError):  # fenced off meanwhile, or a full disk: the coordinator settles it
        pass


def local(run: Run, plan: Record, todo: list[int], done: Callable[[int, list[Record]], object],
          meter: Meter | None = None) -> None:
    """The local executor's tasks `todo`, each in a worker process of its own (`python -m taulib.collect.array`),
    all at once; `done(task, files)` is called for each that succeeded, as soon as it has. The first failure raises
    its error; on the way out (an error, or a stop signal) every worker still running is killed by its PID and
    waited for. A reader thread per worker takes its output, so that no pipe fills."""
    import queue
    import subprocess
    import threading

    from taulib import signals

    argv = processes.module_argv("taulib.collect.array", run.path, plan["collection_id"])
    share = str(lanes(len(todo)))
    ended: queue.Queue[tuple[int, bytes, bytes]] = queue.Queue()
    procs: dict[int, subprocess.Popen[bytes]] = {}
    try:
        for task in todo:
            proc = procs[task] = subprocess.Popen([*argv, str(task), share, str(os.getpid())],
                                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                  stdin=subprocess.DEVNULL)
            threading.Thread(target=lambda t=task, p=proc: ended.put((t, *p.communicate())), daemon=True,
                             name=f"tau-collect-task-{task}").start()
        for _ in todo:
            while True:
                try:
                    task, stdout, stderr = ended.get(timeout=0.1)  # short waits: a stop signal is seen at once
                    break
                except queue.Empty:
                    continue
            if procs[task].returncode != 0:
                raise _worker_error(task, procs[task].returncode, stderr)
            reply = jsonio.loads(stdout, f"task {task}'s worker")
            files = reply["files"] if isinstance(reply, dict) else []
            done(task, files)
            if meter is not None:
                meter.add(sum(f["rows"] for f in files), sum(f["size"] for f in files))
    finally:
        with signals.deferred():
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                proc.wait()


def _worker_error(task: int, code: int, stderr: bytes) -> TauError:
    from taulib.errors import EXIT_CODES, Internal

    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    try:
        error = jsonio.loads(lines[-1].encode(), "worker error") if lines else {}
    except TauError:
        error = {}
    message = error.get("message") if isinstance(error, dict) else None
    if code < 0:
        return Killed(f"task {task}'s worker process was killed by {_ended(code)}; the tasks that are done are kept: "
                      "run tau-collect again to rerun the others", task=task)
    if code not in EXIT_CODES or not isinstance(message, str):
        return Internal(f"task {task}'s worker process ended with {_ended(code)}"
                        + (f": {lines[-1][:300]}" if lines else ""))
    cause = TauError(f"task {task}: {message}")
    cause.code = code  # the worker's own error, with its exit code
    return cause


def _ended(code: int) -> str:
    import signal

    return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"


def _main(argv: list[str]) -> int:
    """A local worker process: write task TASK of collection ID of RUN with LANES threads into its stage; print
    its files as JSON, or one JSON error on stderr."""
    from taulib.collect import winners
    from taulib.collect.destination import authorise
    from taulib.rundir.journal import COLLECTIONS, Journal
    from taulib.rundir.run import Run

    run_dir, collection_id, task, share, parent_pid = argv[0], argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    _die_with(parent_pid)
    failpoints.command, failpoints.task = "tau-collect", f"tau-collect-task-{task}"  # armed for one task, or all
    try:
        with Run(run_dir) as run:
            plan = run.dir.require(Journal(run, COLLECTIONS).plan_rel(collection_id), COLLECTIONS.plan_kind)
            found = winners.of_plan(run, plan)
            with open_parent(authorise(run, plan["destination"])) as parent, open_stage(parent, plan) as folder:
                files = stage.write_task(run, plan, found, folder, task, share)
    except TauError as exc:
        sys.stderr.buffer.write(jsonio.canonical({"error": exc.name, "message": exc.message}) + b"\n")
        return exc.code
    except OSError as exc:  # a full disk, a vanished filesystem: the parent retires the collection, saying so
        from taulib.errors import IO_ERROR, EXIT_CODES

        where = f" ({exc.filename})" if exc.filename else ""
        sys.stderr.buffer.write(jsonio.canonical({"error": EXIT_CODES[IO_ERROR][0],
                                                  "message": f"{exc.strerror or exc}{where}"}) + b"\n")
        return IO_ERROR
    sys.stdout.buffer.write(jsonio.canonical({"task": task, "files": files}) + b"\n")
    return 0


def _die_with(parent: int) -> None:
    """Be killed when the parent process (the tau-collect that runs this worker) dies, even by SIGKILL."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
