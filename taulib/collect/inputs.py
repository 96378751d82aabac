"""Reading a lane's winner files for a collection: each file read once, verified whole, decoded ahead of the writer.

Reads: the winner files `first`..`last` of a collection, in order, through the run's own reader (`RunDir`). A file
of at most INPUT_BUFFER bytes is read into one buffer, hashed as it is read, and decoded from those bytes; a
larger one is hashed in a first pass and decoded in a second. Either way its size, sha256 and Parquet row count are
compared with its manifest before a row of it is used (Conflict otherwise). Writes nothing.
Promises: `Inputs.read(piece)` gives exactly the rows of the piece, in order, in batches of at most READ_ROWS; the
rows of a file before a piece (another lane's) are decoded and passed over, and once the lane needs no more rows
of a file, its reader decodes no more of them (it is still verified). Read in place by the lane's thread, or
(`threaded`) by a reader thread that reads, hashes and decodes while the lane's writer encodes; they hand batches
over through a deque that each side polls (no lock or condition is waited on, so a stop signal can unwind the
writer at any moment and leave nothing half taken).
Memory: one input buffer (reused while no decoded batch refers to it, which spares the kernel the page faults of
a fresh one; a second one while one does) and QUEUE decoded batches at most.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from collections import deque

from taulib import signals
from taulib.errors import Conflict
from taulib.rules import partition

READ_ROWS = 16_384  # rows decoded at a time
INPUT_BUFFER = 64 << 20  # winner files up to this size are read once; larger ones twice (hash, then decode)
BUFFER_GRAIN = 4 << 20  # an input buffer's size is rounded up to this, so that files of about one size share it
READ_CHUNK = 4 << 20
QUEUE = 1  # decoded batches in flight between the reader and the writer
POLL = 0.0005  # seconds a side waits before looking at the hand-over again


class Stopped(Exception):
    """Another lane failed (or the command is stopping): this one leaves off where it is."""


_END = object()  # a file's batches are all queued


class Inputs:
    """The winner files `first`..`last` in collection order, read, verified whole and decoded by a reader thread
    ahead of the writer; `read` takes the rows of one piece of a file, in order (the rows of a file before the
    piece, which another lane writes, are decoded and passed over)."""

    def __init__(self, run, files: list[tuple[str, dict]], first: int, last: int, lanes_stop: threading.Event,
                 threaded: bool = True) -> None:
        self.run, self.files, self.first, self.last = run, files, first, last
        self.lanes_stop = lanes_stop  # set when any lane fails or the collection stops
        self.handed: deque = deque()  # batches, _END markers and the reader's exception, in order
        self.stop = threading.Event()  # this reader's own
        self.thread: threading.Thread | None = None
        self.current = first - 1  # the file whose batches `read` takes now
        self.position = 0  # rows of the current file already taken
        self.left = None  # the rest of a batch a piece ended inside
        self.done = False  # the current file's batches are all taken
        self.rest_unread = -1  # the file whose remaining rows no lane needs: the reader decodes no more of them
        self.kept: bytearray | None = None  # the reader's input buffer, reused while nothing else refers to it
        self.threaded = threaded  # a reader thread of its own, else the lane's thread reads in place
        self.produced = None  # the items read in place

    def read(self, piece: partition.Piece):
        """The rows [start, stop) of input `piece.file`, as record batches."""
        while self.current < piece.file:
            self._next_file()
        assert self.position <= piece.start, "pieces of a file are read in order"
        while self.position < piece.stop:
            batch = self.left if self.left is not None else self._next_batch()
            self.left = None
            skip = min(batch.num_rows, max(0, piece.start - self.position))
            take = min(batch.num_rows - skip, piece.stop - self.position - skip)
            if skip + take < batch.num_rows:
                self.left = batch.slice(skip + take)
            self.position += skip + take
            if take:
                yield batch.slice(skip, take) if skip or take < batch.num_rows else batch

    def finish(self) -> None:
        """Verify the rest of this lane's files: those no partition of it needed rows of (files without rows, or
        the next lane's); the rows of the current file that no piece of this lane takes are not decoded."""
        if self.current >= self.first:
            self.rest_unread = self.current
        while self.current < self.last:
            self._next_file()
            self.rest_unread = self.current
        if self.current >= self.first:
            self._drain_file()

    def close(self) -> None:
        if self.produced is not None:
            self.produced.close()
        self.stop.set()
        if self.thread is not None:
            with signals.deferred():  # it sees `stop` within POLL, or at the end of the read it is in
                self.thread.join()
        self.thread = None
        self.handed.clear()

    # -- the writer's side --------------------------------------------------------------------------------------

    def _take(self):
        if not self.threaded:  # this lane's thread reads too: the next item of the same sequence, in place
            produced = self.produced
            if produced is None:
                produced = self.produced = self._items()
            if self.lanes_stop.is_set():
                raise Stopped()
            item = next(produced)
            if isinstance(item, BaseException):
                raise item
            return item
        if self.thread is None:
            self.thread = threading.Thread(target=self._reader, name="tau-collect-reader", daemon=True)
            self.thread.start()
        while True:
            try:
                item = self.handed.popleft()
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

    def _next_batch(self):
        item = self._take()
        if item is _END:
            raise Conflict(f"{self.files[self.current][0]} ended before the rows its manifest names",
                           path=self.files[self.current][0])
        return item

    # -- the reader thread ----------------------------------------------------------------------------------------

    def _put(self, item) -> bool:
        while len(self.handed) >= QUEUE:
            if self.stop.is_set() or self.lanes_stop.is_set():
                return False
            time.sleep(POLL)
        if self.stop.is_set() or self.lanes_stop.is_set():
            return False
        self.handed.append(item)
        return True

    def _reader(self) -> None:
        try:
            for item in self._items():
                if not self._put(item):
                    return
        except BaseException as exc:  # noqa: BLE001 - whatever ends this thread ends the lane, said in order
            self._put(exc)

    def _items(self):
        """Every batch of the lane's files, each file's followed by _END; an error in its place, and nothing
        after it."""
        try:
            for index in range(self.first, self.last + 1):
                rel, entry = self.files[index]
                for batch in self._batches(rel, entry):
                    if self.rest_unread >= index:  # verified (before its first batch); the rest is unwanted
                        break
                    yield batch
                yield _END
        except Exception as exc:  # the writer raises it, in order, where it would have come
            yield exc

    def _batches(self, rel: str, entry: dict):
        import pyarrow as pa
        import pyarrow.parquet as pq

        fd = self.run.dir.open_read(rel)
        try:
            sha, size, data = hashlib.sha256(), 0, None
            if entry["size"] <= INPUT_BUFFER:
                data = self._buffer(entry["size"])
                while size < len(data) and (got := os.readv(fd, [data[size:]])):
                    sha.update(data[size:size + got])
                    size += got
                if size == len(data) and os.read(fd, 1):  # it grew since it was sealed: it cannot match
                    size += 1
            else:
                while chunk := os.read(fd, READ_CHUNK):
                    sha.update(chunk)
                    size += len(chunk)
            if (size, sha.hexdigest()) != (entry["size"], entry["sha256"]):
                raise Conflict(f"{rel} no longer matches its winner's manifest (size or sha256); refusing to collect",
                               path=rel)
            if data is not None:
                source = pa.BufferReader(pa.py_buffer(data))
            else:
                os.lseek(fd, 0, os.SEEK_SET)
                source = pa.PythonFile(os.fdopen(os.dup(fd), "rb"), mode="r")
            try:
                pf = pq.ParquetFile(source)
                if pf.metadata.num_rows != entry["rows"]:
                    raise Conflict(f"{rel} has {pf.metadata.num_rows} rows, its manifest says {entry['rows']}",
                                   path=rel)
                yield from pf.iter_batches(batch_size=READ_ROWS, use_threads=False)
            finally:
                source.close()
        finally:
            os.close(fd)

    def _buffer(self, size: int) -> memoryview:
        """`size` bytes to read a file into: the buffer the last file was read into when nothing refers to it any
        more (no decoded batch, no reader of it: only `self.kept` and this call's argument do), which spares the
        kernel the page faults of a fresh allocation; else a new one."""
        if self.kept is None or len(self.kept) < size or sys.getrefcount(self.kept) > 2:
            self.kept = None  # let go first: the old buffer and the new one are never both held here
            self.kept = bytearray(-(-size // BUFFER_GRAIN) * BUFFER_GRAIN)  # the next file of about this size fits
        return memoryview(self.kept)[:size]
