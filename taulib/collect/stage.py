"""Step 4 of a collection: the winners' rows streamed, partition by partition, into a private stage folder.

Reads: every winner file, in collection order (shards in planned order, each shard's files in manifest order); each
is hashed whole and its size, sha256 and Parquet row count compared with its manifest before a row of it is used.
Writes: inside the stage only: `part-NNNNN.<format>` files, then `_tau_collection.json` (every output file's path,
size, sha256 and rows) last, each fsynced, then the stage folder.
Promises: the partitions are the pure plan `rules.partition.plan` (every partition but the last has exactly
`rows_per_partition` rows), written in row groups of BATCH_ROWS rows (a partition's last group takes the rest), so
the same winners always give byte-identical files. Memory is bounded by a few batches: rows are read BATCH_ROWS at
a time and written once BATCH_ROWS of them are buffered. Imports pyarrow, so only the collection worker loads it.
"""

from __future__ import annotations

import hashlib
import os

from taulib import jsonio
from taulib.collect.destination import RESULT
from taulib.errors import Conflict
from taulib.fs.tree import Tree
from taulib.rules import partition

BATCH_ROWS = 65_536
SUFFIX = {"parquet": "parquet", "csv": "csv", "jsonl": "jsonl"}


def write(run, plan: dict, winners: list, stage: Tree) -> dict:
    """Write the collection `plan` of `winners` into the empty `stage`; returns its `_tau_collection.json`."""
    inputs = _Inputs(run, [(f"{w.manifest['dataset']}/{entry['path']}", entry)
                           for w in winners for entry in w.manifest["files"]])
    files = []
    try:
        for part in partition.plan(inputs.rows(), plan["rows_per_partition"]):
            out = _Output(stage, partition.file_name(part.index, SUFFIX[plan["format"]]), plan["format"])
            for piece in part.pieces:
                for batch in inputs.read(piece):
                    out.write(batch)
            files.append(out.close(part.rows))
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


class _Inputs:
    """The winner files in collection order, each opened (and verified whole) when its first rows are needed; the
    ones before it, done with, are closed. A file with no rows is verified all the same."""

    def __init__(self, run, files: list[tuple[str, dict]]) -> None:
        self.run, self.files = run, files
        self.opened = -1
        self.batches = None  # iterator over the current file's batches
        self.position = 0  # rows of the current file already taken
        self.left = None  # the rest of a batch a piece ended inside
        self.fh = None

    def rows(self) -> list[int]:
        return [entry["rows"] for _, entry in self.files]

    def read(self, piece: partition.Piece):
        """The rows [start, stop) of input `piece.file`, as record batches."""
        while self.opened < piece.file:
            self._open_next()
        assert self.position == piece.start, "pieces of a file are read in order"
        while self.position < piece.stop:
            batch = self.left if self.left is not None else next(self.batches)
            self.left = None
            take = min(batch.num_rows, piece.stop - self.position)
            if take < batch.num_rows:
                self.left = batch.slice(take)
                batch = batch.slice(0, take)
            self.position += take
            yield batch

    def _open_next(self) -> None:
        import pyarrow.parquet as pq

        self.close()
        self.opened += 1
        rel, entry = self.files[self.opened]
        fh = self.fh = os.fdopen(self.run.dir.open_read(rel), "rb")
        sha = hashlib.sha256()
        size = 0
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
            size += len(chunk)
        if (size, sha.hexdigest()) != (entry["size"], entry["sha256"]):
            raise Conflict(f"{rel} no longer matches its winner's manifest (size or sha256); refusing to collect",
                           path=rel)
        fh.seek(0)
        pf = pq.ParquetFile(fh)
        if pf.metadata.num_rows != entry["rows"]:
            raise Conflict(f"{rel} has {pf.metadata.num_rows} rows, its manifest says {entry['rows']}", path=rel)
        self.batches = pf.iter_batches(batch_size=BATCH_ROWS)
        self.position, self.left = 0, None

    def finish(self) -> None:
        """Verify the files no partition needed rows of (files without rows)."""
        while self.opened < len(self.files) - 1:
            self._open_next()

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = self.batches = None


class _Output:
    """One partition file in one format, opened at its first rows; rows are buffered and written in row groups of
    BATCH_ROWS."""

    def __init__(self, stage: Tree, name: str, fmt: str) -> None:
        self.stage, self.name, self.fmt = stage, name, fmt
        self.fh = None
        self.writer = None
        self.pending: list = []
        self.pending_rows = 0

    def _open(self, schema) -> None:
        self.fh = os.fdopen(self.stage.create(self.name), "wb")
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            self.writer = pq.ParquetWriter(self.fh, schema)
        elif self.fmt == "csv":
            import pyarrow.csv as pacsv

            self.writer = pacsv.CSVWriter(self.fh, schema)

    def write(self, batch) -> None:
        if self.fh is None:
            self._open(batch.schema.remove_metadata())
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
            import orjson

            write = self.fh.write
            for batch in table.to_batches(max_chunksize=8192):
                for row in batch.to_pylist():
                    write(orjson.dumps(row, default=str, option=orjson.OPT_APPEND_NEWLINE))

    def close(self, rows: int) -> dict:
        """Finish the file (fsynced) and describe it: path, size, sha256, rows."""
        self._flush()
        if self.writer is not None:
            self.writer.close()
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        fd = self.stage.open_read(self.name)
        with os.fdopen(fd, "rb") as fh:
            sha = hashlib.sha256()
            size = 0
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                sha.update(chunk)
                size += len(chunk)
        return {"path": self.name, "size": size, "sha256": sha.hexdigest(), "rows": rows}
