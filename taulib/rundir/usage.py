"""What each attempt used: one `submissions/<id>/usage.json` (tau.usage) per bound submission, the figures its
executor measured for each finished task (sacct under Slurm, rusage under the local executor).

Reads: the submission journal and the usage records. Writes (`merge`, called by tau-reconcile only): a submission's
usage.json under `usage.lock`, adding the figures of tasks it did not hold yet; a task's figures, once recorded,
are never replaced (they are final when the executor reports them). Promises: figures come from the executor, never
from a guess: a finished task the executor has not measured yet has none, and is counted as unmeasured, not as
zero; a submission is asked about until every task has figures (`complete`) or for USAGE_DAYS after it was made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taulib import jsonio
from taulib.errors import BadInput
from taulib.rundir import layout, locks
from taulib.rundir.journal import SUBMISSIONS, Journal, task_indices, tasks

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run

USAGE_DAYS = 7  # a submission whose tasks accounting never shows is not asked about for ever


def bound(run: Run) -> list[tuple[Record, Record]]:
    """(plan, status) of every submission bound to a job."""
    return [(plan, status) for plan, status in Journal(run, SUBMISSIONS).entries()
            if status is not None and status["state"] == "submitted"]


def pending(run: Run, now: float) -> list[tuple[Record, str, set[int]]]:
    """The bound submissions whose figures are not all in yet, made in the last USAGE_DAYS: (plan, job id, the
    task indices already measured)."""
    out = []
    for plan, status in bound(run):
        if now - jsonio.parse_time(plan["created_at"]) > USAGE_DAYS * 86400:
            continue
        record = run.dir.read(layout.usage(plan["submission_id"]), "tau.usage")
        if record is not None and record["complete"]:
            continue
        known = {t["task_index"] for t in record["tasks"]} if record is not None else set()
        out.append((plan, status["job_id"], known))
    return out


def load(run: Run) -> dict[tuple[str, str], Record]:
    """{(shard id, attempt id): figures} of every measured attempt of the run."""
    found: dict[tuple[str, str], Record] = {}
    for plan, _ in bound(run):
        record = run.dir.read(layout.usage(plan["submission_id"]), "tau.usage")
        for task in record["tasks"] if record is not None else []:
            found[(task["shard_id"], task["attempt_id"])] = task
    return found


def check(run: Run, measured: list[Record]) -> list[tuple[Record, Record]]:
    """The document's `usage.submissions`, each with its plan, or BadInput naming the first entry that is not a
    bound submission of this run under that job id, or names a task it does not have."""
    plans = {plan["submission_id"]: (plan, status) for plan, status in bound(run)}
    checked = []
    for entry in measured:
        sub = entry["submission_id"]
        if sub not in plans or plans[sub][1]["job_id"] != entry["job_id"]:
            raise BadInput(f"observations give usage of {sub} (job {entry['job_id']}), which is not a submission "
                           "of this run bound to that job", submission_id=sub)
        indices = set(task_indices(plans[sub][0]))
        stray = sorted(t["task_index"] for t in entry["tasks"] if t["task_index"] not in indices)
        if stray:
            raise BadInput(f"observations give usage of task {stray[0]} of {sub}, which has no such task",
                           submission_id=sub)
        checked.append((plans[sub][0], entry))
    return checked


def unrecorded(run: Run, measured: list[Record]) -> dict[tuple[str, str], Record]:
    """{(shard id, attempt id): figures} of a document's `usage.submissions` (checked as tau-reconcile checks
    them), as `merge` would record them."""
    found: dict[tuple[str, str], Record] = {}
    for plan, entry in check(run, measured):
        by_index = {t["task_index"]: t for t in tasks(plan)}
        for figures in entry["tasks"]:
            task = by_index[figures["task_index"]]
            found[(task["shard_id"], task["attempt_id"])] = dict(figures, shard_id=task["shard_id"],
                                                                 attempt_id=task["attempt_id"])
    return found


def merge(run: Run, plan: Record, entry: Record) -> int:
    """Add the figures of the tasks `entry` measured that the submission's usage.json does not hold yet (under
    usage.lock); how many were added."""
    sub = plan["submission_id"]
    by_index = {t["task_index"]: t for t in tasks(plan)}
    with locks.hold(run.dir, "usage"):
        current = run.dir.read(layout.usage(sub), "tau.usage")
        held: dict[int, Any] = {t["task_index"]: t for t in current["tasks"]} if current is not None else {}
        added = 0
        for figures in entry["tasks"]:
            index = figures["task_index"]
            if index in held:
                continue
            task = by_index[index]
            held[index] = dict(figures, shard_id=task["shard_id"], attempt_id=task["attempt_id"])
            added += 1
        if not added:
            return 0
        run.dir.replace(layout.usage(sub), {
            "kind": "tau.usage", "schema_version": 1, "run_id": run.run_id, "submission_id": sub,
            "job_id": entry["job_id"], "revision": 1 if current is None else current["revision"] + 1,
            "updated_at": jsonio.now_rfc3339(), "complete": len(held) == len(by_index),
            "tasks": [held[i] for i in sorted(held)]})
    return added
