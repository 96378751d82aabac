"""Reading a lane's winner files for a collection: each file read once, verified whole, decoded ahead of the writer.

Reads: the winner files `first`..`last` of a collection, in order, through the run's own reader (`RunDir`). A file
of at most `input_buffer` bytes (the lane's, from the memory budget: `collect.budget`) is read into one of BUFFERS
buffers, hashed as it is read, and decoded or copied from those bytes; a larger one, or one met while both buffers
are in use, is hashed in a first pass and decoded or copied from its descriptor in a second, READ_CHUNK bytes at a
time (a row group to decode is read a column chunk's pages at a time, whatever its size). Either way its size,
sha256 and Parquet row count are compared with its manifest before a row of it is used (Conflict otherwise).
Writes nothing.
Promises: `Inputs.read(piece)` gives exactly the rows of the piece, in order, in batches of at most READ_ROWS, but
for a Parquet collection, a row group that lies wholly inside the piece and can be copied (`collect.parquet`),
which it gives whole, undecoded, as a `parquet.Span`. A row group that no piece of the lane needs (another lane's,
or rows before or after the lane's) is verified with its file but never decoded; one that a piece needs part of is
decoded whole and the rest passed over. Read by a reader thread of the lane's own, which reads, hashes and decodes
while the lane's writer encodes; they hand batches over through a deque that each side polls (no lock or condition
is waited on, so a stop signal can unwind the writer at any moment and leave nothing half taken).
Memory: BUFFERS input buffers of at most `input_buffer` bytes (each reused once no decoded batch or row group to
copy refers to it, which spares the kernel the page faults of a fresh one) and QUEUE * READ_ROWS decoded rows in
flight (with row groups to copy and the ends of files, HANDED items at most).
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Generator, Iterator, NamedTuple

from taulib import signals
from taulib.collect import parquet
from taulib.collect.budget import BUFFERS
from taulib.errors import Conflict
from taulib.rules import partition

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run

READ_ROWS = 8192  # rows decoded at a time (the reader holds them, and hands them over, a batch at a time)
BUFFER_GRAIN = 4 << 20  # an input buffer's size is rounded up to this, so that files of about one size share it
READ_CHUNK = 1 << 20  # bytes of a winner not held in memory read at a time (hashed, then copied or decoded)
QUEUE = 1  # decoded rows in flight between the reader and the writer: at most QUEUE * READ_ROWS of them
HANDED = 64  # items in flight at most (batches, row groups passed over or to copy, the ends of files)
POLL = 0.0005  # seconds a side waits before looking at the hand-over again


class Skip(NamedTuple):
    """A row group that no piece of the lane needs: verified with its file, never decoded."""
    num_rows: int


class Stopped(Exception):
    """Another lane failed (or the command is stopping): this one leaves off where it is."""


_END = object()  # a file's batches are all queued


def _rows(item: Any) -> int:
    """The decoded rows an item handed over holds: a batch's; none for a row group passed over or to copy, the end
    of a file or an error."""
    return 0 if isinstance(item, (Skip, parquet.Span, BaseException)) or item is _END else int(item.num_rows)


class Inputs:
    """The winner files `first`..`last` in collection order, read, verified whole and decoded by a reader thread
    ahead of the writer; `read` takes the rows of one piece of a file, in order (the rows of a file before the
    piece, which another lane writes, are decoded and passed over)."""

    def __init__(self, run: Run, files: list[tuple[str, Record]], first: int, last: int, lanes_stop: threading.Event,
                 needs: dict[int, list[tuple[int, int]]], copy: bool, input_buffer: int) -> None:
        self.run, self.files, self.first, self.last = run, files, first, last
        self.needs = needs  # by file: the row ranges of the lane's pieces (row groups outside them are skipped)
        self.copy = copy  # row groups that fit are handed over whole, to be copied (Parquet)
        self.lanes_stop = lanes_stop  # set when any lane fails or the collection stops
        self.handed: deque[Any] = deque()  # batches, _END markers and the reader's exception, in order
        self.put_rows = self.taken_rows = 0  # decoded rows handed over and taken (each counted by its one side)
        self.stop = threading.Event()  # this reader's own
        self.thread: threading.Thread | None = None
        self.current = first - 1  # the file whose batches `read` takes now
        self.position = 0  # rows of the current file already taken
        self.left: Any = None  # the rest of a batch a piece ended inside
        self.done = False  # the current file's batches are all taken
        self.buffers: list[bytearray] = []  # the reader's input buffers, each reused once nothing refers to it
        self.scratches: dict[str, memoryview] = {}  # READ_CHUNK bytes each: a large file hashed, and copied
        self.input_buffer = input_buffer  # files of at most this many bytes are read once, into a buffer

    def read(self, piece: partition.Piece) -> Iterator[Any]:
        """The rows [start, stop) of input `piece.file`, as record batches."""
        while self.current < piece.file:
            self._next_file()
        assert self.position <= piece.start, "pieces of a file are read in order"
        while self.position < piece.stop:
            batch = self.left if self.left is not None else self._next_batch()
            self.left = None
            if isinstance(batch, (Skip, parquet.Span)):  # a row group before the piece, or one wholly inside it
                end = self.position + batch.num_rows
                assert end <= piece.start if isinstance(batch, Skip) else piece.start <= self.position <= end <= \
                    piece.stop, "the reader skips or copies whole row groups of this lane's pieces only"
                if isinstance(batch, parquet.Span):
                    yield batch
                self.position = end
                continue
            skip = min(batch.num_rows, max(0, piece.start - self.position))
            take = min(batch.num_rows - skip, piece.stop - self.position - skip)
            if skip + take < batch.num_rows:
                self.left = batch.slice(skip + take)
            self.position += skip + take
            if take:
                yield batch.slice(skip, take) if skip or take < batch.num_rows else batch

    def finish(self) -> None:
        """Verify the rest of this lane's files: those no partition of it needed rows of (files without rows, or
        the next lane's), whose row groups are passed over undecoded."""
        while self.current < self.last:
            self._next_file()
        if self.current >= self.first:
            self._drain_file()

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            with signals.deferred():  # it sees `stop` within POLL, or at the end of the read it is in
                self.thread.join()
        self.thread = None
        self.handed.clear()

    # -- the writer's side --------------------------------------------------------------------------------------

    def _take(self) -> Any:
        if self.thread is None:
            self.thread = threading.Thread(target=self._reader, name="tau-collect-reader", daemon=True)
            self.thread.start()
        while True:
            try:
                item = self.handed.popleft()
                self.taken_rows += _rows(item)
                break
            except IndexError:
                if self.lanes_stop.is_set():
                    raise Stopped() from None
                time.sleep(POLL)
        if isinstance(item, BaseException):
            raise item
        return item

    def _next_file(self) -> None:
        if self.current >= self.first:
            self._drain_file()
        self.current += 1
        self.position, self.left, self.done = 0, None, False

    def _drain_file(self) -> None:
        """Take what is left of the current file's batches, up to its end (its verification included)."""
        while not self.done:
            if self._take() is _END:
                self.done = True

    def _next_batch(self) -> Any:
        item = self._take()
        if item is _END:
            raise Conflict(f"{self.files[self.current][0]} ended before the rows its manifest names",
                           path=self.files[self.current][0])
        return item

    # -- the reader thread ----------------------------------------------------------------------------------------

    def _put(self, item: Any) -> bool:
        """Hand `item` over once there is room: decoded rows are bounded (QUEUE * READ_ROWS), the rest only by
        count (HANDED), so that the ends of many small files, and row groups passed over or to copy, do not make
        the two sides wait for each other item by item (a wait is a POLL sleep: 4,096 winners of 256 KB spent
        seconds so)."""
        rows = _rows(item)
        while (self.put_rows - self.taken_rows and self.put_rows - self.taken_rows + rows > QUEUE * READ_ROWS) \
                or len(self.handed) >= HANDED:
            if self.stop.is_set() or self.lanes_stop.is_set():
                return False
            time.sleep(POLL)
        if self.stop.is_set() or self.lanes_stop.is_set():
            return False
        self.put_rows += rows
        self.handed.append(item)
        return True

    def _reader(self) -> None:
        try:
            for item in self._items():
                if not self._put(item):
                    return
        except BaseException as exc:  # noqa: BLE001 - whatever ends this thread ends the lane, said in order
            self._put(exc)

    def _items(self) -> Generator[Any, None, None]:
        """Every batch of the lane's files, each file's followed by _END; an error in its place, and nothing
        after it."""
        try:
            for index in range(self.first, self.last + 1):
                rel, entry = self.files[index]
                yield from self._batches(index, rel, entry)
                yield _END
        except Exception as exc:  # the writer raises it, in order, where it would have come
            yield exc

    def _batches(self, index: int, rel: str, entry: Record) -> Iterator[Any]:
        """The items of winner file `index`, row group by row group: a `Skip` of one that no piece of this lane
        needs, a `parquet.Span` of one to copy (`collect.parquet`), else its rows decoded, in batches."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        fd = self.run.dir.open_read(rel)
        try:
            sha, size, data = hashlib.sha256(), 0, None
            data = self._buffer(entry["size"])
            if data is not None:
                while size < len(data) and (got := os.readv(fd, [data[size:]])):
                    sha.update(data[size:size + got])
                    size += got
                if size == len(data) and os.read(fd, 1):  # it grew since it was sealed: it cannot match
                    size += 1
            else:  # through one scratch buffer: no allocation per read for the heap to keep
                scratch = self._scratch("hashed")
                while got := os.readv(fd, [scratch]):
                    sha.update(scratch[:got])
                    size += got
            if (size, sha.hexdigest()) != (entry["size"], entry["sha256"]):
                raise Conflict(f"{rel} no longer matches its winner's manifest (size or sha256); refusing to collect",
                               path=rel)
            if data is not None:
                source = pa.BufferReader(pa.py_buffer(data))
            else:  # Arrow's own reads of this very file (the descriptor's, not a path's), READ_CHUNK at a time
                source = pa.OSFile(f"/proc/self/fd/{fd}")
            origin = None
            try:
                # pre_buffer off: pyarrow would otherwise read every column chunk of a row group whole before it
                # decodes a batch of it, so that a reader held the row group (330 MiB for one of 1.5 million rows)
                try:
                    pf = pq.ParquetFile(source, buffer_size=0 if data is not None else READ_CHUNK, pre_buffer=False)
                    meta = pf.metadata
                    sizes = [meta.row_group(n).num_rows for n in range(meta.num_row_groups)]
                except (pa.ArrowException, OSError) as exc:
                    raise Conflict(f"{rel} is not a Parquet file tau can read ({exc})", path=rel) from None
                if meta.num_rows != entry["rows"] or sum(sizes) != meta.num_rows:
                    raise Conflict(f"{rel} has {meta.num_rows} rows, its manifest says {entry['rows']}", path=rel)
                schema = pf.schema_arrow.remove_metadata()
                # tau's own reading of the footer (`collect.parquet`, in Python: 0.22 ms for a file of four
                # columns) only where a row group may be copied, so that many small winners do not pay it
                found = parquet.footer(fd, size, rel) if self.copy and max(sizes, default=0) >= parquet.COPY_ROWS \
                    else None
                if found is not None and not ([g[0] for g in found.groups] == sizes and parquet.fits(found, schema)):
                    found = None  # kept only where its row groups can be copied
                origin = parquet.Source(data) if data is not None else \
                    parquet.Source(None, os.dup(fd) if found is not None else None, self._scratch("copied"))
                needs, start = self.needs.get(index, ()), 0
                for number, rows in enumerate(sizes):
                    stop = start + rows
                    wanted = [(a, b) for a, b in needs if a < stop and start < b]
                    if not wanted:
                        yield Skip(rows)
                    elif found is not None and rows >= parquet.COPY_ROWS \
                            and any(a <= start and stop <= b for a, b in wanted):
                        _, group, ranges = found.groups[number]
                        yield parquet.Span(rows, group, ranges, schema, found, origin.hold())
                    else:
                        yield from pf.iter_batches(batch_size=READ_ROWS, row_groups=[number], use_threads=False)
                    start = stop
            finally:
                source.close()
                if origin is not None:
                    origin.release()
        finally:
            os.close(fd)

    def _scratch(self, use: str) -> memoryview:
        """READ_CHUNK bytes of its own for each `use` (the reader's hashing and the writer's copying may run at
        once), made on first use."""
        if use not in self.scratches:
            self.scratches[use] = memoryview(bytearray(READ_CHUNK))
        return self.scratches[use]

    def _buffer(self, size: int) -> memoryview | None:
        """`size` bytes to read a file of at most `input_buffer` bytes into: one of BUFFERS buffers kept for it that
        nothing refers to any more (no decoded batch, no row group to copy, no reader of it), which spares the
        kernel the page faults of a fresh allocation, grown when it is too small; None when the file is larger, or
        when every kept buffer is still in use (the file is then read through its descriptor, so that a reader
        holds at most BUFFERS files in memory)."""
        if size > self.input_buffer:
            return None
        free = [n for n in range(len(self.buffers)) if sys.getrefcount(self.buffers[n]) <= 2]  # the list's, the call's
        if not free and len(self.buffers) == BUFFERS:
            return None
        if not free:
            self.buffers.append(bytearray(0))
            free = [len(self.buffers) - 1]
        n = max(free, key=lambda k: (len(self.buffers[k]) >= size, -len(self.buffers[k])))  # the smallest that fits
        if len(self.buffers[n]) < size:
            self.buffers[n] = bytearray(0)  # let go first: the old buffer and the new one are never both held here
            grown = max(size, min(self.input_buffer, -(-size // BUFFER_GRAIN) * BUFFER_GRAIN))
            self.buffers[n] = bytearray(grown)  # a next file of about this size fits
        return memoryview(self.buffers[n])[:size]
