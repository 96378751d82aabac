"""A collection split into tasks (tau-collect(1) "Tasks"): the partition plan cut into the plan's `tasks` ranges of
consecutive partitions (`rules.partition.lanes`), each written into the collection's one stage by a task of its
own, each task's completion journaled, and the dataset published once every task is done.

Reads and Writes: `collections/<id>/task-NNNNN.json` (tau.collection-task, immutable: written once by the task that
finished, after its files and the stage folder were fsynced), through the run directory's writer; the caller
holds collect.lock. Reads the stage's files (their sizes) before publishing them.
Promises: a task record exists only for a task whose partition files are whole and durable in the stage, so a task
is rerun (for its own partitions only) exactly when it has no record; the dataset is published only when every task
has its record, and its files are the tasks' files in partition order, so its bytes are those of a collection in
one task of the same winners (`collect.stage.write_task`: a partition's bytes depend on its winners' bytes and
the shape only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib import env, jsonio
from taulib.errors import Conflict
from taulib.rundir.journal import COLLECTIONS

if TYPE_CHECKING:
    from taulib.fs.tree import Tree
    from taulib.jsonio import Record
    from taulib.rundir.run import Run

KIND = "tau.collection-task"
MOST = 1000  # tasks of one collection at most: Slurm's default MaxArraySize (1001) holds indices 0..1000


def count(plan: Record) -> int:
    """The collection's tasks (a plan made before tasks existed has one)."""
    tasks: int = plan.get("tasks", 1)
    return tasks


def rel(collection_id: str, task: int) -> str:
    return f"{COLLECTIONS.folder}/{collection_id}/task-{task:05d}.json"


def done(run: Run, plan: Record) -> dict[int, Record]:
    """The task records there are, by task."""
    found: dict[int, Record] = {}
    for task in range(count(plan)):
        record = run.dir.read(rel(plan["collection_id"], task), KIND)
        if record is not None:
            if record["plan_sha256"] != jsonio.digest(plan) or record["task"] != task:
                raise Conflict(f"{run.dir.show(rel(plan['collection_id'], task))} is not a record of this "
                               "collection's task", path=run.dir.show(rel(plan["collection_id"], task)))
            found[task] = record
    return found


def undone(run: Run, plan: Record) -> list[int]:
    """The tasks without a record, in order."""
    have = done(run, plan)
    return [task for task in range(count(plan)) if task not in have]


def record(run: Run, plan: Record, task: int, job_id: str | None, files: list[Record]) -> Record:
    """Journal task `task` done, its partition files `files` (in order) whole and durable in the stage."""
    entry = {"kind": KIND, "schema_version": 1, "run_id": plan["run_id"], "collection_id": plan["collection_id"],
             "plan_sha256": jsonio.digest(plan), "task": task, "job_id": job_id, "files": files,
             "completed_at": jsonio.now_rfc3339()}
    ran_in = env.get("TAU_IN_IMAGE")
    if ran_in:  # done by the tau in the client image (collect.image): its digest
        entry["image_digest"] = ran_in
    run.dir.publish(rel(plan["collection_id"], task), entry)
    return entry


def files(plan: Record, records: dict[int, Record], stage: Tree) -> list[Record]:
    """Every partition file of a collection whose tasks are all done, in partition order, each checked to be in the
    stage with its recorded size (Conflict otherwise: the stage was changed behind tau's back)."""
    out = [entry for task in range(count(plan)) for entry in records[task]["files"]]
    for entry in out:
        found = stage.lstat(entry["path"])
        if found is None or found.st_size != entry["size"]:
            seen = "missing" if found is None else f"{found.st_size} bytes, not {entry['size']}"
            raise Conflict(f"the stage's {entry['path']} is not the file its task recorded ({seen}); it was changed "
                           "behind tau's back", path=entry["path"])
    return out
