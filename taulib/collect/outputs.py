"""Writing one partition file of a collection: rows in, the file's bytes hashed as they are written, fsynced.

Writes: one new private file in the stage (`Tree.create`), through a WRITE_BUFFER-byte buffer; every byte is
hashed as it is written (the file is never read back), and its pages are handed to writeback as it grows and
dropped from the page cache once on disk (`fs.writeback`: the winners stay cached, the final fsync is short).
Reads nothing.
Promises: the bytes are fixed by the encoder and the contract of the partition's format in the one format table
(`collect.formats`: the text formats' bytes by the rows alone, written TEXT_ROWS rows at a time, whose grouping
does not change them; Parquet's by the winners' row groups it copies (`collect.parquet.Span`) and the rows it
encodes). Memory: the rows a format holds before a write (a Parquet row group, or TEXT_ROWS rows), their encoding,
and the write buffer. Imports pyarrow.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING, Any

from taulib.collect import formats, parquet
from taulib.errors import Internal
from taulib.fs import writeback
from taulib.fs.tree import Tree

if TYPE_CHECKING:
    from taulib.jsonio import Record

WRITE_BUFFER = 1 << 20


class Sink:
    """A partition file being written: every byte hashed as it is written, through a large buffer."""

    def __init__(self, fd: int) -> None:
        import io

        self.raw = io.FileIO(fd, "wb", closefd=True)
        self.fh = io.BufferedWriter(self.raw, buffer_size=WRITE_BUFFER)
        self.sha = hashlib.sha256()
        self.size = 0
        self.closed = False
        self.behind = writeback.Behind(fd)

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.sha.update(view)
        self.size += view.nbytes
        written = self.fh.write(view)
        self.behind.wrote(self.size - WRITE_BUFFER)  # what the buffer may still hold is not in the file yet
        return written

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


class Output:
    """One partition file in one format (`collect.formats`), opened at its first rows; rows are buffered and written
    `rows_held` at a time (a Parquet row group, or TEXT_ROWS rows of a text format)."""

    def __init__(self, stage: Tree, name: str, fmt: str) -> None:
        self.stage, self.name, self.format = stage, name, formats.get(fmt)
        self.sink: Sink | None = None
        self.writer: formats.Writer | None = None
        self.pending: list[Any] = []
        self.pending_rows = 0
        self.hold = self.format.rows_held  # rows buffered before they are written

    def size(self) -> int:
        return self.sink.size if self.sink is not None else 0

    def write(self, batch: Any) -> None:
        """Write a record batch of rows, or copy a winner's row group (a `collect.parquet.Span`, which only a
        Parquet collection's reader gives)."""
        if self.sink is None:
            self.sink = Sink(self.stage.create(self.name))
            self.writer = self.format.open(self.sink, batch.schema.remove_metadata())
        if isinstance(batch, parquet.Span):  # a row group copied as it is, after the rows before it
            self._flush()
            writer = self._opened()[1]
            assert isinstance(writer, parquet.Writer)
            writer.copy(batch)
            return
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        if self.pending_rows >= self.hold:
            self._flush()

    def _flush(self) -> None:
        """Write the buffered rows (Parquet's writer makes row groups of exactly `parquet.ROWS` of them)."""
        if not self.pending:
            return
        import pyarrow as pa

        table = pa.Table.from_batches(self.pending).replace_schema_metadata(None)
        self.pending, self.pending_rows = [], 0
        self._opened()[1].write(table)

    def close(self, rows: int) -> Record:
        """Finish the file (fsynced) and describe it: path, size, sha256, rows."""
        self._flush()
        sink, writer = self._opened()
        writer.close()
        sink.finish()
        return {"path": self.name, "size": sink.size, "sha256": sink.sha.hexdigest(), "rows": rows}

    def _opened(self) -> tuple[Sink, formats.Writer]:
        if self.sink is None or self.writer is None:  # a partition always has rows: its first opened it
            raise Internal(f"partition file {self.name} was closed without rows")
        return self.sink, self.writer

