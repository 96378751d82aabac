"""The collection's CPU job, under an executor that runs collections as jobs of their own (Slurm): submitting it,
finding out where it is, following it, and fencing it. The scheduler's part is the executor's `CollectionJobs`.

Reads: the collection journal, the scheduler's queue and accounting for the recorded job only, and the published
dataset's `_tau_collection.json`. Writes: the journal entry's status (through `rundir.journal`; the caller holds
collect.lock) and, through the executor, the job script `collections/<id>/job.sh`.
Promises:
- the job asks for no GPU (under Slurm the script pins none: `slurm.script.render_collection`) and runs
  `tau-collect RUN --worker ID`, which writes nothing until the journal names its job id;
- a PREPARED entry (sbatch's reply was lost) is resolved by the job's exact name (`rules.journal.resolve`): adopted,
  waited for until the visibility deadline, or retired;
- a job absent from the queue is a verdict only once accounting has a final word on each unfinished task, or a
  minute after its last change (so accounting lag is never read as failure). A job that ended without publishing
  the dataset: when every task is done (`collect.tasks`) the dataset is published here; else how each unfinished
  task ended decides (`rules.collection.after_job`): they are submitted again, as a new array of those tasks only
  (each rerun for its own partitions), asking for the plan's request grown by `retry.escalate` after a task ran out
  of memory or time, the same request after any other end, up to MAX_RERUNS times; a task killed for memory or time
  at a request that cannot grow fails the entry at once, with Slurm's word for it (`cause`), reported to the caller
  (CheckFailed), and the next tau-collect starts a new one. Each job that ended unfinished is journaled in the
  status (`ended`: its request and how each unfinished task ended, with the request it is rerun with), and the
  request of the newest job in `resources` once it is not the plan's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from taulib import jsonio
from taulib.collect import array, tasks
from taulib.collect.destination import read_result, remove_stage, stage_name
from taulib.collect.report import progress, summary
from taulib.errors import Busy, CheckFailed, Conflict, Refused, SubmitRefused, Unavailable
from taulib.executors import CollectionJobs
from taulib.rules import collection as collection_rules
from taulib.rules import journal as journal_rules
from taulib.rundir import journal

if TYPE_CHECKING:
    from typing import Callable

    from taulib.collect.array import Finish, Publish
    from taulib.fs.tree import Tree
    from taulib.jsonio import Record
    from taulib.rundir.journal import Journal
    from taulib.rundir.run import Run

ACCOUNTING_GRACE = 60  # seconds after its last change that a job absent from queue and accounting is given
POLL = 0.25  # seconds between reads of the status while waiting
QUEUE_EVERY = 10.0  # seconds between squeue calls while waiting
GONE_AFTER = 5.0  # seconds a job may be gone from the queue, while waiting, before it is settled
MAX_RERUNS = 3  # times a collection's unfinished tasks are submitted again before it fails


def job_name(run: Run, collection_id: str, rerun: int = 0) -> str:
    """The job's exact name: `...-cNNNN` for the first job of a collection, `...-cNNNNrK` for its K-th rerun."""
    return journal.job_name(run, "c" + collection_id.split("-")[1] + (f"r{rerun}" if rerun else ""))


def submit(run: Run, jobs: CollectionJobs, book: Journal, plan: Record, status: Record, parent: Tree,
           todo: list[int] | None = None, created: bool = False) -> Record:
    """Render and submit the CPU job of a PREPARED entry (the tasks `todo`, default all); returns the progress
    summary (state submitted; `created` when the caller has just planned the collection, false for a rerun). A
    refused submission retires the entry and removes its stage (in `parent`)."""
    rerun = status.get("rerun", 0)
    todo = list(range(tasks.count(plan))) if todo is None else todo
    try:
        job_id = jobs.submit(run, plan, job_name(run, plan["collection_id"], rerun), todo, rerun,
                             status.get("resources"))
    except SubmitRefused as exc:
        remove_stage(parent, stage_name(plan))
        book.retire(status, exc.message)
        raise
    return progress(plan, book.advance(status, state="submitted", job_id=job_id), created)


def settle(run: Run, jobs: CollectionJobs, book: Journal, plan: Record, status: Record, parent: Tree, name: str,
           finish: Finish, publish: Publish) -> Record | None:
    """Where is an unfinished collection job? Its summary (`created` false: an earlier call planned it, and its job
    published it, unless this call publishes it here), or None when it failed (start a new one); CheckFailed when it
    failed because a task ran out of memory or time at a request that cannot grow (the next call starts a new one).
    `finish(plan, status, result)` records a dataset the job published; `publish(plan, status, staged, result)`
    publishes the stage of a collection whose tasks are all done."""
    if status["state"] == "prepared":  # the submission's reply was lost: find the job by its exact name, or retire
        named = job_name(run, plan["collection_id"], status.get("rerun", 0))
        found = jobs.find(named, jsonio.parse_time(status["updated_at"] if status.get("rerun") else
                                                   plan["created_at"]))
        asked = tasks.undone(run, plan) if status.get("rerun") else range(tasks.count(plan))  # its array's tasks
        verdict = journal_rules.resolve(found, set(asked), jsonio.now_rfc3339() > status["deadline"], named,
                                        jobs.engine)
        if verdict.action == "conflict":
            raise Conflict(f"{verdict.reason}; then run tau-collect again", job_ids=sorted(found))
        if verdict.action == "wait":
            raise Busy(f"collection {plan['collection_id']} is not resolved yet: {verdict.reason}; try again",
                       collection_id=plan["collection_id"])
        if verdict.action == "adopt":
            return progress(plan, book.advance(status, state="submitted", job_id=verdict.job_id), False)
        remove_stage(parent, stage_name(plan))
        book.retire(status, verdict.reason)
        return None
    job = status["job_id"]
    if jobs.queued(job):
        return progress(plan, status, False)
    base = jobs.request(run.plan)
    request = status.get("resources") or base  # what this job asked for: the plan's, or a rerun's grown request
    ends = accounted = jobs.accounted(run, plan["collection_id"], job, request)
    result = read_result(parent, name)
    if result is not None and result["plan_sha256"] == jsonio.digest(plan):
        status = book.reread(status)
        if status["state"] != "succeeded":
            return dict(finish(plan, status, result), created=False)  # its job published it, not this call
        return summary(plan, status, result, created=False)
    todo = tasks.undone(run, plan)
    grace = jsonio.format_time(jsonio.parse_time(status["updated_at"]) + ACCOUNTING_GRACE)
    if (ends is None or any(task not in ends for task in todo)) and jsonio.now_rfc3339() <= grace:
        return progress(plan, status, False)  # not in accounting yet: accounting lag, not a verdict
    done = array.publish_when_done(run, plan, status, parent, name, publish)  # its last task died publishing
    if done is not None:
        return done
    ends = ends or {}
    nxt = collection_rules.after_job({task: ends[task].state if task in ends else None for task in todo}, request,
                                     run.plan["retry"].get("escalate"), status.get("rerun", 0), MAX_RERUNS,
                                     tasks.count(plan))
    ended = [*status.get("ended", []), {"job_id": job, "resources": request, "tasks": [
        {"task": task, "state": ends[task].state if task in ends else None,
         "accounting": ends[task].word if task in ends else None, "resources": nxt.grown[task]} for task in todo]}]
    if nxt.action == "rerun":  # those tasks again, and only those, asking for what the rule says
        grown = {"resources": nxt.request} if nxt.request != base else {}
        status = book.advance(status, state="prepared", job_id=None, rerun=status.get("rerun", 0) + 1,
                              deadline=book.deadline(jsonio.now_rfc3339()), ended=ended, **grown)
        return submit(run, jobs, book, plan, status, parent, todo)
    remove_stage(parent, stage_name(plan))
    said = " (absent from the queue and from accounting)" if accounted is None else ""
    status = book.retire(status, f"its Slurm job {job} ended{said} without publishing the dataset: {nxt.reason}",
                         ended=ended, **({"cause": nxt.cause} if nxt.cause else {}))
    if nxt.cause is not None:  # a rerun cannot help: say so, rather than start a collection that asks the same
        raise failed(status)
    return None


def failed(status: Record) -> CheckFailed:
    """The error of a failed collection: its reason, and what ended it when it ran out of memory or time."""
    cause = {"cause": status["cause"]} if status.get("cause") else {}
    return CheckFailed(f"collection {status['collection_id']} failed: {status['reason']}",
                       collection_id=status["collection_id"], **cause)


def wait(jobs: CollectionJobs, book: Journal, collection_id: str, settle_gone: Callable[[], None]) -> None:
    """Follow a Slurm collection until it succeeds (return) or fails (CheckFailed with its reason): reads its
    status every POLL seconds, asks squeue every QUEUE_EVERY seconds, and calls `settle_gone()` once the job has
    been gone from the queue for GONE_AFTER seconds without the collection finishing."""
    gone_since = None
    next_check = time.monotonic() + QUEUE_EVERY
    while True:
        time.sleep(POLL)
        status = book.run.dir.require(book.status_rel(collection_id), book.kind.status_kind)
        if status["state"] == "succeeded":
            return
        if status["state"] == "failed":
            raise failed(status)
        if time.monotonic() < next_check:
            continue
        next_check = time.monotonic() + QUEUE_EVERY
        try:
            queued = status["job_id"] is not None and jobs.queued(status["job_id"])
        except Unavailable:
            continue
        if queued:
            gone_since = None
        elif gone_since is None:
            gone_since = time.monotonic()
        elif time.monotonic() - gone_since > GONE_AFTER:  # the job is gone and never finished: record why
            settle_gone()
            gone_since = time.monotonic()


def await_binding(book: Journal, plan: Record, job: str, limit: float) -> None:
    """The worker's fence: wait (until the monotonic time `limit`) for the entry to name this job; Refused (and
    nothing written) when it is another job's, or was never bound in time. The job can start before tau-collect
    has recorded its id."""
    collection_id = plan["collection_id"]
    while True:
        status = book.run.dir.require(book.status_rel(collection_id), book.kind.status_kind)
        if status["state"] in ("submitted", "running") and status["job_id"] == job:
            return
        if status["state"] != "prepared" or time.monotonic() > limit:
            raise Refused(f"Slurm job {job} is not the recorded job of collection {collection_id} "
                          f"({status['state']}, job {status['job_id']}); this late or duplicate worker writes "
                          "nothing", collection_id=collection_id)
        time.sleep(1.0)
