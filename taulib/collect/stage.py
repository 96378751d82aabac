"""Step 4 of a collection: the winners' rows streamed, partition by partition, into a private stage folder.

Reads: every winner file, in collection order (shards in planned order, each shard's files in manifest order),
through `collect.inputs` (each file's size, sha256 and Parquet row count checked before a row of it is used).
Writes: inside the stage only: `part-NNNNN.<format>` files through `collect.outputs` (hashed as they are written,
fsynced), then `_tau_collection.json` (every output file's path, size, sha256 and rows, and whether the dataset
is complete or which shards it lacks and why) last, fsynced, then the stage folder.
Promises: the partitions are the pure plan `rules.partition.plan` (every partition but the last has exactly
`rows_per_partition` rows); each partition's bytes are a function of its winners' bytes and the shape only
(`collect.outputs`), so the same winners always give byte-identical files, however many partitions are written at once.
Up to LANES partitions are written at the same time, in lanes of consecutive partitions (`rules.partition.lanes`), each
lane a thread that decodes, encodes and writes in turn, beside a reader thread of its own that reads, hashes and
decodes ahead of it, so the work spreads over the cores: pyarrow, hashlib, reads and writes release the interpreter
lock. How many lanes, and how much of a winner each reader holds, is the collection's memory budget's
(`collect.budget`: fewer lanes, or smaller input buffers, when the budget is small or the rows are wide).
The main thread writes the first lane, so a stop signal unwinds the collection from there; every other lane sees that
(or another lane's error) within a batch, and is joined before anything is removed. Memory is bounded by the budget,
whatever the input size: per lane, what `collect.inputs` and `collect.outputs` hold. Imports pyarrow (through those
modules, when a lane starts), so only the collection worker loads it.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

from taulib import failpoints, jsonio, signals
from taulib.collect.destination import RESULT, group_readable
from taulib.collect import budget, formats, parquet
from taulib.collect.inputs import POLL, QUEUE, READ_CHUNK, READ_ROWS, Inputs, Stopped
from taulib.collect.outputs import WRITE_BUFFER, Output
from taulib.errors import Conflict
from taulib.fs.tree import Tree
from taulib.rules import partition

if TYPE_CHECKING:
    from taulib.collect.winners import Winner
    from taulib.jsonio import Record
    from taulib.progress import Meter
    from taulib.rundir.run import Run

LANES = max(1, min(len(os.sched_getaffinity(0)), 4))  # partitions written at the same time: the CPUs this may use
WIDE_ROWS = 1024  # a winner file's bytes per row count towards the widest rows from this many rows on


def files_of(winners: list[Winner]) -> list[tuple[str, Record]]:
    """Every winner file in collection order: (its path in the run, its manifest entry)."""
    return [(f"{w.manifest['dataset']}/{entry['path']}", entry) for w in winners for entry in w.manifest["files"]]


def partitions(plan: Record, winners: list[Winner]) -> tuple[list[tuple[str, Record]], list[partition.Partition]]:
    """The collection's files and its partition plan (`rules.partition.plan`)."""
    files = files_of(winners)
    return files, partition.plan([entry["rows"] for _, entry in files], plan["rows_per_partition"])


def tasks(plan: Record, winners: list[Winner], asked: int) -> list[partition.Lane]:
    """The collection split into at most `asked` tasks of consecutive partitions (`rules.partition.lanes`): as many
    as there are partitions at most, one at least."""
    files, parts = partitions(plan, winners)
    return partition.lanes(parts, len(files), asked)


def write(run: Run, plan: Record, winners: list[Winner], stage: Tree, meter: Meter | None = None) -> Record:
    """Write the whole collection `plan` of `winners` into the empty `stage`; returns its `_tau_collection.json`.
    `meter` (a `taulib.progress.Meter`, or None) is told the rows and the bytes written as they are."""
    files, parts = partitions(plan, winners)
    spread = spread_of(run, plan, files, LANES)
    written = _write_lanes(run, files, partition.lanes(parts, len(files), spread.lanes), stage, plan["format"], meter,
                           spread)
    return finish(plan, stage, [written[part.index] for part in parts])


def spread_of(run: Run, plan: Record, files: list[tuple[str, Record]], cpus: int) -> budget.Budget:
    """How the collection's memory budget (its plan's `memory`) is spread over at most `cpus` lanes, for these
    winner files (`collect.budget`), in this process as it is now (the encoders' libraries imported first: they are
    part of what it holds before its lanes start). The rows' width is the widest winner file's bytes per row (of
    those with WIDE_ROWS rows at least, else of them all), times what its footer says its rows take decoded."""
    import pyarrow.compute  # noqa: F401 - held from here on, whatever the lanes do
    import pyarrow.csv  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    from taulib.collect import jsonl  # noqa: F401

    sized = [(entry["size"] / entry["rows"], rel) for rel, entry in files if entry["rows"] >= WIDE_ROWS] or \
        [(entry["size"] / entry["rows"], rel) for rel, entry in files if entry["rows"]]
    row_bytes, widest = max(sized) if sized else (0.0, None)
    if widest is not None:
        row_bytes *= _expansion(run, widest)
    held_rows = formats.get(plan["format"]).rows_held + READ_ROWS * (QUEUE + 1)  # the writer's, the hand-over's
    fixed = 2 * READ_CHUNK + WRITE_BUFFER  # the reader's scratch (hashing), the copy's, the sink's buffer
    return budget.plan(plan.get("memory", budget.DEFAULT), budget.held(), cpus, held_rows, row_bytes, fixed)


def _expansion(run: Run, rel: str) -> float:
    """How many times its bytes a winner file's rows take once decompressed (its footer's row groups' total byte
    size against their column chunks' bytes; 1 when it says nothing of use)."""
    fd = run.dir.open_read(rel)
    try:
        found = parquet.footer(fd, os.fstat(fd).st_size, rel)
    finally:
        os.close(fd)
    stored = sum(length for _, _, ranges in found.groups for _, length in ranges)
    decoded = sum(parquet.decoded_size(group) for _, group, _ in found.groups)
    return max(1.0, decoded / stored) if stored and decoded else 1.0


def write_task(run: Run, plan: Record, winners: list[Winner], stage: Tree, task: int, lanes: int = LANES,
               meter: Meter | None = None) -> list[Record]:
    """Write task `task`'s partitions (of the plan's `tasks`) into `stage`, over `lanes` threads, first removing
    whatever an earlier try of this task left of them; returns their descriptions, in order, once the files and
    the stage folder are fsynced. Other tasks may write their own partitions into the same stage meanwhile."""
    files, parts = partitions(plan, winners)
    lane = partition.lanes(parts, len(files), plan.get("tasks", 1))[task]
    suffix = formats.get(plan["format"]).suffix
    for part in lane.partitions:
        stage.remove_file(partition.file_name(part.index, suffix))
    spread = spread_of(run, plan, files, lanes)
    split = partition.lanes(list(lane.partitions), len(files), spread.lanes, lane.first, lane.last)
    written = _write_lanes(run, files, split, stage, plan["format"], meter, spread)
    os.fsync(stage.fd)
    failpoints.hit("collect.task_written")
    return [written[part.index] for part in lane.partitions]


def finish(plan: Record, stage: Tree, out: list[Record]) -> Record:
    """Write `_tau_collection.json` of the partition files `out` (in order) last into the stage, fsynced; returns
    it. Conflict when the files do not hold the plan's rows."""
    total = sum(f["rows"] for f in out)
    if total != plan["records"]:
        raise Conflict(f"collected {total} rows; the plan asks for {plan['records']}")
    result = {"kind": "tau.collection-result", "schema_version": 1, "run_id": plan["run_id"],
              "collection_id": plan["collection_id"], "plan_sha256": jsonio.digest(plan),
              "completed_at": jsonio.now_rfc3339(), "format": plan["format"], "records": total, "files": out,
              "complete": not plan.get("missing"), "missing": plan.get("missing", []),
              "group_readable": group_readable(plan)}
    stage.write_new(RESULT, jsonio.canonical(result))
    os.fsync(stage.fd)
    return result


def _write_lanes(run: Run, files: list[tuple[str, Record]], split: list[partition.Lane], stage: Tree, fmt: str,
                 meter: Meter | None, spread: budget.Budget) -> dict[int, Record]:
    """Write the partitions of the lanes `split`, each lane in a thread (the first in this one); their
    descriptions by partition index."""
    written: dict[int, Record] = {}
    failed: list[tuple[int, BaseException]] = []
    stop = threading.Event()
    lanes = [_Lane(run, files, lane, stage, fmt, meter, stop, written, failed, spread.input_buffer) for lane in split]
    threads = [threading.Thread(target=lane.run, name=f"tau-collect-lane-{n}", daemon=True)
               for n, lane in enumerate(lanes[1:], start=1)]
    try:
        for thread in threads:
            thread.start()
        lanes[0].run()  # the main thread writes the first lane: a stop signal unwinds it from here
        while any(thread.is_alive() for thread in threads):
            time.sleep(POLL * 20)
    finally:
        stop.set()
        with signals.deferred():  # every lane sees `stop` within a batch and leaves nothing half taken
            for thread in threads:
                thread.join()
    if failed:  # the first partition's error, whichever lane saw it first
        raise min(failed, key=lambda item: item[0])[1]
    return written


class _Lane:
    """Consecutive partitions written one after another (`rules.partition.lanes`), by one thread, from its own
    reader; the lanes of a collection run at the same time, each on its own files."""

    def __init__(self, run: Run, files: list[tuple[str, Record]], lane: partition.Lane, stage: Tree, fmt: str,
                 meter: Meter | None, stop: threading.Event, written: dict[int, Record],
                 failed: list[tuple[int, BaseException]], input_buffer: int) -> None:
        needs: dict[int, list[tuple[int, int]]] = {}
        for part in lane.partitions:
            for piece in part.pieces:
                needs.setdefault(piece.file, []).append((piece.start, piece.stop))
        self.inputs = Inputs(run, files, lane.first, lane.last, stop, needs, formats.get(fmt).copies, input_buffer)
        self.lane, self.stage, self.fmt, self.meter = lane, stage, fmt, meter
        self.stop, self.written, self.failed = stop, written, failed

    def run(self) -> None:
        index = self.lane.partitions[0].index if self.lane.partitions else 0
        try:
            for part in self.lane.partitions:
                index = part.index
                self._partition(part)
                if self.stop.is_set():
                    return
            self.inputs.finish()
        except Stopped:
            return
        except BaseException as exc:
            self.failed.append((index, exc))
            self.stop.set()
            if threading.current_thread() is threading.main_thread():
                raise
        finally:
            self.inputs.close()

    def _partition(self, part: partition.Partition) -> None:
        out = Output(self.stage, partition.file_name(part.index, formats.get(self.fmt).suffix), self.fmt)
        told = 0  # bytes of this file the meter was told of
        for piece in part.pieces:
            for batch in self.inputs.read(piece):
                out.write(batch)
                if self.meter is not None:
                    size = out.size()
                    self.meter.add(batch.num_rows, size - told)
                    told = size
        self.written[part.index] = out.close(part.rows)
        if self.meter is not None:
            self.meter.add(0, self.written[part.index]["size"] - told)
