#!/usr/bin/env python3
"""A test client for tau that reports what it was given, then, unless told otherwise, writes one Parquet file of its
records.

  --report DIR      write its environment, working folder and argv[0], as JSON, to DIR/env-SHARD-ATTEMPT.json
                    (DIR relative to its working folder)
  --fail            always exit 3 (after writing what it was given), with a line on stderr
  --sleep S         sleep S seconds first (a live attempt to watch, cancel or follow)
  --progress        write the records done into TAU_PROGRESS_FILE before sleeping
  --float SHARD_ID  write the column `score` as float32 for that shard (double otherwise): schema drift
  --say TEXT        print TEXT on stdout before anything else
"""

import argparse
import json
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--float", dest="float_for", default=None)
    parser.add_argument("--say", default=None)
    parser.add_argument("--report", default=None)
    args = parser.parse_args()
    shard, attempt = os.environ["TAU_SHARD_ID"], os.environ["TAU_ATTEMPT_ID"]
    if args.say:
        print(args.say, flush=True)
    if args.report:
        with open(os.path.join(args.report, f"env-{shard}-{attempt}.json"), "w") as fh:
            json.dump({"env": dict(os.environ), "cwd": os.getcwd(), "argv0": sys.argv[0]}, fh)
    start, end = int(os.environ["TAU_RECORD_START"]), int(os.environ["TAU_RECORD_END"])
    if args.progress:
        with open(os.environ["TAU_PROGRESS_FILE"], "w") as fh:
            fh.write(str((end - start) // 2))
    if args.sleep:
        time.sleep(args.sleep)
    if args.fail:
        print(f"probe: failing {shard} {attempt}, as asked", file=sys.stderr)
        return 3
    import pyarrow as pa
    import pyarrow.parquet as pq

    score = pa.float32() if shard == args.float_for else pa.float64()
    table = pa.table({"id": pa.array(range(start, end), pa.int64()),
                      "score": pa.array([i / 10 for i in range(start, end)], score)})
    pq.write_table(table, os.path.join(os.environ["TAU_OUTPUT_DIR"], "part-00000.parquet"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
