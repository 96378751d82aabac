"""Partition planning (tau-collect(1) "Shape"): which rows of which winner file go into which output file. Pure
(tests/test_rules_partition.py, with properties).

The input is the row count of every winner file in collection order (shards in planned order, each shard's files
in manifest order); the rows form one sequence. Partition i holds rows [i*R, min((i+1)*R, total)) of it, R being
`rows_per_partition`: every partition but the last has exactly R rows, the last takes the rest, every row is in
exactly one partition, and the same inputs always give the same plan (so the same bytes). A partition is a list of
pieces, each a half-open row range of one input file.
"""

from __future__ import annotations

from typing import NamedTuple


class Piece(NamedTuple):
    file: int  # position of the input file in collection order
    start: int  # first row of that file in this piece
    stop: int  # the row after its last


class Partition(NamedTuple):
    index: int  # type: ignore[assignment]  # the field shadows tuple.index, as NamedTuple allows
    rows: int
    pieces: tuple[Piece, ...]


def plan(file_rows: list[int], rows_per_partition: int) -> list[Partition]:
    """The partitions of the rows of files with `file_rows` rows each (R = rows_per_partition > 0)."""
    if rows_per_partition < 1:
        raise ValueError("rows_per_partition must be at least 1")
    out: list[Partition] = []
    pieces: list[Piece] = []
    room = rows_per_partition
    for position, rows in enumerate(file_rows):
        start = 0
        while start < rows:
            take = min(room, rows - start)
            pieces.append(Piece(position, start, start + take))
            start += take
            room -= take
            if room == 0:
                out.append(Partition(len(out), rows_per_partition, tuple(pieces)))
                pieces, room = [], rows_per_partition
    if pieces:
        out.append(Partition(len(out), rows_per_partition - room, tuple(pieces)))
    return out


def file_name(index: int, suffix: str) -> str:
    """The output file of partition `index`: part-00000.parquet, ..."""
    return f"part-{index:05d}.{suffix}"


class Lane(NamedTuple):
    partitions: tuple[Partition, ...]  # consecutive partitions, written one after another
    first: int  # the first input file this lane reads (and verifies)
    last: int  # the last one


def lanes(partitions: list[Partition], file_count: int, most: int, first: int = 0,
          last: int | None = None) -> list[Lane]:
    """The partitions split into at most `most` lanes of consecutive partitions (sizes differing by at most one),
    which can be written at the same time: each lane reads the files from its first piece's to its last's, plus
    the files without rows after them, up to the next lane's first. So every input file is read by one lane, but
    a file whose rows several lanes share (one at each of the `most` - 1 boundaries at most), which each of them
    reads; with no partitions, one lane of no partitions reads every file. `first` and `last` bound the files
    read (default: all `file_count` of them): a lane of `lanes` split again (a collection task's partitions, split
    over its threads) passes its own, so the sub-lanes read exactly the files their lane reads."""
    if most < 1:
        raise ValueError("most must be at least 1")
    last = file_count - 1 if last is None else last
    count = max(1, min(most, len(partitions)))
    size, extra = divmod(len(partitions), count)
    groups, start = [], 0
    for position in range(count):
        stop = start + size + (1 if position < extra else 0)
        groups.append(tuple(partitions[start:stop]))
        start = stop
    firsts = [first] + [group[0].pieces[0].file for group in groups[1:]]
    out = []
    for position, group in enumerate(groups):
        end = last if position == count - 1 else max(group[-1].pieces[-1].file, firsts[position + 1] - 1)
        out.append(Lane(group, firsts[position], end))
    return out
