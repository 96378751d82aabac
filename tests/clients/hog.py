#!/usr/bin/env python3
"""A test client that holds memory: `hog.py MIB [SECONDS]` touches MIB mebibytes, holds them SECONDS (default 3)
seconds, lets them go, then writes one Parquet file of its records. With HOG_SHARD=ID only that shard holds
memory; every other shard sleeps 10 s in almost none."""

import os
import sys
import time


def main() -> int:
    mib, seconds = int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    if os.environ.get("HOG_SHARD", os.environ["TAU_SHARD_ID"]) != os.environ["TAU_SHARD_ID"]:
        time.sleep(10)
    else:
        held = bytearray(mib << 20)
        for i in range(0, len(held), 4096):
            held[i] = 1
        time.sleep(seconds)
        del held
    import pyarrow as pa
    import pyarrow.parquet as pq

    start, end = int(os.environ["TAU_RECORD_START"]), int(os.environ["TAU_RECORD_END"])
    pq.write_table(pa.table({"id": pa.array(range(start, end), pa.int64())}),
                   os.path.join(os.environ["TAU_OUTPUT_DIR"], "part-00000.parquet"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
