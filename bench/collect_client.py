#!/usr/bin/env python3
"""The client of bench/collect.py's run: deterministic rows of id, a 200-character text, score and shard for one
shard's record range, written as one Parquet file. The text is base64 of 150 pseudo-random bytes (SHAKE-256 of the
id), so it barely compresses: the winners' size is what the benchmark says it is.

Record i is a function of i only: the same winners on every run and machine. An argument, if given, is the rows of
a row group (0: the whole shard in one row group; absent: pyarrow's default, 1,048,576). The rows are made
CHUNK at a time, so the client holds the shard's Arrow columns and one chunk's Python values, not every row's.
"""

import base64
import hashlib
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema([("id", pa.int64()), ("text", pa.string()), ("score", pa.float64()), ("shard", pa.string())])
CHUNK = 262_144


def rows(start: int, end: int, shard: str) -> pa.RecordBatch:
    ids = range(start, end)
    mixed = [(i * 2654435761) % (1 << 32) for i in ids]  # a multiplicative hash: deterministic, well spread
    text = [base64.b64encode(hashlib.shake_256(b"tau-bench:%d" % i).digest(150)).decode() for i in ids]
    return pa.record_batch([pa.array(ids, pa.int64()), pa.array(text, pa.string()),
                            pa.array([(m % 1_000_000) / 1000.0 for m in mixed], pa.float64()),
                            pa.array([shard] * len(ids), pa.string())], schema=SCHEMA)


def main() -> int:
    start, end = int(os.environ["TAU_RECORD_START"]), int(os.environ["TAU_RECORD_END"])
    shard = os.environ["TAU_SHARD_ID"]
    table = pa.Table.from_batches([rows(s, min(s + CHUNK, end), shard) for s in range(start, end, CHUNK)],
                                  schema=SCHEMA)
    group = int(sys.argv[1]) if len(sys.argv) > 1 else None
    if group == 0:  # one row group, however many rows
        group = max(1, end - start)
    pq.write_table(table, os.path.join(os.environ["TAU_OUTPUT_DIR"], "part-00000.parquet"), row_group_size=group)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
