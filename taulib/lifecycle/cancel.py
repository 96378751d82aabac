"""Cancellation (tau-cancel): a durable record first, then the live attempts stopped; never started again.

Reads: the shards' records, the local executor's task and supervisor records. Writes: `cancel.json` (the whole
run) or `shards/S/cancel.json` (named shards), immutable, under run.lock (shared), submit.lock and each shard's
lock; then it stops the live attempts of the cancelled shards: SIGTERM to their process groups under the local
executor, `scancel` of their exact job and array task ids under Slurm.
Promises:
- the record comes first: once tau-cancel has returned (even with the stopping step failed), tau-submit, tau-retry
  and the local supervisor never start a cancelled shard again, and an allocation of one writes nothing but its end;
- tau-retry selects under the same submit lock, so a cancel and a retry that race converge to cancelled: every
  attempt either existed before the record (and is stopped) or is never made;
- a cancelled shard is `cancelled` ("cancelled by the user at T") in every status; a sealed shard keeps its winner;
- idempotent: cancelling again keeps the first record and stops whatever is still live.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

from taulib import executor, failpoints, jsonio
from taulib.lifecycle.observe import by_executor
from taulib.rundir import layout, locks, state

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run


def cancel(run: Run, shard_ids: list[str] | None = None) -> Record:
    """Cancel the whole run (no `shard_ids`) or the named shards; returns what was recorded and stopped."""
    wanted = sorted(set(shard_ids)) if shard_ids else None
    for sid in wanted or []:
        run.check_shard(sid)
    whole_run: Record | None
    with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "submit"):
        if wanted is None:
            with locks.hold(run.dir, "root"):
                whole_run = _record(run, None)
        else:
            whole_run = state.run_cancel(run)
        requested = whole_run["requested_at"] if whole_run else None
        sealed: list[str] = []
        cancelled: list[str] = []
        targets: list[Record] = []
        submitted = state.Submitted(run)  # the journal cannot change: this holds submit.lock
        for sid in wanted if wanted is not None else run.shard_ids():
            with locks.hold(run.dir, locks.shard_lock_name(sid)):
                if run.dir.exists(layout.winner(sid)):
                    sealed.append(sid)
                    continue
                record = whole_run or _record(run, sid)
                requested = requested or record["requested_at"]
                cancelled.append(sid)
                attempt = state.latest_attempt(run, sid, submitted)
                if attempt is not None and attempt["state"] in ("submitted", "running"):
                    targets.append(attempt)
    failpoints.hit("cancel.recorded")  # the records are durable; nothing is stopped yet
    stopped, problem = _stop(run, targets, whole_run=wanted is None)
    return {"kind": "tau.cancel-result", "schema_version": 1, "run_id": run.run_id,
            "scope": "run" if wanted is None else "shards",
            "requested_at": requested,
            "cancelled": cancelled, "sealed": sealed,
            "stopped": [{"shard_id": a["shard_id"], "attempt_id": a["attempt_id"], "scheduler": a["scheduler"]}
                        for a in stopped],
            "problem": problem}


def _record(run: Run, sid: str | None) -> Record:
    """The cancellation of the run (sid None) or of one shard: the one already there, or a new one."""
    rel = layout.CANCEL if sid is None else layout.shard_cancel(sid)
    existing = run.dir.read(rel, "tau.cancel")
    if existing is not None:
        return existing
    record = {"kind": "tau.cancel", "schema_version": 1, "run_id": run.run_id, "shard_id": sid,
              "requested_at": jsonio.now_rfc3339(), "uid": os.geteuid(), "host": socket.gethostname()[:255]}
    run.dir.publish(rel, record)
    return record


def _stop(run: Run, attempts: list[Record], whole_run: bool) -> tuple[list[Record], str | None]:
    """Stop the live attempts through their executors; (the attempts stopped, why stopping failed or None)."""
    stopped: list[Record] = []
    for name, group in by_executor(attempts).items():
        done = executor.get(name).stop(run, group, whole_run)
        stopped += done.attempts
        if done.problem is not None:
            return stopped, done.problem
    return stopped, None
