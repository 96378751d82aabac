#!/usr/bin/env python3
"""A demo client for tau: deterministic synthetic records for one shard's record range, written as Parquet.

tau runs it inside each allocation with TAU_RECORD_START, TAU_RECORD_END, TAU_OUTPUT_DIR, TAU_SHARD_ID and
TAU_ATTEMPT_ORDINAL set. Record i is the same on every run and machine (a function of i only), so a collected
dataset is byte-for-byte reproducible.

  --fail-first SHARD_ID   exit 3 on that shard's first attempt (repeatable), to show a failure and its retry
  --hang-first SHARD_ID   on that shard's first attempt (repeatable), report half its records done in
                          TAU_PROGRESS_FILE, then hang for ever: a stalled client, to stop and retry
  --rows-per-file N       split the shard's output into files of N rows (default 1000)
  --sleep S               sleep S seconds before writing (to watch a run in progress)
  --wait-for FILE         wait until FILE exists before writing (the attempts stay live until something lets
                          them go: a person, or a test that must see them running)
"""

import argparse
import hashlib
import os
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq

CATEGORIES = ["alpha", "beta", "gamma", "delta", "epsilon"]
WORDS = ["tau", "shard", "record", "winner", "attempt", "retry", "collect", "bundle", "slurm", "observe"]


def record(i: int) -> dict:
    h = hashlib.sha256(f"tau-demo:{i}".encode()).digest()
    n = int.from_bytes(h[:8], "big")
    words = [WORDS[b % len(WORDS)] for b in h[8:14]]
    return {"id": i, "category": CATEGORIES[n % len(CATEGORIES)], "value": (n % 1_000_000) / 1000.0,
            "text": " ".join(words)}


SCHEMA = pa.schema([("id", pa.int64()), ("category", pa.string()), ("value", pa.float64()), ("text", pa.string())])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fail-first", action="append", default=[], metavar="SHARD_ID")
    parser.add_argument("--hang-first", action="append", default=[], metavar="SHARD_ID")
    parser.add_argument("--rows-per-file", type=int, default=1000)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--wait-for", default=None, metavar="FILE")
    args = parser.parse_args()
    start, end = int(os.environ["TAU_RECORD_START"]), int(os.environ["TAU_RECORD_END"])
    out = os.environ["TAU_OUTPUT_DIR"]
    shard, ordinal = os.environ["TAU_SHARD_ID"], int(os.environ["TAU_ATTEMPT_ORDINAL"])
    if args.sleep:
        time.sleep(args.sleep)
    while args.wait_for and not os.path.exists(args.wait_for):
        time.sleep(0.05)
    if shard in args.hang_first and ordinal == 1:
        with open(os.environ["TAU_PROGRESS_FILE"], "w") as fh:
            fh.write(str((end - start) // 2))
        while True:
            time.sleep(3600)
    if shard in args.fail_first and ordinal == 1:
        print(f"demo client: failing {shard} on its first attempt, as asked", file=sys.stderr)
        return 3
    for n, lo in enumerate(range(start, end, args.rows_per_file)):
        hi = min(lo + args.rows_per_file, end)
        rows = [record(i) for i in range(lo, hi)]
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        pq.write_table(table, os.path.join(out, f"part-{n:05d}.parquet"))
    print(f"demo client: wrote records {start}..{end - 1} of {shard}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
