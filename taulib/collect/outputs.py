"""Writing one partition file of a collection: rows in, the file's bytes hashed as they are written, fsynced.

Writes: one new private file in the stage (`Tree.create`), through a WRITE_BUFFER-byte buffer; every byte is
hashed as it is written (the file is never read back), and its pages are handed to writeback as it grows and
dropped from the page cache once on disk (`fs.writeback`: the winners stay cached, the final fsync is short).
Reads nothing.
Promises: the bytes are a function of the rows alone. Parquet rows are written in row groups of BATCH_ROWS rows (a
partition's last group takes the rest); CSV and JSON lines, whose bytes do not depend on how rows are grouped, are
written TEXT_ROWS rows at a time (less held in memory). Encoder settings that fix those bytes and are documented in
tau-run(5): Parquet with snappy compression, and dictionary encoding only for the string and binary columns whose
values, in a partition's first row group, repeat (at most DICTIONARY_SHARE of them distinct): it pays for repeated
labels and costs time and space on all-unique text; CSV as pyarrow writes it with a header; JSON lines one object
per row, keys in schema order, as orjson writes it (built column by column, JSON_ROWS rows at a time:
`collect.jsonl`). Memory: one row group of rows (Parquet) or TEXT_ROWS rows, its encoding, and the write
buffer. Imports pyarrow.
"""

from __future__ import annotations

import hashlib
import os

from taulib.fs import writeback
from taulib.fs.tree import Tree

BATCH_ROWS = 65_536  # rows of an output row group (Parquet)
TEXT_ROWS = 16_384  # rows held before they are written as CSV or JSON lines (any grouping gives the same bytes)
SUFFIX = {"parquet": "parquet", "csv": "csv", "jsonl": "jsonl"}
WRITE_BUFFER = 1 << 20
JSON_ROWS = 8192  # rows converted to JSON lines at a time: small enough to stay in the processor's caches
DICTIONARY_SHARE = 0.5


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

    def write(self, data) -> int:
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
    """One partition file in one format, opened at its first rows; rows are buffered and written in row groups of
    BATCH_ROWS (Parquet), or TEXT_ROWS at a time (CSV, JSON lines)."""

    def __init__(self, stage: Tree, name: str, fmt: str) -> None:
        self.stage, self.name, self.fmt = stage, name, fmt
        self.sink: Sink | None = None
        self.writer = None
        self.pending: list = []
        self.pending_rows = 0
        self.hold = BATCH_ROWS if fmt == "parquet" else TEXT_ROWS  # rows buffered before they are written

    def size(self) -> int:
        return self.sink.size if self.sink is not None else 0

    def _open(self, batch) -> None:
        self.sink = Sink(self.stage.create(self.name))
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
        if self.pending_rows >= self.hold:
            self._flush()

    def _flush(self) -> None:
        """Write the buffered rows: in Parquet, row groups of exactly BATCH_ROWS (the partition's last group takes the
        rest)."""
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
