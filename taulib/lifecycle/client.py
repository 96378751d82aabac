"""Running an attempt's client inside its allocation: the program, environment and folder the run fixed, the
stop signals, the heartbeat and the client's own progress, and a cancellation noticed while it runs.

Reads: the run's fixed environment (run.json), the plan, the allocation's environment, the client's progress file
(`TAU_PROGRESS_FILE`), the cancellation records. Writes: the attempt's readiness.json (under the run lock, shared,
and the shard lock) and its client.log (the client's stdout and stderr, appended).
Promises:
- the client runs `[program, *command[1:]]` with exactly the environment `rules.environment` gives, in the folder
  tau-init ran in, whoever submitted the attempt; an inherited variable the allocation lacks, or a folder that is
  gone, means the client is not started (the attempt fails saying why);
- a stop signal (SIGTERM, SIGINT, SIGHUP: scancel, a time limit, a requeue, a preemption) comes from the scheduler,
  whose evidence alone says which: it is passed on to the client and readiness "stopped" is recorded at once (not
  after the client has ended: the scheduler kills what is left after its grace, KillWait in Slurm); the handlers
  stay installed for the whole command. A scheduler signals an allocation's processes one by one (Slurm's
  proctrack/linuxproc the deepest first), so when the client dies of a stop signal before this process has had
  its own, STOP_GRACE seconds are waited for it. The stop record waits STOP_LOCK_WAIT seconds at most for its locks;
- every `heartbeat_seconds` (plan windows) readiness is written again, with the records the client reports done;
- a cancellation (tau-cancel) is noticed within CANCEL_CHECK seconds: the client gets SIGTERM, then SIGKILL after
  CANCEL_GRACE seconds, and the attempt ends cancelled;
- a Parquet file whose columns are not the run's (`lifecycle.drift`) is noticed within CANCEL_CHECK seconds of
  being complete and stops the client the same way; the attempt then fails, naming the field.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from typing import TYPE_CHECKING, NamedTuple

from taulib import executors, jsonio, signals
from taulib.errors import Busy, TauError
from taulib.lifecycle import drift, readiness
from taulib.rules import environment as environment_rules
from taulib.rules import services as service_rules
from taulib.rules import stall as stall_rules
from taulib.rundir import layout, locks, state

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from taulib.jsonio import Record
    from taulib.lifecycle.services import Services
    from taulib.rundir.run import Run

STOP_SIGNALS = signals.STOPS  # the signals that stop a command, and that the client is given
STOP_GRACE = 2.0  # seconds between the client's death by a stop signal and this process's own, at most
STOP_LOCK_WAIT = 2.0  # seconds the stop record waits for its locks: well inside Slurm's KillWait (30 s by default)
CLIENT_POLL = 0.2  # seconds between looks at a stop signal while the client runs
CANCEL_CHECK = 1.0  # seconds between looks at the cancellation records while the client runs
CANCEL_GRACE = 10.0  # seconds a cancelled client has between SIGTERM and SIGKILL
PROGRESS = "progress"  # the file in the attempt's folder where a client may write how many records it has done


class Interrupted(Exception):
    """The allocation received a stop signal; the command ends by that same signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


class ClientOutcome(NamedTuple):
    """How the client ended: what result.json records."""

    started_at: str
    exit_code: int | None  # None when it was killed by a signal or never started
    signal: int | None
    error: str | None  # why it could not be started
    interrupted: int | None  # the stop signal this allocation received (then nothing more is recorded)
    cancelled: str | None = None  # why the client was stopped: its shard was cancelled
    code: str | None = None  # the reason code of a failure tau knows (preflight, a service's), for result.json
    images: dict[str, str] | None = None  # the digest each image's role ran in (the client, service NAME)
    input_sha256: str | None = None  # the attempt's input file as cut (runs over a dataset), for the join


class Prepared(NamedTuple):
    """The client as it will run: its argument vector, environment and working folder (`command`)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None


class Stop:
    """The allocation's first stop signal, caught for as long as the command may write: the default action would
    end it between two records. It is passed on to the client once one runs; repeats (the scheduler sends them)
    are ignored."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.at = 0.0  # when it arrived (monotonic)
        self.client: subprocess.Popen[bytes] | None = None
        self.forwarded = False
        self.record_tried = False
        # how to end a client whose processes are not the Popen's own (a container, run by its runtime's monitor):
        # called once when it outlives a stop signal by STOP_GRACE seconds, or is killed
        self.hurry: Callable[[], None] | None = None

    def __enter__(self) -> Stop:
        self._previous = {s: signal.signal(s, self._caught) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.signum is None:  # not stopped: the caller's handlers again (a stopped command ends by the signal)
            for s, handler in self._previous.items():
                signal.signal(s, handler)

    def _caught(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()
            self.forward()

    def hurried(self) -> None:
        """End the client the way it must be ended beyond its Popen (`hurry`), once."""
        hurry, self.hurry = self.hurry, None
        if hurry is not None:
            hurry()

    def forward(self) -> None:
        """Pass the stop signal on to the client, once (also when it arrived while the client was being started)."""
        if self.signum is not None and self.client is not None and not self.forwarded:
            self.forwarded = True
            try:
                self.client.send_signal(self.signum)
            except ProcessLookupError:
                pass

    def wait(self, seconds: float) -> bool:
        """Wait up to `seconds` for a stop signal; True when one has arrived."""
        deadline = time.monotonic() + seconds
        while self.signum is None and time.monotonic() < deadline:
            time.sleep(0.05)  # a caught signal does not cut a sleep short (PEP 475): short naps keep the wait prompt
        return self.signum is not None


def briefly(run: Run, attempt: Record, wait: float, write: Callable[[], object]) -> bool:
    """Run `write()` under the run lock (shared) and the shard lock, waiting `wait` seconds at most for them;
    False when they were not granted (the write is given up rather than held up)."""
    wait = min(wait, locks.timeout_seconds())
    try:
        with locks.hold(run.dir, "run", shared=True, timeout=wait), \
                locks.hold(run.dir, locks.shard_lock_name(attempt["shard_id"]), timeout=wait):
            write()
        return True
    except Busy:
        return False


def record_stop(run: Run, attempt: Record, stop: Stop, services: Services | None = None) -> None:
    """Readiness "stopped", once. The scheduler kills the allocation soon (Slurm: KillWait after the signal), so the
    locks are waited for STOP_LOCK_WAIT seconds at most; when not granted by then, the record is given up (the
    scheduler's evidence still decides the attempt) rather than left to be killed half-way."""
    if stop.record_tried:
        return
    stop.record_tried = True
    briefly(run, attempt, STOP_LOCK_WAIT, lambda: readiness.write(
        run, attempt, "stopped", f"stopped by signal {stop.signum}; the scheduler's evidence decides the attempt",
        services=services))


def records_done(run: Run, attempt: Record) -> int | None:
    """The count of records the client wrote into its progress file, or None (no file, or not a count)."""
    try:
        data = run.dir.read_bytes(layout.attempt_file(attempt["shard_id"], attempt["attempt_id"], PROGRESS),
                                  limit=64)
    except TauError:
        return None
    text = (data or b"").strip()
    return int(text) if text.isdigit() else None


def cancelled(run: Run, attempt: Record) -> str | None:
    """Why the attempt's shard is cancelled, or the attempt itself asked to stop (its stop.json), or None."""
    record = state.cancellation(run, attempt["shard_id"], state.run_cancel(run))
    if record is not None:
        return state.cancel_reason(record)
    return state.attempt_stop(run, attempt["shard_id"], attempt["attempt_id"])


def command(run: Run, attempt: Record, environ: dict[str, str]) -> tuple[Prepared, str | None]:
    """The client's preflight: the attempt's client as it will run (the program, PATH and folder fixed at tau-init,
    the environment the run defines: `rules.environment`; with services, no GPU), and a problem that means it is
    not started: an inherited variable the allocation lacks, a working folder that is gone, a program that is no
    longer an executable file, a dataset folder that is not writable."""
    shard = run.shard(attempt["shard_id"])
    fixed = run.environment
    argv: list[str] = list(run.plan["command"])
    path, cwd = environ.get("PATH", os.defpath), None
    if fixed is not None:  # runs made before the pre-flight run the command as given, where they are
        argv[0], path, cwd = fixed["program"], fixed["path"], fixed["cwd"]
    progress = layout.attempt_file(attempt["shard_id"], attempt["attempt_id"], PROGRESS)
    tau = {**environment_rules.attempt_variables(run.path, run.run_id, attempt, shard["index"]),
           "TAU_RECORD_START": str(shard["record_start"]), "TAU_RECORD_END": str(shard["record_end"]),
           "TAU_OUTPUT_DIR": os.path.join(run.path, attempt["dataset"]), "TAU_OUTPUT_FORMAT": "parquet",
           "TAU_PROGRESS_FILE": os.path.join(run.path, progress)}
    problem = None
    missing = environment_rules.missing_inherited(run.plan["inherit_env"], environ)
    if missing:
        problem = (f"the allocation's environment lacks {', '.join(missing)}, which the plan inherits; the client "
                   "was not started")
    elif cwd is not None and not os.path.isdir(cwd):
        problem = f"the run's working folder {cwd!r} no longer exists; the client was not started"
    elif fixed is not None and run.plan.get("image") is None and not (os.path.isfile(argv[0])
                                                                      and os.access(argv[0], os.X_OK)):
        problem = (f"the client program {argv[0]!r} is no longer an executable file, as it was when the run was "
                   "made; the client was not started")
    elif not os.access(tau["TAU_OUTPUT_DIR"], os.W_OK):
        problem = f"the attempt's dataset folder {tau['TAU_OUTPUT_DIR']!r} is not writable; the client was not started"
    if problem is not None:
        return Prepared(argv, {}, cwd), problem
    if fixed is None:
        return Prepared(argv, dict(environ, **run.plan["env"], **tau), cwd), None
    allocation = executors.of_attempt(attempt).allocation_variables(environ)
    if run.plan.get("services"):
        allocation = {**allocation, **service_rules.client_devices(allocation)}  # the zero-GPU client
    return Prepared(argv, environment_rules.client_environment(path=path, env=run.plan["env"],
                                                               inherit=run.plan["inherit_env"], environ=environ,
                                                               allocation=allocation, tau=tau), cwd), None


def run_client(run: Run, attempt: Record, prepared: Prepared, stop: Stop,
               services: Services | None = None) -> ClientOutcome:
    """Start the prepared client (`command`) and wait for it, keeping readiness, stop signals, cancellation and the
    services (their processes and probes) in view."""
    started = jsonio.now_rfc3339()
    log = run.dir.open_append(layout.attempt_file(attempt["shard_id"], attempt["attempt_id"], "client.log"))
    try:
        if services is not None:
            services.client = "running"
        with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, locks.shard_lock_name(attempt["shard_id"])):
            readiness.write(run, attempt, "running", None, services=services)
        if stop.signum is not None:  # stopped before the client started: do not start it
            return ClientOutcome(started, None, stop.signum, None, stop.signum)
        try:
            stop.client = proc = subprocess.Popen(prepared.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                                  env=prepared.env, cwd=prepared.cwd, close_fds=True)
        except OSError as exc:
            return ClientOutcome(started, None, None, f"cannot start the client {prepared.argv[0]!r}: "
                                 f"{exc.strerror}", None)
    finally:
        os.close(log)
    stop.forward()  # a stop signal that arrived while the client was being started
    watch = drift.Watch(run, attempt)
    code, why = _wait(run, attempt, proc, stop, watch, services)
    if services is not None:
        failure = services.check(time.monotonic()) if why is None and stop.signum is None else None
        if failure is not None:  # a backend that died as the client ended is what ended it: it is named
            why = failure.message
        services.client = "ended"
    if stop.signum is None and why is None and -code in STOP_SIGNALS:
        stop.wait(STOP_GRACE)  # the scheduler signalled the client first: this process's signal is on its way
    failed = services.failure if services is not None else None
    if why is not None and (why == watch.stopped or (failed is not None and why == failed.message)):
        # its columns drifted, or a service failed: a failure, not a cancellation
        return ClientOutcome(started, code if code >= 0 else None, -code if code < 0 else None, why, stop.signum,
                             code=None if why == watch.stopped or failed is None else failed.code)
    return ClientOutcome(started, code if code >= 0 else None, -code if code < 0 else stop.signum, None,
                         stop.signum, why)


def _wait(run: Run, attempt: Record, proc: subprocess.Popen[bytes], stop: Stop,
          watch: drift.Watch, services: Services | None) -> tuple[int, str | None]:
    """Wait for the client: (its exit status, why it was stopped (cancelled, stalled, its columns drifted, a
    service failed) or None)."""
    heartbeat = run.plan["windows"]["heartbeat_seconds"]
    now = time.monotonic()
    next_beat, next_check, kill_at, why = now + heartbeat, now + CANCEL_CHECK, None, None
    stall = Stall(run, attempt, now) if stall_rules.stops(run.plan["windows"]) else None
    while True:
        try:
            return proc.wait(timeout=CLIENT_POLL), why
        except subprocess.TimeoutExpired:
            pass
        if stop.signum is not None:
            record_stop(run, attempt, stop, services)  # now, while the client ends, not after
            if time.monotonic() >= stop.at + STOP_GRACE:
                stop.hurried()  # a container the signal did not end: ended before the scheduler's kill
            continue
        now = time.monotonic()
        if why is None and services is not None:
            failure = services.check(now)
            if failure is not None:
                why = failure.message
                proc.terminate()
                kill_at = now + CANCEL_GRACE
                briefly(run, attempt, STOP_LOCK_WAIT, lambda: readiness.write(run, attempt, "running", None,
                                                                                services=services))
        if why is None and now >= next_check:
            next_check = now + CANCEL_CHECK
            why = cancelled(run, attempt)
            if why is None and stall is not None:
                why = stall.check(now)
            if why is None:
                why = watch.check()
            if why is not None:
                proc.terminate()
                kill_at = now + CANCEL_GRACE
        elif kill_at is not None and now >= kill_at:
            proc.kill()
            stop.hurried()
            kill_at = None
        if why is None and (now >= next_beat or (services is not None and services.changed)):
            next_beat = now + heartbeat
            _heartbeat(run, attempt, services)


class Stall:
    """The client's progress, watched by its own allocation when the plan stops stalled attempts
    (`rules.stall`): the count in its progress file, and since when (this process's clock) it has not changed."""

    def __init__(self, run: Run, attempt: Record, now: float) -> None:
        self.run, self.attempt = run, attempt
        shard = run.shard(attempt["shard_id"])
        self.records = shard["record_end"] - shard["record_start"]
        self.limit = run.plan["windows"].get("progress_stall_seconds")
        self.done: int | None = None
        self.since = now

    def check(self, now: float) -> str | None:
        """The stop's reason when the client's progress stood still too long (its stop.json is then published:
        `by` stall), else None."""
        if self.limit is None:
            return None
        done = records_done(self.run, self.attempt)
        if done != self.done:
            self.done, self.since = done, now
            return None
        why = stall_rules.progress(done, self.records, now - self.since, self.limit)
        if why is None:
            return None
        made: list[Record] = []
        if not briefly(self.run, self.attempt, STOP_LOCK_WAIT, lambda: made.append(
                stop_record(self.run, self.attempt, "stall", stall_rules.reason(why)))):
            return None  # the locks are busy: the next look tries again
        reason: str = made[0]["reason"]  # this stall's, or an earlier stop's that was there first
        return reason


def requester(at: str | None = None) -> Record:
    """Who asks, and when (`at`, default now): the requested_at, uid and host every request record carries
    (a cancellation, a lift, a stop)."""
    return {"requested_at": at or jsonio.now_rfc3339(), "uid": os.geteuid(), "host": socket.gethostname()[:255]}


def stop_record(run: Run, attempt: Record, by: str, reason: str, at: str | None = None) -> Record:
    """The attempt's stop request (stop.json, `by` user or stall, made at `at`, default now): the one already there,
    or a new one (the caller holds the shard lock; an attempt only its submission recorded gets its attempt.json
    first)."""
    rel = layout.attempt_stop(attempt["shard_id"], attempt["attempt_id"])
    existing = run.dir.read(rel, "tau.stop")
    if existing is not None:
        return existing
    record = {"kind": "tau.stop", "schema_version": 1, "run_id": run.run_id, "shard_id": attempt["shard_id"],
              "attempt_id": attempt["attempt_id"], "by": by, "reason": reason, **requester(at)}
    state.record_attempt(run, attempt)
    run.dir.publish(rel, record)
    return record


def _heartbeat(run: Run, attempt: Record, services: Services | None = None) -> None:
    """Readiness again, with the client's progress (and the services' newest probes); skipped rather than held up
    when the locks are busy."""
    done = records_done(run, attempt)
    briefly(run, attempt, STOP_LOCK_WAIT, lambda: readiness.write(run, attempt, "running", None, done, services))
