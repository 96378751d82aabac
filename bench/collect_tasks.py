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

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PY = sys.executable
MB = int(os.environ.get("BENCH_COLLECT_MB", "2048"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
TASKS = [int(n) for n in os.environ.get("BENCH_TASKS", "1,2").split(",") if n.strip()]
ROWS = int(os.environ.get("BENCH_ROWS", "500000"))
ROWS_PER_SHARD = 150_000
BYTES_PER_ROW = 217  # what bench/collect_client.py's rows take in Parquet


def tau(*args: str, input: str | None = None) -> dict:
    proc = subprocess.run([str(BIN / args[0]), *args[1:]], input=input, capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{args[0]} failed ({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout) if proc.stdout.strip() else {}


def build(workspace: Path) -> tuple[Path, list[str]]:
    shards = max(2, round(MB * 2**20 / (ROWS_PER_SHARD * BYTES_PER_ROW)))
    rows = min(ROWS_PER_SHARD, max(1000, MB * 2**20 // (BYTES_PER_ROW * shards)))
    run_dir = workspace / f"slurm-run-{shards}x{rows}"
    if not (run_dir / "run.json").exists():
        workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        plan = {"records": shards * rows, "shards": shards,
                "command": [PY, str(ROOT / "bench" / "collect_client.py")],
                "scheduler": {"profile": "slurm", "slurm": {"partition": "debug", "time": "30:00",
                                                            "cpus_per_task": 1, "mem": "2G"}},
                "output": {"format": "parquet", "rows_per_partition": ROWS}}
        tau("tau-init", str(run_dir), input=json.dumps(plan))
        tau("tau-submit", str(run_dir))
    deadline = time.monotonic() + 3600
    while True:
        obs = subprocess.run([str(BIN / "tau-observe"), str(run_dir)], capture_output=True, text=True, check=True)
        status = tau("tau-reconcile", str(run_dir), input=obs.stdout)
        if status["state"] == "succeeded":
            break
        if status["state"] == "failed" or time.monotonic() > deadline:
            raise SystemExit(f"the benchmark's run did not succeed: {status['reason']}")
        time.sleep(2)
    winners = subprocess.run([str(BIN / "tau-winner"), str(run_dir)], capture_output=True, text=True, check=True)
    files = []
    for shard in json.loads(winners.stdout)["shards"]:
        dataset = run_dir / "shards" / shard["shard_id"] / "attempts" / shard["winner"] / "dataset"
        files += sorted(str(p) for p in dataset.glob("*.parquet"))
    return run_dir, files


def warm(files: list[str]) -> None:
    for path in files:
        with open(path, "rb") as fh:
            while fh.read(8 << 20):
                pass


def main() -> int:
    if subprocess.run(["sinfo"], capture_output=True).returncode != 0:
        print("the Slurm test cluster does not answer: start it with `make slurm-up` (as root)", file=sys.stderr)
        return 2
    base = Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir()) / "tau-bench-collect"
    run_dir, files = build(base)
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
