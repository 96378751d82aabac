"""The in-allocation side (`tau-attempt run`): fence, mark running, readiness, the order of work, the result.

Runs inside the allocation (a Slurm array task, or a task of the local executor). Steps:
  1. find its task in the submission plan by the allocation's task index;
  2. fence: nothing is written until the allocation's identity (local: TAU_LOCAL_JOB_ID/TAU_LOCAL_TASK_ID; Slurm:
     SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID) equals the persisted attempt's scheduler identity, the attempt is the
     shard's newest, the shard has no winner, the attempt has not started (or is the same allocation restarted
     after a requeue) and its scheduler evidence is not terminal. A late or duplicate allocation exits 77 and
     writes nothing;
  3. under the shard lock: attempt.json -> running (an attempt only its submission recorded yet gets its
     revision-1 attempt.json first: failpoint attempt.recorded), readiness.json revision 1 "starting" (with services:
     version 2, every deployment pending) or, for a requeued allocation, "restarting";    failpoint attempt.running
     a requeued allocation whose readiness says a deployment failed ends its attempt failed instead;
  4. prepare the dataset folder (per attempt, or the shard-owned workspace under its resume lock);
  5. the order of work (`lifecycle.allocation`): the client's preflight, the services started and probed until
     ready, their endpoints published, the client run (`lifecycle.client`: the program and environment the run
     fixed, the heartbeat, the stop signals, a cancellation noticed while it runs), then the one cleanup owner
     (every service and every process left behind stopped; this process is their subreaper).
                      failpoints attempt.services_started, attempt.endpoints_published, attempt.cleaned_up
     After a stop signal nothing else is recorded and, once everything has ended, the process ends by the same signal
     (the scheduler's evidence says what happened); a shard cancelled before its client started ends its attempt
     cancelled without starting it;
  6. result.json (always; naming the processes the cleanup stopped), manifest.json (when the client exited 0 and
     wrote Parquet), attempt.json -> succeeded or failed, readiness "stopped" or "failed"
                                                         failpoints attempt.result_written, attempt.manifest_written
  7. unless --no-winner, publish the shard's winner.
Reads: the submission plan and status, the attempt's records, the allocation's environment. Writes: the attempt's
attempt.json, readiness.json, endpoints.json, result.json, manifest.json, client.log, services/*.log and dataset
(and the winner, step 7).
Promises: an allocation that is not the persisted attempt writes nothing; a stopped allocation records only that it
was stopped; every attempt ends with a result; nothing the allocation started outlives it.
"""

from __future__ import annotations

import signal
import time
from contextlib import ExitStack
from typing import TYPE_CHECKING

from taulib import env as environment
from taulib import executors, failpoints, jsonio, processes
from taulib.errors import BadInput, NotFound, Refused, TauError
from taulib.lifecycle import allocation, client, readiness
from taulib.rules import budget
from taulib.rundir import layout, locks, state
from taulib.rundir.journal import find_task
from taulib.rundir.run import Run

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.lifecycle.containers import Images
    from taulib.lifecycle.services import Services

LEFTOVERS = 100  # processes named in result.json at most


def allocation_identity(env: dict[str, str]) -> Record:
    """The scheduler identity this process runs under, from its environment (the executors' table asked)."""
    return executors.identity(env)


def _fence(run: Run, sid: str, aid: str, identity: Record, restarts: int) -> Record:
    """Return the attempt record when this allocation may write, else raise Refused (nothing written)."""
    submitted = state.Submitted(run)  # read now: a newer submission may have given the shard a newer attempt
    attempt = state.attempt_record(run, sid, aid, submitted)
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
    latest = state.latest_attempt(run, sid, submitted)
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


def _await_binding(run: Run, submission_id: str, env: dict[str, str], stop: client.Stop) -> None:
    """Wait until the submission is bound to its job (a Slurm allocation can start before tau-submit has recorded
    the job id). A retired submission, or one not bound in time, means this allocation is late: Refused. A stop
    signal ends the wait (Interrupted): nothing has been written."""
    limit = time.monotonic() + environment.get("TAU_BINDING_WAIT", env)
    rel = f"submissions/{submission_id}/status.json"
    while True:
        if stop.signum is not None:
            raise client.Interrupted(stop.signum)
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


def _update(run: Run, attempt: Record, **changes: object) -> Record:
    now = jsonio.now_rfc3339()
    record = dict(attempt, revision=attempt["revision"] + 1, updated_at=max(now, attempt["updated_at"]), **changes)
    run.dir.replace(layout.attempt_file(attempt["shard_id"], attempt["attempt_id"], "attempt.json"), record)
    return record


def run_task(run_dir: str, submission_id: str, publish_winner: bool = True,
             env: dict[str, str] | None = None) -> Record:
    """Run this allocation's task (see the module docstring). Raises Interrupted when a stop signal arrived: the
    caller ends the process by that signal."""
    env = environment.current() if env is None else env
    identity = allocation_identity(env)
    processes.become_subreaper()  # whatever the client or a service leaves behind is this allocation's to stop
    with client.Stop() as stop:
        summary = _run_task(run_dir, submission_id, publish_winner, env, identity, stop)
    if stop.signum is not None:  # arrived after the client had ended, while its result was recorded
        raise client.Interrupted(stop.signum)
    return summary


def _run_task(run_dir: str, submission_id: str, publish_winner: bool, env: dict[str, str], identity: Record,
              stop: client.Stop) -> Record:
    with Run(run_dir) as run:
        sub = run.dir.read(f"submissions/{submission_id}/plan.json", "tau.submission-plan")
        if sub is None:
            raise NotFound(f"run {run.run_id!r} has no submission {submission_id!r}")
        task = find_task(sub, identity["task_index"])
        if task is None:
            raise Refused(f"submission {submission_id!r} has no task {identity['task_index']}")
        sid, aid = task["shard_id"], task["attempt_id"]
        _await_binding(run, submission_id, env, stop)
        restarts = executors.get(identity["executor"]).restarts(env)
        with ExitStack() as stack:
            if run.plan["resume"] == "always":
                stack.enter_context(locks.hold(run.dir, locks.resume_lock_name(sid)))
            with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, locks.shard_lock_name(sid)):
                attempt = _fence(run, sid, aid, identity, restarts)
                state.record_attempt(run, attempt)  # only its submission recorded it yet: its attempt.json first
                restarting = attempt["state"] == "running"
                services = _services(run, attempt, restarting)
                why = client.cancelled(run, attempt)
                if why is not None:  # cancelled before its client started: it never will
                    return _end(run, attempt, "cancelled", f"{why}; the client was never started", services,
                                restarting)
                failed = _failed_before(run, attempt) if restarting and services is not None else None
                if failed is not None:  # a deployment failed, then the allocation was requeued: it stays failed
                    return _end(run, attempt, "failed", failed, services, restarting)
                attempt = _update(run, attempt, state="running", started_at=jsonio.now_rfc3339(),
                                  restarts=restarts if restarting else attempt["restarts"])
                readiness.write(run, attempt, "restarting" if restarting else "starting",
                                f"requeued (restart {restarts})" if restarting else None, services=services)
                failpoints.hit("attempt.running")
                if run.plan["resume"] == "never":
                    if run.dir.has_folder(attempt["dataset"]):
                        run.dir.remove_tree(attempt["dataset"])  # a requeued allocation starts clean
                run.dir.make_folders(attempt["dataset"])
            adopted, left = None, []
            if sub["purpose"] == "adopt":  # copy another run's winner instead of running the client
                from taulib.lifecycle import adopt

                why, adopted = adopt.copy(run, attempt, sub["adopt_from"])
                outcome = client.ClientOutcome(jsonio.now_rfc3339(), 0 if why is None else None, None, why, None)
                if services is not None:
                    services.stop()
            else:
                images = _images(run, attempt, services)
                try:
                    outcome = allocation.work(run, attempt, env, stop, services, images)
                finally:  # the one cleanup owner: whatever ended the work, nothing it started outlives it
                    left = allocation.cleanup(run, attempt, services, stop, images, env)
                    failpoints.hit("attempt.cleaned_up")
            if outcome.interrupted:
                # The scheduler stopped this allocation (scancel, time limit, requeue, preemption): it alone knows
                # which, so no result is recorded here and the attempt stays running; its evidence decides.
                if services is None:
                    client.record_stop(run, attempt, stop)
                raise client.Interrupted(outcome.interrupted)
            summary = _finish(run, attempt, outcome, adopted, left, services)
            if summary["state"] == "succeeded" and publish_winner:
                from taulib.lifecycle import winner

                try:
                    summary["winner"] = winner.publish(run, sid, resume_held=run.plan["resume"] == "always")
                except TauError as exc:
                    summary["winner"] = {"shard_id": sid, "winner": None, "published": False,
                                         "reason": exc.message}
            return summary


def _services(run: Run, attempt: Record, restarting: bool) -> Services | None:
    """The attempt's services (none started yet), when the plan has any."""
    if not run.plan.get("services"):
        return None
    from taulib.lifecycle.services import Services

    return Services(run, attempt, restarting)


def _images(run: Run, attempt: Record, services: Services | None) -> Images | None:
    """The attempt's images (none checked yet), when the plan names any; its services run theirs."""
    from taulib.lifecycle import containers

    if not containers.images(run.plan):
        return None
    images = containers.Images(run, attempt)
    if services is not None:
        services.images = images
    return images


def _failed_before(run: Run, attempt: Record) -> str | None:
    """Why the attempt's readiness says a deployment failed (an allocation requeued after one failed), or None."""
    record = run.dir.read(readiness.rel(attempt), "tau.readiness")
    if record is None or record["state"] != "failed":
        return None
    probes = [d["last_probe"]["message"] for d in record["deployments"] if d["state"] == "failed" and d["last_probe"]]
    return f"{probes[0] if probes else 'a service failed'}; the allocation was requeued after it, and it stays failed"


def _end(run: Run, attempt: Record, classification: str, why: str, services: Services | None,
         restarting: bool) -> Record:
    """End an attempt whose client never started (its shard cancelled, or a deployment that failed before a
    requeue); the caller holds the shard lock. The readiness of a requeued allocation with services is left as its
    last allocation wrote it: this one started nothing."""
    attempt = _update(run, attempt, state="failed",
                      terminal={"classification": classification, "reason": why, "exit_code": None})
    if services is None or not restarting:
        if services is not None:
            services.stop()
        readiness.write(run, attempt, "stopped", why, services=services)
    return {"shard_id": attempt["shard_id"], "attempt_id": attempt["attempt_id"], "state": "failed",
            "outcome": classification, "exit_code": None, "records": None, "error": why}


def _finish(run: Run, attempt: Record, outcome: client.ClientOutcome, adopted: Record | None = None,
            left: list[Record] | None = None, services: Services | None = None) -> Record:
    from taulib.lifecycle import candidate

    sid, aid = attempt["shard_id"], attempt["attempt_id"]
    shard = run.shard(sid)
    requested = shard["record_end"] - shard["record_start"]
    manifest: Record | None = None
    error = outcome.error
    actual: int | None = None
    if error is None and outcome.exit_code == 0 and outcome.input_sha256 is not None and \
            run.plan["output"].get("keep_input"):
        from taulib.inputs import keep

        error = keep.join(run, attempt, outcome.input_sha256, requested)
    if error is None and outcome.exit_code == 0:
        try:
            files, digest, fields = candidate.describe(run.dir, attempt["dataset"])
            actual = sum(f["rows"] for f in files)
            if files:
                assert fields is not None  # a candidate with files has their fields
                manifest = {"kind": "tau.manifest", "schema_version": 1, "run_id": run.run_id, "shard_id": sid,
                            "attempt_id": aid, "ordinal": attempt["ordinal"], "created_at": jsonio.now_rfc3339(),
                            "dataset": attempt["dataset"], "format": "parquet", "requested_records": requested,
                            "actual_records": actual, "files": files, "schema_digest": digest,
                            "provenance": run.plan_sha256, "fields": fields}
                if adopted is not None:  # held to this run's rules, and to the digests the adopted winner recorded
                    from taulib.lifecycle import adopt

                    manifest["adopted_from"] = {k: v for k, v in adopted.items() if k != "files"}
                    error = adopt.mismatch(adopted, files)
                if actual == requested and error is None:
                    error = candidate.schema_problem(run, sid, aid, fields)
        except (BadInput, Refused) as exc:  # the candidate is not one: the attempt fails, saying why
            error = exc.message
    elif error is None:
        error = outcome.cancelled or (f"the client was killed by signal {outcome.signal}" if outcome.signal
                                      else f"the client exited with status {outcome.exit_code}")
    if error is None and actual != requested:
        error = f"the client wrote {actual} of {requested} records"
    outcome_name = "complete" if error is None else ("partial" if actual and 0 < actual < requested else "failed")
    manifest_ref: Record | None = None
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
        if outcome.code is not None and error is not None:
            result["error_code"] = outcome.code
        if outcome.images:  # the digest of what ran: the client's image, each service's
            if "client" in outcome.images:
                result["image_digest"] = outcome.images["client"]
            served = {role.split(" ", 1)[1]: digest for role, digest in outcome.images.items() if role != "client"}
            if served:
                result["service_images"] = served
        if left:  # processes the client or a service left running, stopped by the cleanup owner
            result["leftovers"] = left[:LEFTOVERS]
        run.dir.publish(layout.attempt_file(sid, aid, "result.json"), result)
        failpoints.hit("attempt.result_written")
        succeeded = outcome_name == "complete"
        cancelled = outcome.cancelled is not None or (  # a client stopped for drifting columns failed (its error)
            outcome.error is None and outcome.signal in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
        classification = "succeeded" if succeeded else ("cancelled" if cancelled else "failed")
        terminal = {"classification": classification, "reason": error or "complete", "exit_code": outcome.exit_code}
        if outcome.code in budget.NOT_RETRIED and not succeeded:  # a retry cannot mend it (rules.shard)
            terminal["code"] = outcome.code
        attempt = _update(run, current, state="succeeded" if succeeded else "failed", terminal=terminal)
        readiness.write(run, attempt, "stopped" if succeeded else "failed", error, services=services)
    return {"shard_id": sid, "attempt_id": aid, "state": attempt["state"], "outcome": outcome_name,
            "exit_code": outcome.exit_code, "records": actual, "error": error}
