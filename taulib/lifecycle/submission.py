"""Submissions: the journal that gives shards new attempts and hands them to an executor (tau-submit, tau-retry).

Reads and Writes, under `run.lock` (shared) then `submit.lock`: the submission journal
(`rundir.journal.SUBMISSIONS`), in format-1 runs the shards' attempt.json (each under its shard lock), and under
Slurm the job script `submissions/<id>/job.sh`. Protocol:
  1. settle the newest journal entry: one that never reached PREPARED is removed; a PREPARED one is resolved by
     its executor (`Executor.resolve`: the local executor adopts its own job; Slurm finds the job by its exact
     name, `rules.journal.resolve`) before anything new is planned;
  2. the journal entry: plan.json (the shards' next attempts as `task_ranges` of task indices, which are the shards'
     indices; the job name derived from the run id, the digest of run.json and the submission number; with
     `retry.escalate`, the `resources` every task of the window asks for, `_requests`), then status PREPARED with a
     visibility deadline;                                                         failpoint submit.prepared
  3. hand the tasks to the executor and learn the job id (`Executor.render` before step 2, then
     `Executor.hand_off`): the local executor's job id is the submission id; for Slurm, the rendered script is
     published as `job.sh` and submitted with `sbatch --parsable` as one job array.
     A definite refusal retires the entry (FAILED, exit 69); an ambiguous outcome (timeout, lost reply, unparsable
     reply) leaves it PREPARED and exits 75: the next call resolves it, and never submits blindly again;
                                                                                  failpoint submit.handed_off
  4. format-1 runs only (made by earlier versions of tau): publish each attempt.json (state submitted, bound to the
     job id and task) under its shard lock;                                       failpoint submit.attempts_published
  5. status SUBMITTED: the commit point. In a format-2 run this alone gives every task its attempt: nothing is
     written per shard, and each attempt's record is the revision 1 the plan and the job id imply
     (`rundir.state.Submitted`) until the first process that changes it publishes it;  failpoint submit.submitted
  6. `Executor.start`: whatever must run for the tasks to start (the local executor's supervisor; nothing under
     Slurm).
Promises: a crash at any step is finished by the next tau-submit or tau-retry, and no step is ever done twice with a
different outcome: attempts are derived from the plan (and in format 1 published with those bytes, so re-publishing
them is idempotent).
Allocations of a retired job are fenced by tau-attempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib import env, executors, failpoints, jsonio
from taulib.errors import BadInput, Busy, Conflict, SubmitLimited, SubmitRefused
from taulib.executors import UNLIMITED, Capacity
from taulib.rules import environment as environment_rules
from taulib.rules import windows
from taulib.rundir import layout, locks, state, usage
from taulib.rundir.journal import SUBMISSIONS, Journal, compact_tasks, job_name, tasks

if TYPE_CHECKING:
    from collections.abc import Callable

    from taulib.jsonio import Record
    from taulib.rundir.run import Run

# what a submission's `select` returns: (the shard ids that get their next attempt, the shards skipped with their
# state and why, the shard ids granted an attempt beyond their budget)
Selection = tuple[list[str], list[dict[str, str]], list[str]]


def journal(run: Run) -> Journal:
    return Journal(run, SUBMISSIONS)


NO_DEFERRAL: Record = {"shards": 0, "holding": None, "unread": []}


def submit(run: Run, purpose: str, select: Callable[[Run], Selection], via: str | None = None,
           extra: Record | None = None, grant: Record | None = None) -> Record:
    """Create and hand off submissions for the shards `select(run)` returns ((shard ids, skipped, granted): each
    gets its next attempt; a granted one is recorded as such), in windows that fit the scheduler now (the rest are
    deferred to a later call), or, for the initial submission of a run already submitted whole, report it.

    `select` runs under the submit lock, so concurrent callers see each other's attempts and converge. `via`
    names the executor that runs them when it is not the run's (an adoption runs locally, `lifecycle.adopt`);
    `extra`, fields every submission plan made carries (`adopt_from`); `grant`, what a person granted the selected
    shards ({mem and/or time}: tau-retry --mem/--time), asked instead of what escalation asks and recorded as the
    plan's `grant`.
    """
    book = journal(run)
    with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "submit"):
        adopted = _settle(run, book)
        if adopted is not None and adopted[1]["state"] == "submitted":  # this call found the lost-reply job
            found = _summary(*adopted, created=False)
            return dict(found, skipped=[], adopted=True, windows=[_window_summary(found)], deferred=NO_DEFERRAL)
        reported = None
        if purpose == "initial":
            for plan, status in book.entries():
                if plan["purpose"] == "initial" and status is not None and status["state"] == "submitted":
                    _ensure_started(run, plan)
                    reported = reported or (plan, status)
        shard_ids, skipped, granted = select(run)
        if not shard_ids:
            record_deferral(run, purpose, 0, None, [])
            if reported is not None:
                found = _summary(*reported, created=False)
                return dict(found, skipped=[], windows=[], deferred=NO_DEFERRAL)
            return {"submission_id": None, "skipped": skipped, "purpose": purpose, "job_id": None,
                    "job_name": None, "state": None, "created": False, "adopted": False, "tasks": [],
                    "windows": [], "deferred": NO_DEFERRAL}
        _check_inherited(run)
        chosen = _next_attempts(run, shard_ids, granted)
        requests = _requests(run, book, chosen, grant) if via is None else None
        capacity = (executors.of(run) if via is None else executors.get(via)).capacity(run)
        cut = windows.cut(sorted(chosen), capacity.max_index, capacity.max_tasks, capacity.room, capacity.least)
        made: list[Record] = []
        deferred, holding = cut.deferred, capacity.holding if cut.deferred else None
        arrays = [part for array in cut.arrays for part in _by_request(array, requests)]
        for number, (array, request) in enumerate(arrays):
            try:
                made.append(_window(run, book, purpose, [dict(chosen[s], task_index=i) for s, i in array], capacity,
                                    request, via, dict(extra or {}, **({"grant": grant} if grant else {}))))
            except SubmitLimited as exc:  # a limit filled meanwhile: nothing of this window was submitted
                deferred += sum(len(rest) for rest, _ in arrays[number:])
                holding = exc.message
                break
        deferral = record_deferral(run, purpose, deferred, holding, capacity.unread)
        first = made[0] if made else {"submission_id": None, "purpose": purpose, "job_id": None, "job_name": None,
                                      "state": None, "created": False, "adopted": False, "tasks": []}
        return dict(first, tasks=[t for window in made for t in window["tasks"]], skipped=skipped,
                    windows=[_window_summary(window) for window in made], deferred=deferral)


def _next_attempts(run: Run, shard_ids: list[str], granted: list[str]) -> dict[int, Record]:
    """Each shard's next attempt, by shard index (its array task index is the window's to give)."""
    present = set(run.dir.listdir(layout.SHARDS))  # a shard without a folder has no attempt of its own
    submitted = state.Submitted(run)  # the attempts the bound submissions gave, which have no folder yet
    chosen: dict[int, Record] = {}
    for sid in shard_ids:
        ordinal = len(state.attempt_ids(run, sid, submitted, on_disk=sid in present)) + 1
        task: Record = {"shard_id": sid, "attempt_id": layout.attempt_id(ordinal), "ordinal": ordinal,
                        "task_index": layout.shard_index(sid)}
        chosen[layout.shard_index(sid)] = dict(task, granted=True) if sid in granted else task
    return chosen


def _requests(run: Run, book: Journal, chosen: dict[int, Record], grant: Record | None = None
              ) -> dict[int, Record] | None:
    """Each chosen shard's request ({mem, time}) when the run's retry grows requests (`retry.escalate`), a person
    grants one (`grant`) or granted one before, else None (the plan's own request, rendered by the executor): a
    first attempt asks for the plan's own request; a later one for what its shard's next attempt asks
    (`rundir.state.next_attempt`: the request before it, grown after it ran out of memory or time), with what is
    granted in its place."""
    entries = book.entries()
    if not run.plan["retry"].get("escalate") and grant is None and not any(p.get("grant") for p, _ in entries):
        return None
    base = executors.of(run).request(run.plan["scheduler"][run.plan["scheduler"]["profile"]])
    plans: dict[str, Record | None] = {plan["submission_id"]: plan for plan, _ in entries}
    submitted = state.Submitted(run)
    measured = usage.load(run)
    out: dict[int, Record] = {}
    for index, task in chosen.items():
        request = dict(base)
        if task["ordinal"] > 1:
            sid, before = task["shard_id"], layout.attempt_id(task["ordinal"] - 1)
            attempt = state.attempt_record(run, sid, before, submitted)
            if attempt is not None:  # else its attempt before was never submitted: nothing ended it
                request = state.next_attempt(run, attempt, state.read_evidence(run, sid, before), measured,
                                             plans).request
        out[index] = dict(request, **grant) if grant else request
    return out


def _by_request(array: list[tuple[int, int]], requests: dict[int, Record] | None
                ) -> list[tuple[list[tuple[int, int]], Record | None]]:
    """An array of (shard index, task index) split into one array per request, in order of first appearance (one
    sbatch script asks the same of every task it holds)."""
    if requests is None:
        return [(array, None)]
    parts: dict[tuple[str | None, ...], list[tuple[int, int]]] = {}
    for pair in array:
        parts.setdefault(tuple(requests[pair[0]].get(k) for k in ("mem", "time")), []).append(pair)
    return [(part, requests[part[0][0]]) for part in parts.values()]


def _window(run: Run, book: Journal, purpose: str, window: list[Record], capacity: Capacity,
            request: Record | None = None, via: str | None = None, extra: Record | None = None) -> Record:
    """One window: its journal entry, its hand-off and its binding (steps 2-6); its summary."""
    sub_id = book.next_id()
    plan: Record = {"kind": "tau.submission-plan", "schema_version": 1, "run_id": run.run_id,
                    "submission_id": sub_id, "purpose": purpose, "plan_sha256": run.plan_sha256,
                    "created_at": jsonio.now_rfc3339(), "executor": via or run.plan["scheduler"]["profile"],
                    "job_name": job_name(run, sub_id.split("-")[1]),
                    **({"task_ranges": compact_tasks(window)} if run.format >= 2 else {"tasks": window})}
    if capacity != UNLIMITED:  # what the scheduler allowed when it was planned, and what could not be read
        plan["capacity"] = capacity._asdict()
    if request is not None:  # what each of its tasks asks for, grown on retry (retry.escalate)
        plan["resources"] = {"mem": request.get("mem"), "time": request.get("time")}
    plan.update(extra or {})
    text = executors.get(plan["executor"]).render(run, plan)  # refuse bad fields before the journal
    status = book.open(plan)
    failpoints.hit("submit.prepared")
    status = _hand_off(run, book, plan, status, text)
    return _summary(plan, status, created=True)


def _window_summary(summary: Record) -> Record:
    return {key: summary[key] for key in ("submission_id", "job_id", "job_name", "state", "tasks")}


def record_deferral(run: Run, purpose: str, shards: int, holding: str | None, unread: list[str]) -> Record:
    """Keep the run's deferral record (`submissions/deferral.json`) saying how many shards this call left for a
    later one and which limit held them (it is rewritten only when that changes); the output's `deferred`."""
    said: Record = {"shards": shards, "holding": holding, "unread": list(unread)}
    current = run.dir.read(layout.DEFERRAL, "tau.deferral")
    if current is None and shards == 0:
        return said
    if current is not None and {k: current[k] for k in said} == said:
        return said
    run.dir.make_folders(layout.DEFERRAL.rpartition("/")[0])  # no window may have been made yet
    run.dir.replace(layout.DEFERRAL, {
        "kind": "tau.deferral", "schema_version": 1, "run_id": run.run_id,
        "revision": 1 if current is None else current["revision"] + 1, "updated_at": jsonio.now_rfc3339(),
        "purpose": purpose, **said})
    return said


def _settle(run: Run, book: Journal) -> tuple[Record, Record] | None:
    """Finish, resolve or discard the newest journal entry (caller holds submit.lock); (plan, status) of the entry
    this call settled, or None when there was none to settle."""
    entry = book.newest()
    if entry is not None and entry.status is not None and entry.status["state"] == "prepared":
        return entry.plan, _resolve(run, book, entry.plan, entry.status)
    return None


def _hand_off(run: Run, book: Journal, plan: Record, status: Record, text: str | None) -> Record:
    """Step 3 for a new PREPARED entry (the script was rendered before the entry was written), then bind."""
    try:
        job_id = executors.get(plan["executor"]).hand_off(run, plan, text)
    except SubmitRefused as exc:
        book.retire(status, exc.message)
        raise
    failpoints.hit("submit.handed_off")  # the job exists and nothing records it: a lost reply, for any executor
    return _bind(run, book, plan, status, job_id)


def _resolve(run: Run, book: Journal, plan: Record, status: Record) -> Record:
    """Settle a PREPARED entry as its executor resolves it: adopt its job, wait, retire it, or refuse."""
    verdict, seen = executors.get(plan["executor"]).resolve(run, plan, status)
    if verdict.action == "conflict":
        raise Conflict(f"{verdict.reason}; then run tau-submit again", job_id=verdict.job_id, job_ids=seen)
    if verdict.action == "wait":
        raise Busy(f"submission {plan['submission_id']} is not resolved yet: {verdict.reason}; it is resolved by "
                   f"{status['deadline']}: try again", submission_id=plan["submission_id"])
    if verdict.action == "adopt":
        assert verdict.job_id is not None  # an executor adopts the job it names
        return _bind(run, book, plan, status, verdict.job_id)
    return book.retire(status, verdict.reason)


def _bind(run: Run, book: Journal, plan: Record, status: Record, job_id: str) -> Record:
    """Steps 4-6."""
    if run.format < 2:
        _publish_attempts(run, plan, job_id)
        failpoints.hit("submit.attempts_published")
    status = book.advance(status, state="submitted", job_id=job_id)
    failpoints.hit("submit.submitted")
    executors.get(plan["executor"]).start(run, plan)
    return status


def _publish_attempts(run: Run, plan: Record, job_id: str) -> None:
    """Step 4 of a format-1 run: each attempt.json, under its shard lock, in ascending shard order (one already
    there, published by a crashed call, must be bound to this submission)."""
    for task in sorted(tasks(plan), key=lambda t: t["shard_id"]):
        sid, aid = task["shard_id"], task["attempt_id"]
        record = state.submitted_record(run, plan, job_id, layout.shard_index(sid), task["task_index"],
                                        task["ordinal"])
        rel = layout.attempt_file(sid, aid, "attempt.json")
        with locks.hold(run.dir, locks.shard_lock_name(sid)):
            existing = run.dir.read(rel, "tau.attempt")
            if existing is None:
                run.dir.publish(rel, record)
            elif (existing["submission_id"], existing["scheduler"]) != (plan["submission_id"], record["scheduler"]):
                raise Conflict(f"{rel} is bound to another submission", path=rel)


def _ensure_started(run: Run, plan: Record) -> None:
    """Start again what a submitted submission's tasks wait on when it is gone (under the local executor, its
    supervisor was killed, or tau-submit crashed before starting it)."""
    chosen = executors.get(plan["executor"])
    if chosen.stalled(run, plan):
        _check_inherited(run)
        chosen.start(run, plan)


def _check_inherited(run: Run) -> None:
    """The variables the plan inherits must be in this process's environment, which the allocations get: a
    submission without them is refused rather than run differently (a retry from cron, say)."""
    missing = environment_rules.missing_inherited(run.plan["inherit_env"], env.current())
    if missing:
        raise BadInput(f"the plan inherits {', '.join(missing)} from the environment of the process that submits, "
                       "and this one lacks it; set it (export NAME=...) and submit again",
                       missing=missing)


def _summary(plan: Record, status: Record, created: bool) -> Record:
    return {"submission_id": plan["submission_id"], "purpose": plan["purpose"], "job_id": status["job_id"],
            "job_name": plan["job_name"], "state": status["state"], "created": created, "adopted": False,
            "tasks": tasks(plan)}
