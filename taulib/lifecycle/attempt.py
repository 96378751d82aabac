"""The in-allocation side (`tau-attempt run`): fence, mark running, readiness, run the client, record its result.

Runs inside the allocation (a Slurm array task, or a task of the local executor). Steps:
  1. find its task in the submission plan by the allocation's task index;
  2. fence: nothing is written until the allocation's identity (local: TAU_LOCAL_JOB_ID/TAU_LOCAL_TASK_ID; Slurm:
     SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID) equals the persisted attempt's scheduler identity, the attempt is the
     shard's newest, the shard has no winner, the attempt has not started (or is the same allocation restarted
     after a requeue) and its scheduler evidence is not terminal. A late or duplicate allocation exits 77 and
     writes nothing;
  3. under the shard lock: attempt.json -> running, readiness.json revision 1 "starting";   failpoint attempt.running
  4. prepare the dataset folder (per attempt, or the shard-owned workspace under its resume lock);
  5. readiness "running", run the client (argument vector from the plan) with TAU_* variables, its output
     appended to client.log. A stop signal (SIGTERM, SIGINT, SIGHUP) comes from the scheduler (scancel, time
     limit, requeue, preemption), whose evidence alone says which: it is passed on to the client, readiness
     "stopped" is recorded at once (not after the client has ended: the scheduler kills what is left after its
     grace, KillWait in Slurm), nothing else is recorded, and once the client has ended the process ends by the
     same signal. The handlers stay installed for the whole command, never the default while it may write. A
     scheduler signals an allocation's processes one by one (Slurm's proctrack/linuxproc the deepest first), so
     when the client dies of a stop signal before this process has had its own, it waits STOP_GRACE seconds for
     it before the death counts as the client's own failure. The stop record waits STOP_LOCK_WAIT seconds at
     most for its locks, and is given up rather than killed half-way;
  6. result.json (always), manifest.json (when the client exited 0 and wrote Parquet), attempt.json -> succeeded
     or failed, readiness "stopped" or "failed";             failpoints attempt.result_written, attempt.manifest_written
  7. unless --no-winner, publish the shard's winner.
Reads: the submission plan and status, the attempt's records, the allocation's environment. Writes: the attempt's
attempt.json, readiness.json, result.json, manifest.json, client.log and dataset (and the winner, step 7).
Promises: an allocation that is not the persisted attempt writes nothing; a stopped allocation records only that it
was stopped; every attempt ends with a result.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import ExitStack
from typing import NamedTuple

from taulib import env as environment
from taulib import failpoints, jsonio
from taulib.errors import BadInput, Busy, NotFound, Refused, TauError
from taulib.rundir import layout, locks, state
from taulib.rundir.run import Run

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOP_GRACE = 2.0  # seconds between the client's death by a stop signal and this process's own, at most
STOP_LOCK_WAIT = 2.0  # seconds the stop record waits for its locks: well inside Slurm's KillWait (30 s by default)
CLIENT_POLL = 0.2  # seconds between looks at a stop signal while the client runs


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


class _Stop:
    """The allocation's first stop signal, caught for as long as the command may write: the default action would
    end it between two records. It is passed on to the client once one runs; repeats (the scheduler sends them)
    are ignored."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.client: subprocess.Popen | None = None
        self.forwarded = False
        self.record_tried = False

    def __enter__(self) -> _Stop:
        self._previous = {s: signal.signal(s, self._caught) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc_info) -> None:
        if self.signum is None:  # not stopped: the caller's handlers again (a stopped command ends by the signal)
            for s, handler in self._previous.items():
                signal.signal(s, handler)

    def _caught(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum
            self.forward()

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


def allocation_identity(env: dict) -> dict:
    """The scheduler identity this process runs under, from its environment."""
    local_job = environment.get("TAU_LOCAL_JOB_ID", env)
    if local_job:
        try:
            return {"executor": "local", "job_id": local_job,
                    "task_index": int(environment.get("TAU_LOCAL_TASK_ID", env) or "")}
        except ValueError:
            raise Refused("TAU_LOCAL_TASK_ID is not a task index; tau-attempt runs only inside an allocation") \
                from None
    if environment.get("SLURM_JOB_ID", env):
        job = environment.get("SLURM_ARRAY_JOB_ID", env)
        task = environment.get("SLURM_ARRAY_TASK_ID", env)
        if not job or task is None or not task.isdigit():
            raise Refused("this Slurm job is not an array task (SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID unset)")
        return {"executor": "slurm", "job_id": job, "task_index": int(task)}
    raise Refused("not inside an allocation: neither the local executor's nor Slurm's job variables are set; "
                  "tau-attempt run is started by the executor, not by hand")


def _restart_count(env: dict) -> int:
    return environment.get("SLURM_RESTART_COUNT", env)  # type: ignore[return-value]


def _fence(run: Run, sid: str, aid: str, identity: dict, restarts: int) -> dict:
    """Return the attempt record when this allocation may write, else raise Refused (nothing written)."""
    attempt = run.dir.read(layout.attempt_file(sid, aid, "attempt.json"), "tau.attempt")
    where = f"{sid}/{aid}"
    if attempt is None:
        raise Refused(f"{where} is not recorded; this allocation is not a persisted attempt", shard_id=sid)
    if attempt["scheduler"] != identity:
        raise Refused(f"allocation {identity['job_id']}_{identity['task_index']} does not match the persisted "
                      f"scheduler identity of {where}; a late or duplicate allocation writes nothing",
                      shard_id=sid, attempt_id=aid)
    if attempt["plan_sha256"] != run.plan_sha256:
        raise Refused(f"{where} belongs to another plan", shard_id=sid)
    if run.dir.exists(layout.winner(sid)):
        raise Refused(f"{sid} already has a winner; this allocation writes nothing", shard_id=sid)
    latest = state.latest_attempt(run, sid)
    if latest is None or latest["attempt_id"] != aid:
        raise Refused(f"{where} is stale: a newer attempt exists", shard_id=sid)
    evidence = run.dir.read(layout.attempt_file(sid, aid, "observation.json"), "tau.observation")
    if evidence is not None and (evidence["terminal"] or evidence["state"] == "unknown"):
        raise Refused(f"{where} already has {evidence['state']} scheduler evidence; this allocation is late",
                      shard_id=sid)
    if attempt["state"] == "submitted":
        return attempt
    if attempt["state"] == "running" and restarts > attempt["restarts"]:
        return attempt  # the same allocation requeued by the scheduler: start again cleanly
    raise Refused(f"{where} is already {attempt['state']}; a duplicate allocation writes nothing", shard_id=sid)


def _await_binding(run: Run, submission_id: str, env: dict, stop: _Stop) -> None:
    """Wait until the submission is bound to its job (a Slurm allocation can start before tau-submit has recorded
    the job id). A retired submission, or one not bound in time, means this allocation is late: Refused. A stop
    signal ends the wait (Interrupted): nothing has been written."""
    limit = time.monotonic() + environment.get("TAU_BINDING_WAIT", env)  # type: ignore[operator]
    rel = f"submissions/{submission_id}/status.json"
    while True:
        if stop.signum is not None:
            raise Interrupted(stop.signum)
        status = run.dir.read(rel, "tau.submission-status")
        if status is not None and status["state"] == "submitted":
            return
        if status is not None and status["state"] == "failed":
            raise Refused(f"submission {submission_id} was retired ({status['reason']}); this late allocation "
                          "writes nothing", submission_id=submission_id)
        if time.monotonic() > limit:
            raise Refused(f"submission {submission_id} was not bound to a job in time; this allocation writes "
                          "nothing", submission_id=submission_id)
        stop.wait(1.0)


def _readiness(run: Run, attempt: dict, state_name: str, message: str | None) -> None:
    rel = layout.attempt_file(attempt["shard_id"], attempt["attempt_id"], "readiness.json")
    current = run.dir.read(rel, "tau.readiness")
    run.dir.replace(rel, {
        "kind": "tau.readiness", "schema_version": 1, "run_id": attempt["run_id"], "shard_id": attempt["shard_id"],
        "attempt_id": attempt["attempt_id"], "revision": 1 if current is None else current["revision"] + 1,
        "updated_at": jsonio.now_rfc3339(), "state": state_name, "restarts": attempt["restarts"],
        "message": message})


def _record_stop(run: Run, attempt: dict, stop: _Stop) -> None:
    """Readiness "stopped", once. The scheduler kills the allocation soon (Slurm: KillWait after the signal), so the
    locks are waited for STOP_LOCK_WAIT seconds at most; when not granted by then, the record is given up (the
    scheduler's evidence still decides the attempt) rather than left to be killed half-way."""
    if stop.record_tried:
        return
    stop.record_tried = True
    wait = min(STOP_LOCK_WAIT, locks.timeout_seconds())
    try:
        with locks.hold(run.dir, "run", shared=True, timeout=wait), \
                locks.hold(run.dir, locks.shard_lock_name(attempt["shard_id"]), timeout=wait):
            _readiness(run, attempt, "stopped", f"stopped by signal {stop.signum}; the scheduler's evidence decides "
                       "the attempt")
    except Busy:
        pass


def _update(run: Run, attempt: dict, **changes: object) -> dict:
    now = jsonio.now_rfc3339()
    record = dict(attempt, revision=attempt["revision"] + 1, updated_at=max(now, attempt["updated_at"]), **changes)
    run.dir.replace(layout.attempt_file(attempt["shard_id"], attempt["attempt_id"], "attempt.json"), record)
    return record


def run_task(run_dir: str, submission_id: str, publish_winner: bool = True, env: dict | None = None) -> dict:
    """Run this allocation's task (see the module docstring). Raises Interrupted when a stop signal arrived: the
    caller ends the process by that signal."""
    env = environment.current() if env is None else env
    identity = allocation_identity(env)
    with _Stop() as stop:
        summary = _run_task(run_dir, submission_id, publish_winner, env, identity, stop)
    if stop.signum is not None:  # arrived after the client had ended, while its result was recorded
        raise Interrupted(stop.signum)
    return summary


def _run_task(run_dir: str, submission_id: str, publish_winner: bool, env: dict, identity: dict,
              stop: _Stop) -> dict:
    with Run(run_dir) as run:
        sub = run.dir.read(f"submissions/{submission_id}/plan.json", "tau.submission-plan")
        if sub is None:
            raise NotFound(f"run {run.run_id!r} has no submission {submission_id!r}")
        tasks = [t for t in sub["tasks"] if t["task_index"] == identity["task_index"]]
        if not tasks:
            raise Refused(f"submission {submission_id!r} has no task {identity['task_index']}")
        sid, aid = tasks[0]["shard_id"], tasks[0]["attempt_id"]
        _await_binding(run, submission_id, env, stop)
        restarts = _restart_count(env)
        with ExitStack() as stack:
            if run.plan["resume"] == "always":
                stack.enter_context(locks.hold(run.dir, locks.resume_lock_name(sid)))
            with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, locks.shard_lock_name(sid)):
                attempt = _fence(run, sid, aid, identity, restarts)
                restarting = attempt["state"] == "running"
                attempt = _update(run, attempt, state="running", started_at=jsonio.now_rfc3339(),
                                  restarts=restarts if restarting else attempt["restarts"])
                _readiness(run, attempt, "restarting" if restarting else "starting",
                           f"requeued (restart {restarts})" if restarting else None)
                failpoints.hit("attempt.running")
                if run.plan["resume"] == "never":
                    if run.dir.has_folder(attempt["dataset"]):
                        run.dir.remove_tree(attempt["dataset"])  # a requeued allocation starts clean
                run.dir.make_folders(attempt["dataset"])
            outcome = _run_client(run, attempt, env, stop)
            if outcome.interrupted:
                # The scheduler stopped this allocation (scancel, time limit, requeue, preemption): it alone knows
                # which, so no result is recorded here and the attempt stays running; its evidence decides.
                _record_stop(run, attempt, stop)
                raise Interrupted(outcome.interrupted)
            summary = _finish(run, attempt, outcome)
            if summary["state"] == "succeeded" and publish_winner:
                from taulib.lifecycle import winner

                try:
                    summary["winner"] = winner.publish(run, sid, resume_held=run.plan["resume"] == "always")
                except TauError as exc:
                    summary["winner"] = {"shard_id": sid, "winner": None, "published": False,
                                         "reason": exc.message}
            return summary


def _client_env(run: Run, attempt: dict, env: dict) -> dict:
    shard = run.shard(attempt["shard_id"])
    out = dict(env)
    out.update(run.plan["env"])
    out.update({
        "TAU_RUN_DIR": run.path, "TAU_RUN_ID": run.run_id, "TAU_SHARD_ID": attempt["shard_id"],
        "TAU_SHARD_INDEX": str(shard["index"]), "TAU_ATTEMPT_ID": attempt["attempt_id"],
        "TAU_ATTEMPT_ORDINAL": str(attempt["ordinal"]), "TAU_RECORD_START": str(shard["record_start"]),
        "TAU_RECORD_END": str(shard["record_end"]), "TAU_OUTPUT_DIR": os.path.join(run.path, attempt["dataset"]),
        "TAU_OUTPUT_FORMAT": "parquet"})
    return out


def _run_client(run: Run, attempt: dict, env: dict, stop: _Stop) -> ClientOutcome:
    started = jsonio.now_rfc3339()
    log = run.dir.open_append(layout.attempt_file(attempt["shard_id"], attempt["attempt_id"], "client.log"))
    try:
        with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, locks.shard_lock_name(attempt["shard_id"])):
            _readiness(run, attempt, "running", None)
        if stop.signum is not None:  # stopped before the client started: do not start it
            return ClientOutcome(started, None, stop.signum, None, stop.signum)
        try:
            stop.client = proc = subprocess.Popen(
                run.plan["command"], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                env=_client_env(run, attempt, env), close_fds=True)
        except OSError as exc:
            return ClientOutcome(started, None, None,
                                 f"cannot start the client {run.plan['command'][0]!r}: {exc.strerror}", None)
    finally:
        os.close(log)
    stop.forward()  # a stop signal that arrived while the client was being started
    while True:
        try:
            code = proc.wait(timeout=CLIENT_POLL)
            break
        except subprocess.TimeoutExpired:
            if stop.signum is not None:
                _record_stop(run, attempt, stop)  # now, while the client ends, not after
    if stop.signum is None and -code in STOP_SIGNALS:
        stop.wait(STOP_GRACE)  # the scheduler signalled the client first: this process's signal is on its way
    return ClientOutcome(started, code if code >= 0 else None, -code if code < 0 else stop.signum, None,
                         stop.signum)


def _finish(run: Run, attempt: dict, outcome: ClientOutcome) -> dict:
    from taulib.lifecycle import candidate

    sid, aid = attempt["shard_id"], attempt["attempt_id"]
    shard = run.shard(sid)
    requested = shard["record_end"] - shard["record_start"]
    manifest = None
    error = outcome.error
    actual = None
    if error is None and outcome.exit_code == 0:
        try:
            files, digest = candidate.describe(run.dir, attempt["dataset"])
            actual = sum(f["rows"] for f in files)
            if files:
                manifest = {"kind": "tau.manifest", "schema_version": 1, "run_id": run.run_id, "shard_id": sid,
                            "attempt_id": aid, "ordinal": attempt["ordinal"], "created_at": jsonio.now_rfc3339(),
                            "dataset": attempt["dataset"], "format": "parquet", "requested_records": requested,
                            "actual_records": actual, "files": files, "schema_digest": digest,
                            "provenance": run.plan_sha256}
        except BadInput as exc:
            error = exc.message
    elif error is None:
        error = (f"the client was killed by signal {outcome.signal}" if outcome.signal
                 else f"the client exited with status {outcome.exit_code}")
    if error is None and actual != requested:
        error = f"the client wrote {actual} of {requested} records"
    outcome_name = "complete" if error is None else ("partial" if actual and 0 < actual < requested else "failed")
    manifest_ref = None
    with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, locks.shard_lock_name(sid)):
        current = run.dir.require(layout.attempt_file(sid, aid, "attempt.json"), "tau.attempt")
        if current["revision"] != attempt["revision"] or current["state"] != "running":
            raise Refused(f"{sid}/{aid} was finalised by another process ({current['state']}) while the client "
                          "ran; this allocation writes nothing more", shard_id=sid)
        if manifest is not None and outcome_name == "complete":
            manifest_rel = layout.attempt_file(sid, aid, "manifest.json")
            run.dir.publish(manifest_rel, manifest)
            manifest_ref = {"path": manifest_rel, "sha256": jsonio.digest(manifest)}
            failpoints.hit("attempt.manifest_written")
        result = {"kind": "tau.result", "schema_version": 1, "run_id": run.run_id, "shard_id": sid,
                  "attempt_id": aid, "started_at": outcome.started_at, "completed_at": jsonio.now_rfc3339(),
                  "exit_code": outcome.exit_code, "signal": outcome.signal, "outcome": outcome_name,
                  "requested_records": requested, "actual_records": actual, "manifest": manifest_ref,
                  "error": error[:512] if error else None}
        run.dir.publish(layout.attempt_file(sid, aid, "result.json"), result)
        failpoints.hit("attempt.result_written")
        succeeded = outcome_name == "complete"
        cancelled = outcome.signal in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        classification = "succeeded" if succeeded else ("cancelled" if cancelled else "failed")
        attempt = _update(run, current, state="succeeded" if succeeded else "failed",
                          terminal={"classification": classification, "reason": error or "complete",
                                    "exit_code": outcome.exit_code})
        _readiness(run, attempt, "stopped" if succeeded else "failed", error)
    return {"shard_id": sid, "attempt_id": aid, "state": attempt["state"], "outcome": outcome_name,
            "exit_code": outcome.exit_code, "records": actual, "error": error}
