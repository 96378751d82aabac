"""Driving a run (tau-drive): one cycle of what the plumbing does, in turn, until the run is finished.

A cycle is the same library calls the plumbing commands make, in their order: observe and reconcile
(`lifecycle.observe.observe_and_reconcile`, under the run lock as the commands take it), publish the winners of
candidates (`lifecycle.winner`), stop the attempts the plan stops when stalled (`rules.stall`, the stop records of
`lifecycle.client`), then submit: the run's first submission when it has none, the shards the scheduler's limits
deferred (`lifecycle.retry.initial`), and a retry of the retryable shards within the budget
(`lifecycle.retry.retry`). The status it ends with is read again from the records (`rundir.status`), and
`rules.drive` says whether the run is finished and what a person is owed a notification for. With `Collect`
(tau-drive --collect), a run that succeeded (or, allowed to be partial, finished) is then collected by
`collect.collection.collect`, as tau-collect --wait does: under its own locks, after drive.lock is let go.
Reads: the run's records, the scheduler (through the executors). Writes: through those library calls only, and
its own `drive/state.json` (tau.drive, mutable), under `locks/drive.lock`: how many cycles began, and what the
notifications last told.
Promises:
- cycles of one run take turns (drive.lock); a caller that asked while a cycle was running waits for it, and
  runs one of its own only when no cycle began after it asked (the record's `cycles`): a burst of callers (cron
  lines, epilogs) costs at most two cycles, and no request goes unserved;
- every step takes the locks its command takes, in turn (the run lock, shared, then the step's own), and lets
  them go before the next: only drive.lock is held across the cycle, so no step waits for a lock the cycle holds;
- nothing is submitted twice: the submissions' own submit lock and journal decide, as for the plumbing;
- each notification (`--notify`) is sent once: it is run under drive.lock and recorded after it ran (a crash in
  between sends it again: at least once);
- it never needs a process to stay alive: `--once` from cron does one cycle, and any fresh process carries on;
  in the foreground, a cycle that meets a busy lock or a scheduler that does not answer is tried again.
"""

from __future__ import annotations

import subprocess
import time
from typing import TYPE_CHECKING, Callable, NamedTuple

from taulib import env, executors, jsonio
from taulib.errors import Busy, TauError, Unavailable
from taulib.rules import drive as drive_rules
from taulib.rules import stall as stall_rules
from taulib.rundir import layout, locks
from taulib.rundir.status import run_status

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run

NOTIFY_TIMEOUT = 60.0  # seconds a --notify command may run before it is killed
WAIT_FOR_TURN = 3600.0  # seconds a caller waits for the cycle of another one to end


class Collect(NamedTuple):
    """How a driven run is collected once it is finished (tau-drive --collect): tau-collect --destination
    DESTINATION --wait, with --allow-missing when `allow_missing` and the run finished without succeeding;
    `progress` as tau-collect --progress (None: when standard error is a terminal)."""

    destination: str
    allow_missing: bool = False
    progress: bool | None = False


def once(run: Run, notify: str | None = None, status_file: str | None = None,
         shown: Callable[[Record], None] | None = None, collect: Collect | None = None) -> Record:
    """One cycle (or none, when one began after this call asked): the cycle's actions, the notifications sent,
    whether the run is finished, and its status; `shown` gets the result before the run is collected (`collect`),
    and the result's `collection` is the collection's (None when none was made)."""
    result = _turn(run, notify, status_file)
    if shown is not None:
        shown(result)
    return collected(run, result, collect)


def _turn(run: Run, notify: str | None, status_file: str | None) -> Record:
    """One cycle of this caller's, or none when one began after it asked (module docstring)."""
    asked = _state(run)["cycles"]
    with locks.hold(run.dir, "drive", timeout=WAIT_FOR_TURN):
        current = _state(run)
        if current["cycles"] > asked:  # a cycle began after this call asked: it served this request
            status = run_status(run, parallel=executors.of(run).limits(run.plan).parallel)
            return _result(run, status, None, [], served=True)
        current = _save(run, current, cycles=current["cycles"] + 1)
        actions, status = cycle(run, status_file)
        sent = _notify(run, current, status, notify)
        _save(run, current, told=drive_rules.told_after(current["told"], status))
    return _result(run, status, actions, sent, served=False)


def cycle(run: Run, status_file: str | None = None) -> tuple[Record, Record]:
    """(the actions of one cycle, the status after them)."""
    from taulib.lifecycle import observe, reconcile, retry, winner

    reconciled = observe.observe_and_reconcile(run)
    candidates = [s["id"] for s in reconciled["shards"] if s["state"] == "candidate"]
    won = winner.publish_many(run, candidates)["shards"] if candidates else []
    stopped = _stop_stalled(run, reconciled)
    submitted: list[Record] = []
    if not retry.initial_made(run) or reconciled["deferred"] is not None:  # the status read the deferral
        submitted.append(_submission(retry.initial(run)))
    retried = retry.retry(run, observed=True)  # this cycle observed and reconciled already
    if retried["submission_id"] is not None:
        submitted.append(_submission(retried))
    status = run_status(run, parallel=executors.of(run).limits(run.plan).parallel, sources=reconciled["sources"])
    if status_file is not None:
        target = reconcile.StatusFile(run, status_file)
        try:
            with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "status"):
                target.write(status)
        finally:
            target.close()
    actions = {"changes": len(reconciled["changes"]),
               "winners": [w["shard_id"] for w in won if w["published"]],
               "stopped": stopped, "submitted": [s for s in submitted if s["tasks"]],
               "retry_reason": retried["reason"]}
    return actions, status


def drive(run: Run, interval: float, notify: str | None = None, status_file: str | None = None,
          shown: Callable[[Record], None] | None = None, cycles: int | None = None,
          hitch: Callable[[TauError], None] | None = None, collect: Collect | None = None) -> Record:
    """Cycle until the run is finished (or `cycles` cycles ran), `interval` seconds apart; `shown` gets each
    cycle's result (progress for a person). A cycle that meets a busy lock, a submission not resolved yet or a
    scheduler that does not answer (Busy, Unavailable) is tried again at the next interval (`hitch` is told why).
    Returns the last result, with `cycles` the number this call ran, and `collection` as `once` says."""
    count = 0
    while True:
        try:
            result = _turn(run, notify, status_file)
        except (Busy, Unavailable) as exc:
            if hitch is not None:
                hitch(exc)
            time.sleep(interval)
            continue
        count += 1
        if shown is not None:
            shown(result)
        if result["finished"] is not None or (cycles is not None and count >= cycles):
            result["cycles"] = count
            return collected(run, result, collect)
        time.sleep(interval)


def collected(run: Run, result: Record, collect: Collect | None) -> Record:
    """The drive's result with its `collection`: with `collect`, once the run succeeded (or, with
    `allow_missing`, finished), tau-collect's result for its destination (made, or found made before), else None.
    The collection takes its own locks (the run lock, shared, then collect.lock), after the cycle let go of
    drive.lock: a long collection holds up no other driver."""
    collection: Record | None = None
    partial = collect is not None and collect.allow_missing and result["finished"] is not None
    if collect is not None and (result["state"] == "succeeded" or partial):
        from taulib.collect import collection as collecting

        collection = collecting.collect(run, collect.destination, wait=True, progress=collect.progress,
                                        allow_missing=partial and result["state"] != "succeeded")
    return dict(result, collection=collection)


def _result(run: Run, status: Record, actions: Record | None, sent: list[Record], served: bool) -> Record:
    return {"kind": "tau.drive-result", "schema_version": 1, "run_id": run.run_id, "state": status["state"],
            "finished": drive_rules.finished(status), "cycles": 0 if served else 1, "served_by_another": served,
            "actions": actions, "notified": sent, "status": status}


def _submission(result: Record) -> Record:
    return {"submission_id": result["submission_id"], "purpose": result["purpose"], "job_id": result["job_id"],
            "tasks": len(result["tasks"])}


def _stop_stalled(run: Run, status: Record) -> list[Record]:
    """Stop the running attempts the status shows stalled, when the plan says so (`windows.stall_action` stop):
    a stop record (`by` stall) first, then the executor's stop. The allocation stops a client whose progress stands
    still by itself; this also stops an attempt whose allocation wrote no heartbeat (hung or gone)."""
    if not stall_rules.stops(run.plan["windows"]):
        return []
    from taulib.lifecycle import cancel, client
    from taulib.rundir import state

    targets: list[Record] = []
    for shard in status["shards"]:
        if not shard["stalled"] or shard["state"] != "running":
            continue
        with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, locks.shard_lock_name(shard["id"])):
            attempt = state.latest_attempt(run, shard["id"])
            if attempt is None or attempt["attempt_id"] != shard["attempt"] or attempt["state"] not in cancel.LIVE:
                continue
            client.stop_record(run, attempt, "stall", stall_rules.reason(shard["stalled"]))
            targets.append(attempt)
    stopped, _ = cancel.stop_attempts(run, targets)
    return [{"shard_id": a["shard_id"], "attempt_id": a["attempt_id"]} for a in stopped]


def _notify(run: Run, current: Record, status: Record, command: str | None) -> list[Record]:
    """Run `command` once per event owed (`rules.drive.events`), the status on its standard input and the event
    in TAU_DRIVE_EVENT (TAU_DRIVE_SHARD for an exhausted shard), TAU_RUN_DIR and TAU_RUN_ID in its environment."""
    if command is None:
        return []
    sent = []
    body = jsonio.canonical(status)
    for event in drive_rules.events(current["told"], status):
        environ = dict(env.current(), TAU_DRIVE_EVENT=event["event"], TAU_DRIVE_SHARD=event["shard_id"] or "",
                       TAU_RUN_DIR=run.path, TAU_RUN_ID=run.run_id)
        try:
            done = subprocess.run(["/bin/sh", "-c", command], input=body, env=environ, timeout=NOTIFY_TIMEOUT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
            outcome = {"exit_code": done.returncode,
                       "error": done.stderr.decode(errors="replace")[-512:] or None if done.returncode else None}
        except subprocess.TimeoutExpired:
            outcome = {"exit_code": None, "error": f"killed after {NOTIFY_TIMEOUT:.0f}s"}
        except OSError as exc:
            outcome = {"exit_code": None, "error": f"cannot run /bin/sh: {exc.strerror}"}
        sent.append(dict(event, **outcome))
    return sent


def _state(run: Run) -> Record:
    """The drive record, or the one a run that was never driven implies."""
    found = run.dir.read(layout.DRIVE, "tau.drive")
    if found is not None:
        return found
    return {"kind": "tau.drive", "schema_version": 1, "run_id": run.run_id, "revision": 0, "cycles": 0,
            "told": {"state": None, "exhausted": []}, "updated_at": jsonio.now_rfc3339()}


def _save(run: Run, current: Record, **changes: object) -> Record:
    """Replace the drive record (the caller holds drive.lock; like every writer, this holds run.lock shared)."""
    record = dict(current, **changes, revision=current["revision"] + 1, updated_at=jsonio.now_rfc3339())
    with locks.hold(run.dir, "run", shared=True):
        run.dir.make_folders(layout.DRIVE.rpartition("/")[0])
        run.dir.replace(layout.DRIVE, record)
    return record
