"""Collection scale-out benchmark: `tau-collect --tasks N --wait` on the real Slurm test cluster, against
`--tasks 1` of the same winners measured in the same run.

Needs the test cluster (`make slurm-up`, as root), so `bench/run.py` does not run it: `make bench-collect-tasks`, or
`.venv/bin/python bench/collect_tasks.py`. Exits 2, saying how to start the cluster, when `sinfo` does not answer.

1. Builds a run under the slurm profile with tau's own commands (tau-init, tau-submit, observe | reconcile until
   every shard has its winner): shards of bench/collect_client.py's rows (~32 MB of Parquet each), to
   BENCH_COLLECT_MB in all (default 2048), partition debug, one CPU per task. Built once in BENCH_DIR (default: the
   system's temporary folder) and reused while its size matches.
2. Over BENCH_ROUNDS interleaved rounds (default 3), for each N of BENCH_TASKS (default 1,2): the winner files read
   through once (a warm page cache for every case alike), then `tau-collect RUN --destination D --tasks N
   --rows-per-partition R --wait` timed whole (submission, the array's tasks of one CPU each, the publication, and
   --wait's one-second polling), D removed after. R (BENCH_ROWS, default 500,000) gives enough partitions for every
   N.
3. Prints each N's median wall time and MB/s, and the speed-up of N tasks over one (the baseline): time(--tasks 1) /
   time(--tasks N), then one JSON line.
The cluster has 2 CPUs: `--tasks 2` is the most it can show.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from collect import build, shape, tau, warm  # bench/collect.py: the same run, built the same way

MB = int(os.environ.get("BENCH_COLLECT_MB", "2048"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
TASKS = [int(n) for n in os.environ.get("BENCH_TASKS", "1,2").split(",") if n.strip()]
ROWS = int(os.environ.get("BENCH_ROWS", "500000"))


SLURM = {"profile": "slurm", "slurm": {"partition": "debug", "time": "30:00", "cpus_per_task": 1, "mem": "2G"}}


def main() -> int:
    if subprocess.run(["sinfo"], capture_output=True).returncode != 0:
        print("the Slurm test cluster does not answer: start it with `make slurm-up` (as root)", file=sys.stderr)
        return 2
    base = Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir()) / "tau-bench-collect"
    run_dir, files = build(base, *shape(MB), scheduler=SLURM, prefix="slurm-run")
    size = sum(os.path.getsize(f) for f in files)
    times: dict[int, list[float]] = {n: [] for n in TASKS}
    for _ in range(ROUNDS):
        for n in TASKS:
            out = base / "tasks-out"
            shutil.rmtree(out, ignore_errors=True)
            warm(files)
            start = time.perf_counter()
            result = tau("tau-collect", str(run_dir), "--destination", str(out), "--tasks", str(n),
                         "--rows-per-partition", str(ROWS), "--wait")
            times[n].append(time.perf_counter() - start)
            if result["state"] != "succeeded" or result["tasks"] != n:
                raise SystemExit(f"tau-collect --tasks {n} did not collect in {n} tasks: {result}")
            shutil.rmtree(out, ignore_errors=True)
    one = statistics.median(times[TASKS[0]])
    print(f"collection scale-out on Slurm: {len(files)} winner files, {size / 1e9:.2f} GB, {ROUNDS} rounds")
    print(f"{'tasks':>5} {'median s':>9} {'MB/s':>8} {'speed-up':>9}")
    results = {}
    for n in TASKS:
        median = statistics.median(times[n])
        results[n] = {"seconds": round(median, 2), "mb_per_s": round(size / 1e6 / median, 1),
                      "speedup": round(one / median, 2)}
        print(f"{n:>5} {median:9.2f} {size / 1e6 / median:8.1f} {one / median:8.2f}x")
    print(json.dumps({"benchmark": "collect-tasks", "bytes": size, "files": len(files), "rounds": ROUNDS,
                      "baseline": f"--tasks {TASKS[0]}", "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
