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
- a job absent from the queue is a verdict only once accounting has it, or a minute after its last change (so
  accounting lag is never read as failure); a job that ended without publishing the dataset fails the entry with
  Slurm's word for it, and the next tau-collect starts a new one.
"""

from __future__ import annotations

import time

from taulib import jsonio
from taulib.collect.destination import read_result, remove_stage, stage_name
from taulib.collect.report import progress, summary
from taulib.errors import Busy, CheckFailed, Conflict, Refused, SubmitRefused, Unavailable
from taulib.executor import CollectionJobs
from taulib.rules import journal as journal_rules
from taulib.rundir import journal

ACCOUNTING_GRACE = 60  # seconds after its last change that a job absent from queue and accounting is given
POLL = 1.0  # seconds between reads of the status while waiting
QUEUE_EVERY = 10.0  # seconds between squeue calls while waiting
GONE_AFTER = 90.0  # seconds a job may be gone from the queue, while waiting, before it is settled


def job_name(run, collection_id: str) -> str:
    return journal.job_name(run, "c" + collection_id.split("-")[1])


def submit(run, jobs: CollectionJobs, book, plan: dict, status: dict) -> dict:
    """Render and submit the CPU job of a PREPARED entry; returns the progress summary (state submitted)."""
    try:
        job_id = jobs.submit(run, plan, job_name(run, plan["collection_id"]))
    except SubmitRefused as exc:
        book.retire(status, exc.message)
        raise
    return progress(plan, book.advance(status, state="submitted", job_id=job_id))


def settle(run, jobs: CollectionJobs, book, plan: dict, status: dict, parent, name: str, finish) -> dict | None:
    """Where is an unfinished collection job? Its summary, or None when it failed (start a new one).
    `finish(plan, status, result)` records a dataset the job published."""
    if status["state"] == "prepared":  # the submission's reply was lost: find the job by its exact name, or retire
        found = jobs.find(job_name(run, plan["collection_id"]), jsonio.parse_time(plan["created_at"]))
        verdict = journal_rules.resolve(found, {None}, jsonio.now_rfc3339() > status["deadline"],
                                        job_name(run, plan["collection_id"]))
        if verdict.action == "conflict":
            raise Conflict(f"{verdict.reason}; then run tau-collect again", job_ids=sorted(found))
        if verdict.action == "wait":
            raise Busy(f"collection {plan['collection_id']} is not resolved yet: {verdict.reason}; try again",
                       collection_id=plan["collection_id"])
        if verdict.action == "adopt":
            return progress(plan, book.advance(status, state="submitted", job_id=verdict.job_id))
        book.retire(status, verdict.reason)
        return None
    job = status["job_id"]
    if jobs.queued(job):
        return progress(plan, status)
    accounting = jobs.accounted(job)
    result = read_result(parent, name)
    if result is not None and result["plan_sha256"] == jsonio.digest(plan):
        status = book.reread(status)
        if status["state"] != "succeeded":
            return finish(plan, status, result)
        return summary(plan, status, result, created=False)
    grace = jsonio.format_time(jsonio.parse_time(status["updated_at"]) + ACCOUNTING_GRACE)
    if accounting is None and jsonio.now_rfc3339() <= grace:
        return progress(plan, status)  # not in accounting yet: accounting lag, not a verdict
    remove_stage(parent, stage_name(plan))
    word = accounting if accounting is not None else "absent from the queue and from accounting"
    book.retire(status, f"its Slurm job {job} ended ({word}) without publishing the dataset")
    return None


def wait(jobs: CollectionJobs, book, collection_id: str, settle_gone) -> None:
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
            raise CheckFailed(f"collection {collection_id} failed: {status['reason']}", collection_id=collection_id)
        if time.monotonic() < next_check:
            continue
        next_check = time.monotonic() + QUEUE_EVERY
        try:
            queued = jobs.queued(status["job_id"])
        except Unavailable:
            continue
        if queued:
            gone_since = None
        elif gone_since is None:
            gone_since = time.monotonic()
        elif time.monotonic() - gone_since > GONE_AFTER:  # the job is gone and never finished: record why
            settle_gone()
            gone_since = time.monotonic()


def await_binding(book, plan: dict, job: str, limit: float) -> None:
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
