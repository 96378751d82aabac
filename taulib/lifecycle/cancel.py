"""Cancellation (tau-cancel): a durable record first, then the live attempts stopped; never started again. Its
two ways back: an attempt stopped without giving up its shard (`--attempt`), and a cancellation lifted (`reopen`,
tau-retry --reopen).

Reads: the shards' records, the local executor's task and supervisor records. Writes, under run.lock (shared),
submit.lock and each shard's lock: `cancel.json` (the whole run) or `shards/S/cancel.json` (named shards), or an
attempt's `stop.json`, immutable; then it stops the live attempts named: SIGTERM to their process groups under the
local executor, `scancel` of their exact job and array task ids under Slurm. `reopen` writes the `reopen.json`
beside the cancellation it lifts (a later cancellation of the same run or shard is `cancel-2.json`, lifted by
`reopen-2.json`, and so on: `rundir.state.cancel_chain`), so the history keeps every cancellation and every lift,
each with who (uid, host) and when.
Promises:
- the record comes first: once tau-cancel has returned (even with the stopping step failed), tau-submit, tau-retry
  and the local supervisor never start a cancelled shard (or a stopped attempt) again, and an allocation of one
  writes nothing but its end;
- tau-retry selects under the same submit lock, so a cancel and a retry that race converge to cancelled: every
  attempt either existed before the record (and is stopped) or is never made;
- a cancelled shard is `cancelled` ("cancelled by the user at T") in every status; a sealed shard keeps its winner;
  a stopped attempt ends failed ("stopped by the user at T"), and its shard is retryable within its budget;
- what already ended is left alone and said so (`noop`): a run whose every shard has a winner gets no cancellation,
  an attempt that ended gets no stop;
- idempotent: cancelling again keeps the record in force and stops whatever is still live.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib import executors, failpoints, jsonio
from taulib.errors import Conflict, UsageError
from taulib.lifecycle.observe import by_executor
from taulib.rundir import layout, locks, state

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run

LIVE = ("submitted", "running")  # the attempt records that a stop still concerns


def cancel(run: Run, shard_ids: list[str] | None = None, attempt: bool = False) -> Record:
    """Cancel the whole run (no `shard_ids`) or the named shards; with `attempt`, stop the live attempt of each named
    shard instead, leaving the shard retryable. Returns what was recorded and stopped."""
    wanted = sorted(set(shard_ids)) if shard_ids else None
    if attempt and wanted is None:
        raise UsageError("--attempt stops the live attempt of the shards named with --shard; name at least one")
    for sid in wanted or []:
        run.check_shard(sid)
    whole_run: Record | None = None
    sealed: list[str] = []
    cancelled: list[str] = []
    ended: list[Record] = []
    targets: list[Record] = []
    requested: str | None = None
    with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "submit"):
        if wanted is None:
            with locks.hold(run.dir, "root"):
                if state.run_cancel(run) is not None or not _all_won(run):
                    whole_run = _record(run, None)
                    requested = whole_run["requested_at"]
        elif not attempt:
            whole_run = state.run_cancel(run)
            requested = whole_run["requested_at"] if whole_run else None
        submitted = state.Submitted(run)  # the journal cannot change: this holds submit.lock
        shards = wanted if wanted is not None else (run.shard_ids() if whole_run else [])
        for sid in shards:
            with locks.hold(run.dir, locks.shard_lock_name(sid)):
                if run.dir.exists(layout.winner(sid)):
                    sealed.append(sid)
                    continue
                latest = state.latest_attempt(run, sid, submitted)
                if attempt:
                    if latest is None or latest["state"] not in LIVE:
                        ended.append({"shard_id": sid, "attempt_id": latest and latest["attempt_id"],
                                      "state": latest["state"] if latest else None})
                        continue
                    stop = _stop_record(run, latest)
                    requested = requested or stop["requested_at"]
                    targets.append(latest)
                    continue
                record = whole_run or _record(run, sid)
                requested = requested or record["requested_at"]
                cancelled.append(sid)
                if latest is not None and latest["state"] in LIVE:
                    targets.append(latest)
    failpoints.hit("cancel.recorded")  # the records are durable; nothing is stopped yet
    stopped, problem = _stop(run, targets, whole_run=wanted is None)
    scope = "run" if wanted is None else ("attempts" if attempt else "shards")
    return {"kind": "tau.cancel-result", "schema_version": 1, "run_id": run.run_id, "scope": scope,
            "requested_at": requested,
            "cancelled": cancelled, "sealed": sealed, "ended": ended,
            "stopped": [{"shard_id": a["shard_id"], "attempt_id": a["attempt_id"], "scheduler": a["scheduler"]}
                        for a in stopped],
            "noop": _noop(scope, requested, sealed, ended),
            "problem": problem}


def reopen(run: Run, shard_ids: list[str] | None = None) -> list[Record]:
    """Lift the cancellation in force of the run (no `shard_ids`) or of each named shard (its own: a shard the
    whole run's cancellation covers is refused, naming the way). Returns the lifts recorded ({shard_id, lifts,
    requested_at}); a run or shard not cancelled has nothing to lift and is left out."""
    wanted = sorted(set(shard_ids)) if shard_ids else None
    for sid in wanted or []:
        run.check_shard(sid)
    lifted: list[Record] = []
    with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "submit"):
        if wanted is None:
            with locks.hold(run.dir, "root"):
                lifted += _lift(run, None)
            return lifted
        whole_run = state.run_cancel(run)
        if whole_run is not None:
            raise Conflict(f"run {run.run_id!r} is cancelled as a whole (at {whole_run['requested_at']}); lift that "
                          f"with tau-retry {run.path} --reopen, then name shards if only some should run")
        for sid in wanted:
            with locks.hold(run.dir, locks.shard_lock_name(sid)):
                lifted += _lift(run, sid)
    return lifted


def _all_won(run: Run) -> bool:
    """Whether every shard of the run has its winner (the sealed index first, then the winners of the rest)."""
    return all(run.dir.exists(layout.winner(sid)) for sid in state.unsealed_shards(run))


def _who() -> Record:
    from taulib.lifecycle import client

    return client.requester()


def _record(run: Run, sid: str | None) -> Record:
    """The cancellation in force of the run (sid None) or of one shard: the one already there, or a new one."""
    existing, generation = state.cancel_chain(run, sid)
    if existing is not None:
        return existing
    record = {"kind": "tau.cancel", "schema_version": 1, "run_id": run.run_id, "shard_id": sid, **_who()}
    run.dir.publish(layout.cancel_record(sid, generation), record)
    return record


def _lift(run: Run, sid: str | None) -> list[Record]:
    existing, generation = state.cancel_chain(run, sid)
    if existing is None:
        return []
    record = {"kind": "tau.reopen", "schema_version": 1, "run_id": run.run_id, "shard_id": sid,
              "lifts": existing["requested_at"], **_who()}
    run.dir.publish(layout.reopen_record(sid, generation), record)
    return [{"shard_id": sid, "lifts": existing["requested_at"], "requested_at": record["requested_at"]}]


def _stop_record(run: Run, attempt: Record) -> Record:
    """The attempt's stop request by the user: the one already there, or a new one."""
    from taulib.lifecycle import client

    at = jsonio.now_rfc3339()
    return client.stop_record(run, attempt, "user", f"stopped by the user at {at}", at)


def _noop(scope: str, requested: str | None, sealed: list[str], ended: list[Record]) -> str | None:
    """Why nothing was recorded, or None when something was."""
    if requested is not None:
        return None
    if scope == "run":
        return "every shard of the run already has its winner: nothing to cancel, nothing was recorded"
    if scope == "attempts":
        return "no named shard has a live attempt (ended or sealed): nothing to stop, nothing was recorded"
    return "every named shard already has its winner: nothing to cancel, nothing was recorded"


def stop_attempts(run: Run, attempts: list[Record]) -> tuple[list[Record], str | None]:
    """Stop these live attempts (their stop or cancellation records written first); (stopped, problem)."""
    return _stop(run, attempts, whole_run=False)


def _stop(run: Run, attempts: list[Record], whole_run: bool) -> tuple[list[Record], str | None]:
    """Stop the live attempts through their executors; (the attempts stopped, why stopping failed or None)."""
    stopped: list[Record] = []
    for name, group in by_executor(attempts).items():
        done = executors.get(name).stop(run, group, whole_run)
        stopped += done.attempts
        if done.problem is not None:
            return stopped, done.problem
    return stopped, None
