"""Collection (tau-collect(1)): every shard's winner, in planned order, into one deterministic dataset.

Reads and Writes: the collection journal (`rundir.journal.COLLECTIONS`) under run.lock (shared) and collect.lock;
the destination's parent folder (the stage, the published dataset). Order of work:
  1. validate every planned shard's winner chain from its records, no bulk data read yet (`collect.winners`; with
     --allow-missing, of every shard that has a winner, the others recorded as missing with their state and reason);
  2. authorise the destination (`collect.destination`);
  3. journal `collections/collection-NNNN/{plan.json,status.json}`;                      failpoint collect.planned
  4. stream the winners into a private stage beside the destination (`collect.stage`);   failpoint collect.staged
  5. publish the stage without replacing anything (`fs.publish`), fsync;                 failpoint collect.renamed
  6. status succeeded.
Under the local executor steps 4 to 6 run inline; under Slurm they run in a CPU job without GPUs
(`tau-collect RUN --worker ID`, fenced on its SLURM_JOB_ID: `collect.job`), which `--wait` follows to its end. With
the plan's `collection.image: client`, the work done on this machine (the whole collection inline, or the
worker's) is handed to the tau in the client image (`collect.image`), once the destination is authorised.
Shape: a collection's output format and rows per partition are tau-collect's --format and --rows-per-partition,
each defaulting to the run's plan (`output`), and whether its dataset is group-readable (--group-readable, or the
plan's `collection.group_readable`; `collect.destination.modes`); its plan record holds all three, and `options`
says which were given.
A collection is its destination and its shape: asked again with both the same it is reported (or followed, or
resumed); the same destination with another shape is refused (Conflict, 73) naming the shape that is there, since
a dataset is never overwritten; any other destination is a new collection, whatever the earlier ones. A collection
is also the set of shards it collects (tau-collect(1) "Missing shards"): one of other shards than the winners there
are now is refused like another shape, except that an unfinished one is followed under Slurm with --allow-missing
(its job collects what it was planned from) and, under the local executor, where nothing of it still runs, is
retired and replaced by a new collection.
Promises: a rerun after a crash removes the exact stage of an unfinished collection and starts it again, or adopts
a destination that a crashed run had already published (its _tau_collection.json names this plan); a rerun after
success reports the collection (created false). Nothing is ever overwritten, and a collection never leaves a
partial dataset at its destination: stopped by a signal it removes its stage (a second signal notwithstanding)
and its entry stays unfinished, for the next call to resume.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from taulib import env, executors, failpoints, jsonio, signals
from taulib.collect import array, bundle, formats, image, job, shape, stage, tasks, winners
from taulib.collect.destination import (authorise, check_modes, open_parent, open_stage, read_result,
                                        remove_stage, stage_name)
from taulib.collect.report import summary
from taulib.errors import Busy, Conflict, Internal, Refused, UsageError
from taulib.executors import CollectionJobs
from taulib.fs import publish
from taulib.rundir import locks
from taulib.rundir.journal import COLLECTIONS, Journal

if TYPE_CHECKING:
    from taulib.collect.array import Publish
    from taulib.collect.destination import Destination
    from taulib.fs.tree import Tree
    from taulib.jsonio import Record
    from taulib.rundir.run import Run

UNFINISHED = ("prepared", "submitted", "running")


def collect(run: Run, destination: str, wait: bool = False, fmt: str | None = None,
            rows_per_partition: int | None = None, progress: bool | None = None, allow_missing: bool = False,
            task_count: int | None = None, upload: str | None = None, readable: bool | None = None,
            memory: int | None = None) -> Record:
    """Plan a collection and run it: inline under the local executor, as a CPU job under Slurm (returned as
    `submitted`; with `wait`, followed to its end and then reported as a later call would, but `created` still
    says whether this call planned it or found it planned). `fmt` and `rows_per_partition` choose its shape (None:
    the plan's); `progress` forces the progress line on or off (None: on when stderr is a terminal);
    `allow_missing` collects the winners there are, recording the shards without one, instead of refusing them;
    `task_count` the most tasks a new collection is split over (None: the plan's output.tasks, or one); `upload` a
    Blob prefix to upload the dataset to, sealed (`collect.bundle`); `readable` True publishes the dataset
    group-readable (None: as the plan's collection.group_readable says); `memory` the budget, in bytes, of each
    process that writes a new collection (None: `collect.budget.DEFAULT`; a resumed one keeps its plan's)."""
    asked = shape.asked(run, fmt, rows_per_partition, task_count, upload, readable, memory)
    jobs = executors.of(run).collection_jobs()
    if jobs is None and image.wanted(run):  # its work is done here: by the tau in the client image
        where = authorise(run, destination)
        image.inside(run, where.path)
        given = [("--format", fmt), ("--rows-per-partition", rows_per_partition), ("--tasks", task_count),
                 ("--upload", upload), ("--memory", memory)]
        args = ["--destination", where.path, *[str(a) for option, value in given if value is not None
                                               for a in (option, value)]]
        flags = [flag for flag, given_flag in (("--allow-missing", allow_missing), ("--group-readable", readable))
                 if given_flag]
        return image.run_inside(run, args + flags, [image.existing(where.real_parent)])
    result = _once(run, destination, asked, progress, allow_missing)
    if wait and jobs is not None and result["state"] in ("submitted", "running"):
        book = Journal(run, COLLECTIONS)
        job.wait(jobs, book, result["collection_id"], lambda: _settle_gone(run, jobs, result["collection_id"]))
        created = result["created"]
        result = dict(_once(run, destination, asked, progress, allow_missing, follow=result["collection_id"]),
                      created=created)
    return bundle.deliver(run, result)  # a published collection's upload, outside the locks


def _once(run: Run, destination: str, asked: shape.Shape, progress: bool | None, allow_missing: bool = False,
          follow: str | None = None) -> Record:
    """One pass; `follow`, the collection this call has been waiting for (reported whatever has won since)."""
    found = winners.gather(run, allow_missing)
    fields = found.winners[0].manifest.get("fields", [])  # (a run of an older tau may not have recorded them)
    field = formats.unwritable(asked.format, fields)
    if field is not None:
        others = [name for name in formats.NAMES if formats.unwritable(name, fields) is None]
        raise UsageError(f"--format {asked.format} cannot hold column {field['name']!r} of type {field['type']}; "
                         f"collect this run as {' or '.join(others)}", column=field["name"])
    where = authorise(run, destination)
    image.inside(run, where.path)  # in the client image: below a writable mount of it (77 otherwise)
    with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "collect"), open_parent(where) as parent:
        return _coordinate(run, Journal(run, COLLECTIONS), found, where, parent, asked, progress,
                           allow_missing, follow)


def _coordinate(run: Run, book: Journal, found: winners.Found, where: Destination, parent: Tree, asked: shape.Shape,
                progress: bool | None, allow_missing: bool = False, follow: str | None = None) -> Record:
    jobs = executors.of(run).collection_jobs()  # None: the collection runs inline, here
    resumed: tuple[Record, Record] | None = None
    entry = book.newest()
    if entry is not None and entry.status is not None and entry.status["state"] in UNFINISHED:
        plan, status = entry.plan, entry.status
        if plan["destination"] != where.path:
            raise Busy(f"collection {plan['collection_id']} to {plan['destination']!r} is not finished; run "
                       f"tau-collect for that destination first ({shape.options(plan)})",
                       collection_id=plan["collection_id"])
        shape.same_shape(plan, asked, "is being collected by")
        if jobs is None:
            resumed = plan, status
        else:
            shape.same_shards(plan, found, "is being collected by", lenient=allow_missing)
            settled = job.settle(run, jobs, book, plan, status, parent, where.name,
                                 lambda p, s, r: _finish(book, p, s, r), _publisher(book, where))
            if settled is not None:
                return settled
    publish.recover_reservation(parent, where.name)
    if resumed is not None:
        outcome = _resume(book, resumed, found, parent, where.name)
        if isinstance(outcome, dict):
            return outcome
        resumed = outcome
    if parent.exists(where.name):
        published = _published(book, parent, where)
        if published is not None:
            plan, status, result = published
            shape.same_shape(plan, asked, "holds")
            shape.same_shards(plan, found, "holds", lenient=plan["collection_id"] == follow)
            return summary(plan, status, result, created=False)
        raise Conflict(f"destination {where.path!r} already exists; tau never overwrites a dataset",
                       destination=where.path)
    if resumed is None:
        plan = _plan(run, book.next_id(), where.path, found, asked)
        status = book.open(plan, result_sha256=None)
        failpoints.hit("collect.planned")
        if jobs is not None:
            remove_stage(parent, stage_name(plan))
            open_stage(parent, plan, create=True).close()  # the tasks' one stage, with its mode, before they start
            return job.submit(run, jobs, book, plan, status, parent, created=True)
    else:
        plan, status = resumed
        winners.check_unchanged(plan, found.winners)
    return _work(run, book, plan, status, found.winners, parent, where.name, progress)


def _resume(book: Journal, unfinished: tuple[Record, Record], found: winners.Found, parent: Tree,
            name: str) -> Record | tuple[Record, Record] | None:
    """An unfinished inline collection (its process died; we hold collect.lock): its summary when it had published
    its dataset and collects the shards asked for; (plan, status) to resume it; None when it is over (published
    other shards, or retired here because the winners there are now are not the ones it was planned from)."""
    plan, status = unfinished
    result = read_result(parent, name)
    if result is not None and result["plan_sha256"] == jsonio.digest(plan):
        done = _finish(book, plan, status, result)  # published before the crash: adopt it
        return done if shape.shard_ids(plan) == [w.shard_id for w in found.winners] else None
    if shape.shard_ids(plan) == [w.shard_id for w in found.winners]:
        return plan, status
    remove_stage(parent, stage_name(plan))
    book.retire(status, f"interrupted, and not resumed: it was planned from {shape.planned_coverage(plan)}, and "
                        f"the winners there are now are of {shape.found_coverage(found)}; a new collection replaces "
                        "it")
    return None


def _published(book: Journal, parent: Tree, where: Destination) -> tuple[Record, Record, Record] | None:
    """(plan, status, result) of the collection of this run whose dataset is at the destination, when it is one:
    its `_tau_collection.json` names a succeeded entry of the journal, made from that entry's plan, to here."""
    result = read_result(parent, where.name)
    if result is None or not book.run.dir.exists(book.plan_rel(result["collection_id"])):
        return None
    plan, status = book.read(result["collection_id"])
    if (status is None or status["state"] != "succeeded" or status["result_sha256"] != jsonio.digest(result)
            or result["plan_sha256"] != jsonio.digest(plan) or plan["destination"] != where.path):
        return None
    return plan, status, result


def _plan(run: Run, collection_id: str, destination: str, found: winners.Found, asked: shape.Shape) -> Record:
    plan = {"kind": "tau.collection-plan", "schema_version": 1, "run_id": run.run_id,
            "collection_id": collection_id, "plan_sha256": run.plan_sha256, "created_at": jsonio.now_rfc3339(),
            "destination": destination, "format": asked.format, "rows_per_partition": asked.rows_per_partition,
            "group_readable": asked.group_readable, "options": asked.options,
            "records": winners.records_of(run, [w.shard_id for w in found.winners]),
            "schema_digest": found.winners[0].manifest["schema_digest"],
            "shards": [{"shard_id": w.shard_id, "winner_sha256": w.winner_sha256} for w in found.winners],
            "missing": found.missing, "memory": asked.memory}
    plan["tasks"] = len(stage.tasks(plan, found.winners, asked.tasks))  # at most one per partition
    inside = image.inside(run, destination)
    if inside is not None:  # run in the client image: its digest, and the dataset's path there
        plan["image"] = inside
    plan.update(bundle.planned(run, collection_id, asked.upload))  # nothing without --upload
    return plan


def _work(run: Run, book: Journal, plan: Record, status: Record, found: list[winners.Winner], parent: Tree, name: str,
          progress: bool | None = None) -> Record:
    """Steps 4-6 inline, under the local executor: the collection written here (one task), or each of its tasks
    in a worker process (`collect.array.local`); a resumed collection of several tasks keeps the tasks that are
    done and reruns the others. The caller holds collect.lock."""
    from taulib.progress import Meter

    status = book.advance(status, state="running")
    staged = stage_name(plan)
    several = tasks.count(plan) > 1
    todo = tasks.undone(run, plan) if several else []
    if len(todo) == tasks.count(plan) or not several:
        remove_stage(parent, staged)  # a fresh start
    try:
        with open_stage(parent, plan, create=True) as folder, \
                Meter("collecting", unit="rows", total_count=plan["records"], show=progress) as meter:
            if several:
                array.local(run, plan, todo, lambda task, files: tasks.record(run, plan, task, None, files), meter)
            else:
                result = stage.write(run, plan, found, folder, meter)
        if several:
            done = array.publish_when_done(run, plan, status, parent, name, lambda p, s, st, r: _publish(
                book, p, s, parent, st, name, r))
            if done is None:
                raise Internal(f"collection {plan['collection_id']} has tasks without a record after they all ran")
            return done
        return _publish(book, plan, status, parent, staged, name, result)
    except BaseException as exc:
        if several and (not isinstance(exc, Exception) or isinstance(exc, array.Killed)):
            raise  # stopped: the stage keeps the files of the tasks that are done, for the next call to resume
        with signals.deferred():  # a second signal must not leave half a stage
            remove_stage(parent, staged)
        if isinstance(exc, Exception):  # an error (not a signal): the entry is over, so the next call starts anew
            try:
                book.retire(status, array.reason(exc))
            except Exception:  # noqa: BLE001 - a full disk may refuse this too: then the next call resumes it
                pass
        raise


def _publish(book: Journal, plan: Record, status: Record, parent: Tree, staged: str, name: str,
             result: Record) -> Record:
    """Step 5: the stage, `_tau_collection.json` written last, published at the destination; then step 6."""
    bundle.seal(book.run, plan, result, parent, staged)  # with --upload, it is published sealed
    check_modes(parent, plan)  # it appears with its final modes
    try:
        failpoints.hit("collect.staged")
        publish.publish_folder(parent, staged, name)
        failpoints.hit("collect.renamed")
    except BaseException:
        with signals.deferred():
            publish.recover_reservation(parent, name)  # stopped between the claim and the rename
        raise
    return _finish(book, plan, status, result)


def _finish(book: Journal, plan: Record, status: Record, result: Record) -> Record:
    status = book.advance(status, state="succeeded", result_sha256=jsonio.digest(result))
    return summary(plan, status, result, created=True)


def _settle_gone(run: Run, jobs: CollectionJobs, collection_id: str) -> None:
    """While waiting: settle a CPU job that left the queue without finishing the collection."""
    book = Journal(run, COLLECTIONS)
    with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "collect"):
        plan, status = book.read(collection_id)
        if status is not None and status["state"] in ("submitted", "running"):
            where = authorise(run, plan["destination"])
            with open_parent(where) as parent:
                job.settle(run, jobs, book, plan, status, parent, where.name, lambda p, s, r: _finish(book, p, s, r),
                           _publisher(book, where))


def work(run_dir: str, collection_id: str, environ: dict[str, str] | None = None) -> Record:
    """An array task of the collection's Slurm job (`tau-collect RUN --worker ID`): fence on the array job's id,
    then write the task's partitions and publish the dataset when every task is done (`collect.array.work`)."""
    from taulib.rundir.run import Run

    environ = env.current() if environ is None else environ
    with Run(run_dir) as run:
        jobs = executors.of(run).collection_jobs()
        if jobs is None:
            raise Refused(f"run {run.run_id!r} is collected inline by tau-collect itself, never by a worker job; run "
                          "tau-collect RUN --destination PATH")
        job_id, task = jobs.identity(environ), jobs.task(environ)
        if not job_id:
            raise Refused("tau-collect --worker runs only inside its Slurm job (SLURM_JOB_ID is unset); on a login "
                          "node, run tau-collect RUN --destination PATH")
        book = Journal(run, COLLECTIONS)
        plan = run.dir.require(book.plan_rel(collection_id), COLLECTIONS.plan_kind)
        if image.wanted(run, environ):  # the tau in the client image does the work, fenced as this one would be
            where = authorise(run, plan["destination"])
            return image.run_inside(run, ["--worker", collection_id], [image.existing(where.real_parent)], environ)
        job.await_binding(book, plan, job_id, time.monotonic() + env.get("TAU_BINDING_WAIT", environ))
        found = winners.of_plan(run, plan)
        where = authorise(run, plan["destination"])
        with locks.hold(run.dir, "run", shared=True):
            result = array.work(run, book, plan, job_id, 0 if task is None else task, found, where,
                                _publisher(book, where), lambda p, s, r: _finish(book, p, s, r), jobs.cpus(environ))
        return bundle.deliver(run, result)  # the last task, once the dataset is published: its upload


def _publisher(book: Journal, where: Destination) -> Publish:
    """The publication of a collection whose tasks are all done, at `where`: (plan, status, staged, result) ->
    its summary. The caller holds collect.lock."""
    def publish_it(plan: Record, status: Record, staged: str, result: Record) -> Record:
        with open_parent(where) as parent:
            return _publish(book, plan, status, parent, staged, where.name, result)
    return publish_it
