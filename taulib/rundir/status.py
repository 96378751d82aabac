"""The run status (`tau.status`): every shard's state and the evidence behind it, rolled up with the run's budget,
cancellation, unfinished journals and an estimate of the time left. The document tau-reconcile prints after it
applied observations, and tau-status prints without writing anything.

Reads: records only: the sealed-shard index first (finished shards cost nothing), then each unsealed shard's
views (`rundir.state`), the readiness of running attempts, the newest submission, every collection, and what
the submissions' tasks used (`rundir.usage`, one record per submission).
Writes: nothing, except that `run_status(update_index=True)` adds the shards it found sealed to the index (the
caller holds the run lock). Promises: every key of a shard entry and of the run is always present (null when it
does not apply); the time (`now`) is the observer's clock, never one read from a record; cost grows with the
unsealed shards, not with the run's history.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from taulib import jsonio
from taulib.rules import budget, efficiency, readiness, rollup
from taulib.rules.shard import since
from taulib.rundir import index, layout, state, usage
from taulib.rundir.journal import COLLECTIONS, SUBMISSIONS, Journal, task_count

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rules.evidence import Evidence
    from taulib.rules.shard import Facts
    from taulib.rundir.journal import Entry, Kind
    from taulib.rundir.run import Run

LIVE = ("running", "pending", "accounting_lag", "candidate")
FINISHED = ("succeeded", "failed")  # the verdicts of an attempt that ended, whose figures an executor may have


def run_status(run: Run, *, parallel: int | None, sources: Record | None = None, update_index: bool = False,
               now: float | None = None, evidence: dict[tuple[str, str], Evidence] | None = None,
               measured: dict[tuple[str, str], Record] | None = None, usage_reason: str | None = None) -> Record:
    """The rolled-up status. `parallel` is how many of the run's tasks its executor runs at once (its
    `Limits.parallel`; None: as many as the scheduler gives), for the estimate of the time left; `now` is the time
    of the observation (default: this machine's clock); `evidence` replaces the persisted evidence of the attempts
    it names (see `state.shard_view`); `measured`, figures of attempts (`rundir.usage`) their records do not hold
    yet (tau-status: those tau-reconcile would record); `usage_reason`, why the executor could not be asked for
    them (the observation's `usage.reason`)."""
    now = time.time() if now is None else now
    figures = usage.load(run)
    figures.update(measured or {})
    sealed, durations = index.load_all(run)
    whole_run = state.run_cancel(run)
    deferral = run.dir.read(layout.DEFERRAL, "tau.deferral")
    if deferral is not None and not deferral["shards"]:
        deferral = None
    waiting = 0  # shards the scheduler's limits deferred: pending, no attempt yet
    max_attempts = run.plan["retry"]["max_attempts"]
    found: dict[int, tuple[int, int | None]] = {}
    submitted = state.Submitted(run)
    plans: dict[str, Record | None] = {}  # the submission plans read, by id (each attempt's request)
    shards: list[Record] = []
    failed_attempts = 0  # of the whole run, counted shard by shard by the budget's rules
    for position, sid in enumerate(run.shard_ids()):
        if sealed[position]:
            shards.append(sealed_entry(sid, sealed[position], max_attempts, figures))
            failed_attempts += budget.won(sealed[position])  # what `rules.shard.decide` says of a winner
            continue
        view = state.shard_view(run, sid, whole_run, evidence, submitted, figures, plans, now)
        failed_attempts += view.decision.failed
        if view.winner is not None:
            ordinal = view.winner["ordinal"]
            found[position] = (ordinal, index.seconds(view.facts.attempt))
            durations[position] = found[position][1]
            shards.append(sealed_entry(sid, ordinal, max_attempts, figures))
            continue
        entry = shard_entry(run, view, now, figures)
        if deferral is not None and entry["state"] == "pending" and not entry["attempts"]:
            entry["reason"] = deferred_reason(deferral)
            waiting += 1
        shards.append(entry)
    if update_index:
        index.add(run, found)
    counts = {name: 0 for name in rollup.SHARD_STATES}
    for shard in shards:
        counts[shard["state"]] += 1
    spent = budget.spent(run.plan["retry"], failed_attempts, counts, run.shard_count)
    stopped = spent["stopped"]
    reason = rollup.degraded_reason(shards)
    if stopped is not None:
        reason = f"{reason}; {stopped}" if reason else stopped
    run_state = rollup.run_state(counts)
    unmeasured = sum(1 for shard in shards if shard["usage"] is not None and not shard["usage"]["measured"])
    return {
        "kind": "tau.status", "schema_version": 1, "run_id": run.run_id, "run_dir": run.path,
        "state": run_state,
        "lifecycle": rollup.lifecycle(run_state),
        "degraded": reason is not None,
        "reason": reason,
        "counts": counts,
        "retryable": [] if stopped else [s["id"] for s in shards if s["state"] in budget.RETRYABLE],
        "sources": sources,
        "budget": spent,
        "cancelled": None if whole_run is None else {"requested_at": whole_run["requested_at"]},
        "submissions": unresolved_submissions(run),
        "deferred": None if deferral is None else {"shards": waiting, "holding": deferral["holding"],
                                                   "unread": deferral["unread"], "at": deferral["updated_at"]},
        "collections": collections(run),
        "eta_seconds": rollup.time_left(run_state, stopped is not None, counts,
                                        rollup.at_work(shards, stalled=False),
                                        [d for d in durations if d is not None], parallel),
        "efficiency": efficiency.summary(list(figures.values()), unmeasured, usage_reason),
        "shards": shards,
    }


def sealed_entry(sid: str, ordinal: int, max_attempts: int, figures: dict[tuple[str, str], Record]) -> Record:
    aid = layout.attempt_id(ordinal)
    return {"id": sid, "state": "succeeded", "reason": "sealed by its winner", "attempt": aid, "winner": aid,
            "attempts": ordinal, "max_attempts": max_attempts, "log": None, "last_output": None, "progress": None,
            "stalled": None,
            "evidence": None, "usage": efficiency.attempt(figures.get((sid, aid))), "next": None,
            "request": None}  # the index holds no request, and reading each winner's would undo it (its usage has it)


def shard_entry(run: Run, view: state.ShardView, now: float, figures: dict[tuple[str, str], Record]) -> Record:
    """An unsealed shard's entry: its decision (`rules.shard.decide`) and the facts behind it."""
    facts, decision = view.facts, view.decision
    ev, attempt, verdict = facts.evidence, facts.attempt, decision.verdict
    running = verdict is not None and verdict.state == "running"
    log = words = None
    if decision.state in rollup.DEGRADED and attempt is not None:
        rel = layout.attempt_file(view.shard_id, attempt["attempt_id"], "client.log")
        if run.dir.exists(rel):  # none when the client never started (its preflight, its image, its input)
            log, words = os.path.join(run.path, rel), _last_words(run, rel)
    following = decision.next
    return {
        "id": view.shard_id,
        "state": decision.state,
        "reason": decision.reason,
        "attempt": attempt["attempt_id"] if attempt else None,
        "winner": None,
        "attempts": decision.attempts,
        "max_attempts": run.plan["retry"]["max_attempts"],
        "log": log,
        "last_output": words,
        "progress": _progress(facts, now) if running else None,
        "stalled": decision.stalled,
        "evidence": {
            "attempt_state": attempt["state"] if attempt else None,
            "effective_state": verdict.state if verdict else None,
            "scheduler": None if attempt is None else attempt["scheduler"],
            "observation": None if ev is None else {
                "state": ev.state, "source": ev.source, "terminal": ev.terminal,
                "changed_at": jsonio.format_time(ev.changed_at),
                "deadline": None if ev.deadline_at is None else
                {"window": ev.deadline_window, "at": jsonio.format_time(ev.deadline_at)},
                "exit_code": ev.exit_code, "reason": ev.reason},
        },
        "usage": efficiency.attempt(figures.get((view.shard_id, attempt["attempt_id"])))
        if attempt is not None and verdict is not None and verdict.state in FINISHED else None,
        "next": None if following is None else {
            "action": following.action, "request": following.request, "reason": following.reason,
            "until": None if following.until is None else jsonio.format_time(following.until)},
        "request": None if facts.request is None else dict(facts.request),
    }


def _last_words(run: Run, rel: str) -> list[str] | None:
    """The last lines of a client's output (`rules.output.last_words`: bounded, printable), None when it wrote
    nothing or its log cannot be read as a file of the run."""
    from taulib.errors import TauError
    from taulib.rules.output import TAIL, last_words

    try:
        tail = run.dir.read_tail(rel, TAIL)
    except TauError:  # not there (never started), or not a regular file of ours: nothing of it is shown
        return None
    return last_words(tail) or None


def _progress(facts: Facts, now: float) -> Record | None:
    """The running attempt's readiness: its state (in version 1's words: `rules.readiness.phase`), the records its
    client reported done and when that count last changed, how long ago (by the observer's clock, never less than
    0: `rules.shard.since`) it last wrote a heartbeat, and its deployments (null for a run without services)."""
    record = facts.readiness
    if record is None or facts.beat_at is None:
        return None
    return {"state": readiness.phase(record), "records_done": record.get("records_done"),
            "records": facts.records, "updated_at": record["updated_at"],
            "progress_at": record.get("progress_at"), "age_seconds": since(now, facts.beat_at),
            "deployments": None if record["schema_version"] == 1 else [deployment(d) for d in record["deployments"]]}


def deployment(record: Record) -> Record:
    """A deployment as the status shows it: its name, state, ready and expected backends, endpoint and last probe
    (readiness.json's, without its backends)."""
    return {key: record[key] for key in ("name", "state", "ready_backends", "expected_backends", "endpoint",
                                         "last_probe")}


def deferred_reason(deferral: Record) -> str:
    """Why a shard without an attempt waits: the limit that deferred it at the last submission."""
    why = deferral["holding"] or "the scheduler's limits"
    unread = f"; not read: {'; '.join(deferral['unread'])}" if deferral["unread"] else ""
    return (f"not submitted yet: deferred until the queue has room ({why}{unread}); the next tau-submit or "
            "tau-retry submits it")


def unresolved_submissions(run: Run) -> list[Record]:
    """The newest submission when it is still PREPARED (an ambiguous sbatch outcome waiting on its deadline)."""
    entry = _newest(run, SUBMISSIONS)
    if entry is None or entry.status is None or entry.status["state"] != "prepared":
        return []
    return [{"submission_id": entry.plan["submission_id"], "job_name": entry.plan["job_name"],
             "deadline": entry.status["deadline"], "tasks": task_count(entry.plan)}]


def collections(run: Run) -> list[Record]:
    """Every collection of the run and where it stands."""
    out: list[Record] = []
    for plan, status in Journal(run, COLLECTIONS).entries():
        out.append({"collection_id": plan["collection_id"], "destination": plan["destination"],
                    "format": plan["format"], "state": status["state"] if status else "prepared",
                    "job_id": status["job_id"] if status else None, "reason": status["reason"] if status else None,
                    "tasks": plan.get("tasks", 1), "tasks_done": _tasks_done(run, plan)})
    return out


def _tasks_done(run: Run, plan: Record) -> int:
    """The tasks of a collection that recorded their partitions (`collect.tasks`); 0 for a collection in one task
    under the local executor, which records none."""
    folder = f"{COLLECTIONS.folder}/{plan['collection_id']}"
    return sum(1 for name in run.dir.listdir(folder) if name.startswith("task-") and name.endswith(".json"))


def _newest(run: Run, kind: Kind) -> Entry | None:
    journal = Journal(run, kind)
    ids = journal.ids()
    if not ids or not run.dir.exists(journal.status_rel(ids[-1])):
        return None
    return journal.read(ids[-1])

