"""The input columns an output keeps (`output.keep_input`): joined, row for row, into the client's Parquet files at
the end of its attempt, before tau describes them (tau-run(5) "Input").

Reads: the attempt's input file (its sha256 checked against the one the cut wrote: the client may not change it),
the client's Parquet files in name order (the order a collection reads them). Writes: each client file replaced
(through the run's writer: a new file beside it, fsynced, renamed over it) by one with the kept columns first, of the
types the run's index records, then the client's columns, row group by row group as the client wrote them.
Promises: the client's rows are the input slice's, in order: a client that wrote another number of rows, or a
column of a kept name, fails its attempt saying so, and nothing is joined. Memory: one row group of a client's
file and its kept rows.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING, Any

from taulib.inputs import cut
from taulib.rundir import layout

if TYPE_CHECKING:
    from collections.abc import Iterator

    from taulib.jsonio import Record
    from taulib.rundir.run import Run

BATCH = 8192  # kept rows read at a time from a text input file
JOINING = ".joining"  # the suffix of a joined file before it replaces the client's


def join(run: Run, attempt: Record, input_sha256: str, rows: int) -> str | None:
    """Join the kept columns into the attempt's candidate files (see the module docstring): why it could not (the
    attempt then fails), or None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    index = run.input_index()
    assert index is not None and index["keep"], "only a run that keeps input columns joins them"
    dataset = attempt["dataset"]
    names = [name for name, kind in run.dir.scan(dataset) if kind == "file" and name.endswith(".parquet")]
    if not names:
        return None  # nothing written: the attempt's end says so
    sid, aid = attempt["shard_id"], attempt["attempt_id"]
    source_rel = layout.attempt_file(sid, aid, cut.file_name(index["format"]))
    fd = run.dir.open_read(source_rel)
    opened: list[int] = []
    try:
        sha = hashlib.sha256()
        while chunk := os.read(fd, 4 << 20):
            sha.update(chunk)
        if sha.hexdigest() != input_sha256:
            return (f"the attempt's input file {cut.file_name(index['format'])} changed while its client ran; it is "
                    "tau's, for the client to read, never to write")
        files = []
        for name in names:
            opened.append(run.dir.open_read(f"{dataset}/{name}"))
            files.append((name, pq.ParquetFile(f"/proc/self/fd/{opened[-1]}", pre_buffer=False)))
        written = sum(pf.metadata.num_rows for _, pf in files)
        if written != rows:
            return (f"the client wrote {written} rows for the {rows} rows of its input slice; output.keep_input joins "
                    "the input's columns to its rows, row for row, so it writes one row per input row, in order")
        kept = [f["name"] for f in index["keep"]]
        for name, pf in files:
            clash = [c for c in pf.schema_arrow.names if c in kept]
            if clash:
                return (f"the client wrote a column {clash[0]!r} (in {name}), which output.keep_input adds from the "
                        "input; rename it")
        if index["format"] == "parquet":  # the input's own types, whatever they are (nested, timestamps, ...)
            own = pq.read_schema(f"/proc/self/fd/{fd}")
            schema = pa.schema([own.field(name) for name in kept])
        else:
            from taulib.inputs.text import arrow_type

            schema = pa.schema([pa.field(f["name"], arrow_type(f["type"])) for f in index["keep"]])
        taker = _Taker(_kept(index, fd, schema))
        for name, pf in files:
            _join_file(run, f"{dataset}/{name}", pf, taker, schema)
        run.dir.sync_folder(dataset)
    finally:
        for each in [fd, *opened]:
            os.close(each)
    return None


def _join_file(run: Run, rel: str, pf: Any, taker: _Taker, schema: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from taulib.collect.outputs import Sink

    temp = rel + JOINING
    run.dir.remove_file(temp)
    sink = Sink(run.dir.create(temp))
    writer = None
    try:
        for group in range(pf.metadata.num_row_groups):
            table = pf.read_row_group(group, use_threads=False)
            kept = taker.take(table.num_rows)
            joined = pa.Table.from_arrays([*kept.columns, *table.columns],
                                          schema=pa.schema([*schema, *table.schema.remove_metadata()]))
            if writer is None:
                writer = pq.ParquetWriter(sink, joined.schema)
            writer.write_table(joined, row_group_size=max(1, joined.num_rows))
        if writer is None:
            writer = pq.ParquetWriter(sink, pa.schema([*schema, *pf.schema_arrow.remove_metadata()]))
        writer.close()
        writer = None
        sink.finish()
    finally:
        if writer is not None:
            writer.close()
        if not sink.closed:
            sink.fh.close()
    run.dir.rename_file(temp, os.path.basename(rel))


class _Taker:
    """Exactly n kept rows at a time from a stream of batches."""

    def __init__(self, batches: Iterator[Any]) -> None:
        self.batches, self.left = batches, None

    def take(self, n: int) -> Any:
        import pyarrow as pa

        parts, have = [], 0
        while have < n:
            batch = self.left if self.left is not None else next(self.batches)
            self.left = None
            use = min(n - have, batch.num_rows)
            if use < batch.num_rows:
                self.left = batch.slice(use)
            parts.append(batch.slice(0, use))
            have += use
        return pa.Table.from_batches(parts) if parts else None


def _kept(index: Record, fd: int, schema: Any) -> Iterator[Any]:
    """The kept columns of the attempt's input file (open as `fd`), in batches of `schema`."""
    import pyarrow as pa

    os.lseek(fd, 0, os.SEEK_SET)
    if index["format"] == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(f"/proc/self/fd/{fd}", pre_buffer=False)  # a batch at a time, not a row group
        for batch in pf.iter_batches(batch_size=BATCH, columns=schema.names, use_threads=False):
            yield pa.RecordBatch.from_arrays([batch.column(n) for n in schema.names], schema=schema)
        return
    names = schema.names
    with os.fdopen(os.dup(fd), "rb") as fh:
        rows = _csv_rows(fh, index, names) if index["format"] == "csv" else _json_rows(fh, names)
        values: list[list[Any]] = [[] for _ in names]
        for row in rows:
            for column, value in zip(values, row, strict=True):
                column.append(value)
            if len(values[0]) >= BATCH:
                yield _batch(values, schema)
                values = [[] for _ in names]
        if values[0]:
            yield _batch(values, schema)


def _batch(values: list[list[Any]], schema: Any) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([pa.array(v, f.type) for v, f in zip(values, schema, strict=True)],
                                      schema=schema)


def _json_rows(fh: Any, names: list[str]) -> Iterator[list[Any]]:
    import orjson

    for line in fh:
        record = orjson.loads(line)
        yield [record.get(name) for name in names]


def _csv_rows(fh: Any, index: Record, names: list[str]) -> Iterator[list[Any]]:
    import csv
    import io
    import sys

    csv.field_size_limit(sys.maxsize)
    reader = csv.reader(io.TextIOWrapper(fh, encoding="utf-8-sig", newline=""))
    header = next(reader)
    where = [header.index(name) for name in names]
    for row in reader:
        yield [row[k] for k in where]
