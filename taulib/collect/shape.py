"""A collection's shape (tau-collect(1) "Shape"): what a collection asked for looks like, and whether one that is
there (being collected, or published) is the one asked for. Pure but for the run's plan it is given: a
destination is one dataset, so the same destination with another format, rows per partition, modes, upload or
set of shards is refused (Conflict, 73) naming what is there and how to ask for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from taulib.collect import budget, bundle, formats, tasks, winners
from taulib.collect.destination import group_readable
from taulib.errors import Conflict, UsageError

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run

MAX_ROWS = (1 << 63) - 1  # what a JSON record's integer holds


class Shape(NamedTuple):
    """What a collection's output looks like; `options` the ones given (None where the run's plan decides); `tasks`
    the most tasks it is split over (which changes no byte of it); `upload` the Blob prefix it is uploaded to
    (tau-collect --upload, normalised; None: not uploaded); `group_readable` whether its dataset is published
    with folders 0750 and files 0640 rather than 0700 and 0600; `memory` the budget of each process that writes
    it, in bytes (`collect.budget`; neither changes a byte of it)."""
    format: str
    rows_per_partition: int
    options: dict[str, str | int | bool | None]
    tasks: int = 1
    upload: str | None = None
    group_readable: bool = False
    memory: int = budget.DEFAULT


def asked(run: Run, fmt: str | None = None, rows_per_partition: int | None = None, task_count: int | None = None,
          upload: str | None = None, readable: bool | None = None, memory: int | None = None) -> Shape:
    """The shape of a collection asked for with --format `fmt`, --rows-per-partition, --tasks, --group-readable
    (`readable`; None: the plan's) and --memory (None: the default budget); UsageError (2) for a value tau cannot
    write, before anything is read or written."""
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or memory < budget.LEAST):
        raise UsageError(f"--memory {memory!r} is below the least a collection needs, {budget.LEAST >> 20} MiB")
    if memory is not None and memory > budget.MOST:
        raise UsageError(f"--memory {memory!r} is more than {budget.MOST >> 50} PiB; give the memory a collection "
                         "may use, such as 512M or 2G")
    if task_count is not None and (isinstance(task_count, bool) or not 1 <= task_count <= tasks.MOST):
        raise UsageError(f"--tasks {task_count!r} is not a whole number from 1 to {tasks.MOST}")
    if fmt is not None and fmt not in formats.NAMES:
        raise UsageError(f"--format {fmt!r} is not one of {', '.join(formats.NAMES)}")
    if rows_per_partition is not None and (isinstance(rows_per_partition, bool)
                                           or not 1 <= rows_per_partition <= MAX_ROWS):
        raise UsageError(f"--rows-per-partition {rows_per_partition!r} is not a whole number from 1 to {MAX_ROWS}",
                         rows_per_partition=str(rows_per_partition))
    output = run.plan["output"]
    planned = bool(run.plan["collection"].get("group_readable", False))
    return Shape(fmt or output["format"], rows_per_partition or output["rows_per_partition"],
                 {"format": fmt, "rows_per_partition": rows_per_partition, "group_readable": readable},
                 task_count or output.get("tasks", 1), bundle.asked(upload),
                 planned if readable is None else readable, memory or budget.DEFAULT)


def shape_of(plan: Record) -> tuple[str, int]:
    return plan["format"], plan["rows_per_partition"]


def same_shape(plan: Record, asked: Shape, verb: str) -> None:
    """Conflict (73) unless the collection `plan` has the shape asked for: a destination is one dataset."""
    if shape_of(plan) == (asked.format, asked.rows_per_partition):
        same_modes(plan, asked, verb)  # who may read it
        bundle.same_upload(plan, asked.upload, verb)  # and where it is uploaded
        return
    raise Conflict(f"destination {plan['destination']!r} {verb} {plan['collection_id']} as {plan['format']} in "
                   f"partitions of {plan['rows_per_partition']} rows, not {asked.format} in partitions of "
                   f"{asked.rows_per_partition} as asked; tau never overwrites a dataset: collect this shape to "
                   f"another destination, or give {options(plan)} for that one", destination=plan["destination"],
                   collection_id=plan["collection_id"], format=plan["format"],
                   rows_per_partition=plan["rows_per_partition"])


def same_modes(plan: Record, asked: Shape, verb: str) -> None:
    """Conflict (73) unless the collection `plan` is as group-readable as asked: its modes are part of its shape,
    and a published dataset's are never changed."""
    there = group_readable(plan)
    if there == asked.group_readable:
        return
    then = "give --group-readable" if there else "leave out --group-readable"
    raise Conflict(f"destination {plan['destination']!r} {verb} {plan['collection_id']} {access(there)}, not "
                   f"{access(asked.group_readable)} as asked; tau never overwrites a dataset, nor changes its "
                   f"modes: collect to another destination, or {then} for that one", destination=plan["destination"],
                   collection_id=plan["collection_id"], group_readable=there)


def access(readable: bool) -> str:
    return ("group-readable (folders 0750, files 0640)" if readable
            else "private (folders 0700, files 0600)")


def same_shards(plan: Record, found: winners.Found, verb: str, lenient: bool = False) -> None:
    """Conflict (73) unless the collection `plan` collects the shards that have a winner now (`lenient`: or fewer
    of them): a collection is also the set of shards it collects, so a partial one never stands for a complete
    one, nor a complete one for a partial one."""
    planned, now = shard_ids(plan), [w.shard_id for w in found.winners]
    if planned == now or (lenient and set(planned) <= set(now)):
        return
    after = ("follow it with --allow-missing until it has finished, then collect to another destination"
             if verb == "is being collected by" else "collect to another destination")
    raise Conflict(f"destination {plan['destination']!r} {verb} {plan['collection_id']} of "
                   f"{planned_coverage(plan)}, not of {found_coverage(found)} as asked; tau never overwrites a "
                   f"dataset: {after}",
                   destination=plan["destination"], collection_id=plan["collection_id"],
                   missing=[m["shard_id"] for m in plan.get("missing", [])][:100])


def shard_ids(plan: Record) -> list[str]:
    return [s["shard_id"] for s in plan["shards"]]


def planned_coverage(plan: Record) -> str:
    return coverage(len(plan["shards"]), [m["shard_id"] for m in plan.get("missing", [])])


def found_coverage(found: winners.Found) -> str:
    return coverage(len(found.winners), [m["shard_id"] for m in found.missing])


def coverage(collected: int, missing: list[str]) -> str:
    """The shards a collection collects, in words: "every shard (4)", "2 of 4 shards (shard-00001, shard-00003
    missing)"."""
    if not missing:
        return f"every shard ({collected})"
    return f"{collected} of {collected + len(missing)} shards ({winners.shown(missing)} missing)"


def options(plan: Record) -> str:
    return (f"--format {plan['format']} --rows-per-partition {plan['rows_per_partition']}"
            + (" --group-readable" if group_readable(plan) else ""))
