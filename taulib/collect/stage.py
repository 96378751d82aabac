"""Step 4 of a collection: the winners' rows streamed, partition by partition, into a private stage folder.

Reads: every winner file, once, in collection order (shards in planned order, each shard's files in manifest order).
A file of at most INPUT_BUFFER bytes is read into memory, hashed as it is read, and decoded from those bytes; a
larger one is hashed in a first pass and decoded in a second. Either way its size, sha256 and Parquet row count are
compared with its manifest before a row of it is used.
Writes: inside the stage only: `part-NNNNN.<format>` files, hashed as they are written (never read back), through a
WRITE_BUFFER-byte buffer, then `_tau_collection.json` (every output file's path, size, sha256 and rows) last, each
fsynced, then the stage folder.
Promises: the partitions are the pure plan `rules.partition.plan` (every partition but the last has exactly
`rows_per_partition` rows), written in row groups of BATCH_ROWS rows (a partition's last group takes the rest), so
the same winners always give byte-identical files. The encoder settings fix those bytes and are documented in
tau-run(5): Parquet with snappy compression, and dictionary encoding only for the string and binary columns whose
values, in a partition's first row group, repeat (at most DICTIONARY_SHARE of them distinct): it pays for repeated
labels and costs time and space on all-unique text; CSV as pyarrow writes it with a header; JSON lines one object
per row, keys in schema order, as orjson writes it (built column by column: `taulib.collect.jsonl`). Memory is
bounded by design, whatever the input size: one input buffer, at most QUEUE decoded batches between the reader
thread and the writer, and one row group being encoded.
The reader thread (read, hash, decode) and the writer (encode, hash, write) overlap on two cores; pyarrow,
hashlib and the reads release the interpreter lock. They hand batches over through a deque that each side polls
(no lock or condition is waited on, so a stop signal can unwind the writer at any moment and leave nothing half
taken). Imports pyarrow, so only the collection worker loads it.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import deque

from taulib import jsonio
from taulib.collect.destination import RESULT
from taulib.errors import Conflict
from taulib.fs.tree import Tree
from taulib.rules import partition

BATCH_ROWS = 65_536
SUFFIX = {"parquet": "parquet", "csv": "csv", "jsonl": "jsonl"}
INPUT_BUFFER = 64 << 20  # winner files up to this size are read once; larger ones twice (hash, then decode)
WRITE_BUFFER = 8 << 20
QUEUE = 2  # decoded batches in flight between the reader and the writer
POLL = 0.0005  # seconds a side waits before looking at the hand-over again
JSON_ROWS = 8192  # rows converted to JSON lines at a time: small enough to stay in the processor's caches
DICTIONARY_SHARE = 0.5
READ_CHUNK = 4 << 20


def write(run, plan: dict, winners: list, stage: Tree, meter=None) -> dict:
    """Write the collection `plan` of `winners` into the empty `stage`; returns its `_tau_collection.json`.
    `meter` (a `taulib.progress.Meter`, or None) is told the rows and the bytes written as they are."""
    inputs = _Inputs(run, [(f"{w.manifest['dataset']}/{entry['path']}", entry)
                           for w in winners for entry in w.manifest["files"]])
    files = []
    try:
        for part in partition.plan(inputs.rows(), plan["rows_per_partition"]):
            out = _Output(stage, partition.file_name(part.index, SUFFIX[plan["format"]]), plan["format"])
            told = 0  # bytes of this file the meter was told of
            for piece in part.pieces:
                for batch in inputs.read(piece):
                    out.write(batch)
                    if meter is not None:
                        written = out.size()
                        meter.add(batch.num_rows, written - told)
                        told = written
            files.append(out.close(part.rows))
            if meter is not None:
                meter.add(0, files[-1]["size"] - told)
        inputs.finish()
    finally:
        inputs.close()
    total = sum(f["rows"] for f in files)
    if total != plan["records"]:
        raise Conflict(f"collected {total} rows; the plan asks for {plan['records']}")
    result = {"kind": "tau.collection-result", "schema_version": 1, "run_id": plan["run_id"],
              "collection_id": plan["collection_id"], "plan_sha256": jsonio.digest(plan),
              "completed_at": jsonio.now_rfc3339(), "format": plan["format"], "records": total, "files": files}
    stage.write_new(RESULT, jsonio.canonical(result))
    os.fsync(stage.fd)
    return result


_END = object()  # a file's batches are all queued


class _Inputs:
    """The winner files in collection order, read, verified whole and decoded by a reader thread ahead of the
    writer; `read` takes the rows of one piece of a file, in order."""

    def __init__(self, run, files: list[tuple[str, dict]]) -> None:
        self.run, self.files = run, files
        self.handed: deque = deque()  # batches, _END markers and the reader's exception, in order
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.current = -1  # the file whose batches `read` takes now
        self.position = 0  # rows of the current file already taken
        self.left = None  # the rest of a batch a piece ended inside
        self.done = False  # the current file's batches are all taken

    def rows(self) -> list[int]:
        return [entry["rows"] for _, entry in self.files]

    def read(self, piece: partition.Piece):
        """The rows [start, stop) of input `piece.file`, as record batches."""
        while self.current < piece.file:
            self._next_file()
        assert self.position == piece.start, "pieces of a file are read in order"
        while self.position < piece.stop:
            batch = self.left if self.left is not None else self._next_batch()
            self.left = None
            take = min(batch.num_rows, piece.stop - self.position)
            if take < batch.num_rows:
                self.left = batch.slice(take)
                batch = batch.slice(0, take)
            self.position += take
            yield batch

    def finish(self) -> None:
        """Verify the files no partition needed rows of (files without rows)."""
        while self.current < len(self.files) - 1:
            self._next_file()
        if self.current >= 0:
            self._drain_file()

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            from taulib import signals

            with signals.deferred():  # it sees `stop` within POLL, or at the end of the read it is in
                self.thread.join()
        self.thread = None
        self.handed.clear()

    # -- the writer's side --------------------------------------------------------------------------------------

    def _take(self):
        if self.thread is None:
            self.thread = threading.Thread(target=self._reader, name="tau-collect-reader", daemon=True)
            self.thread.start()
        while True:
            try:
                item = self.handed.popleft()
                break
            except IndexError:
                time.sleep(POLL)
        if isinstance(item, BaseException):
            raise item
        return item

    def _next_file(self) -> None:
        if self.current >= 0:
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
            if self.stop.is_set():
                return False
            time.sleep(POLL)
        if self.stop.is_set():
            return False
        self.handed.append(item)
        return True

    def _reader(self) -> None:
        try:
            for rel, entry in self.files:
                for batch in self._batches(rel, entry):
                    if not self._put(batch):
                        return
                if not self._put(_END):
                    return
        except BaseException as exc:  # the writer raises it, in order, where it would have come
            self._put(exc)

    def _batches(self, rel: str, entry: dict):
        import pyarrow as pa
        import pyarrow.parquet as pq

        fd = self.run.dir.open_read(rel)
        try:
            sha, size, data = hashlib.sha256(), 0, None
            if entry["size"] <= INPUT_BUFFER:
                chunks = []
                while chunk := os.read(fd, READ_CHUNK):
                    sha.update(chunk)
                    size += len(chunk)
                    if size > INPUT_BUFFER:  # it grew since it was sealed: it cannot match
                        break
                    chunks.append(chunk)
                data = b"".join(chunks)
            else:
                while chunk := os.read(fd, READ_CHUNK):
                    sha.update(chunk)
                    size += len(chunk)
            if (size, sha.hexdigest()) != (entry["size"], entry["sha256"]):
                raise Conflict(f"{rel} no longer matches its winner's manifest (size or sha256); refusing to collect",
                               path=rel)
            if data is not None:
                source = pa.BufferReader(data)
            else:
                os.lseek(fd, 0, os.SEEK_SET)
                source = pa.PythonFile(os.fdopen(os.dup(fd), "rb"), mode="r")
            try:
                pf = pq.ParquetFile(source)
                if pf.metadata.num_rows != entry["rows"]:
                    raise Conflict(f"{rel} has {pf.metadata.num_rows} rows, its manifest says {entry['rows']}",
                                   path=rel)
                yield from pf.iter_batches(batch_size=BATCH_ROWS)
            finally:
                source.close()
        finally:
            os.close(fd)


class _Sink:
    """A partition file being written: every byte hashed as it is written, through a large buffer."""

    def __init__(self, fd: int) -> None:
        import io

        self.raw = io.FileIO(fd, "wb", closefd=True)
        self.fh = io.BufferedWriter(self.raw, buffer_size=WRITE_BUFFER)
        self.sha = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        view = memoryview(data)
        self.sha.update(view)
        self.size += view.nbytes
        return self.fh.write(view)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.fh.flush()

    def writable(self) -> bool:
        return True

    def finish(self) -> None:
        """Flush, fsync and close the file."""
        self.fh.flush()
        os.fsync(self.raw.fileno())
        self.fh.close()
        self.closed = True


class _Output:
    """One partition file in one format, opened at its first rows; rows are buffered and written in row groups of
    BATCH_ROWS."""

    def __init__(self, stage: Tree, name: str, fmt: str) -> None:
        self.stage, self.name, self.fmt = stage, name, fmt
        self.sink: _Sink | None = None
        self.writer = None
        self.pending: list = []
        self.pending_rows = 0

    def size(self) -> int:
        return self.sink.size if self.sink is not None else 0

    def _open(self, batch) -> None:
        self.sink = _Sink(self.stage.create(self.name))
        schema = batch.schema.remove_metadata()
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            self.writer = pq.ParquetWriter(self.sink, schema, compression="snappy",
                                           use_dictionary=dictionary_columns(batch))
        elif self.fmt == "csv":
            import pyarrow.csv as pacsv

            self.writer = pacsv.CSVWriter(self.sink, schema)

    def write(self, batch) -> None:
        if self.sink is None:
            self._open(batch)
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        if self.pending_rows >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        """Write the buffered rows in row groups of exactly BATCH_ROWS (the partition's last group takes the rest)."""
        if not self.pending:
            return
        import pyarrow as pa

        table = pa.Table.from_batches(self.pending).replace_schema_metadata(None)
        self.pending, self.pending_rows = [], 0
        if self.fmt == "parquet":
            self.writer.write_table(table, row_group_size=BATCH_ROWS)
        elif self.fmt == "csv":
            self.writer.write_table(table)
        else:
            from taulib.collect import jsonl

            for batch in table.to_batches(max_chunksize=JSON_ROWS):
                self.sink.write(jsonl.lines(batch))

    def close(self, rows: int) -> dict:
        """Finish the file (fsynced) and describe it: path, size, sha256, rows."""
        self._flush()
        if self.writer is not None:
            self.writer.close()
        self.sink.finish()
        return {"path": self.name, "size": self.sink.size, "sha256": self.sink.sha.hexdigest(), "rows": rows}


def dictionary_columns(batch) -> list[str]:
    """The string and binary columns dictionary-encoded: those whose values in this first batch repeat (at most
    DICTIONARY_SHARE of them distinct). A function of the rows only, so the same winners give the same bytes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chosen = []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        kind = field.type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
                or pa.types.is_large_binary(kind) or pa.types.is_dictionary(kind)):
            continue
        if pa.types.is_dictionary(kind) or len(column) == 0 \
                or pc.count_distinct(column, mode="all").as_py() <= DICTIONARY_SHARE * len(column):
            chosen.append(field.name)
    return chosen
