"""Collection benchmark: tau-collect against DuckDB `COPY ... TO` and a plain pyarrow loop, per output format.

1. Builds a run with tau's own commands (tau-init, tau-submit under the local executor, observe | reconcile until
   every shard has its winner): shards of 150,000 rows of id, a 200-character text that barely compresses, score
   and shard (bench/collect_client.py), ~32 MB of Parquet each, to BENCH_COLLECT_MB in all (default 2048; a
   small size such as 64 for a quick check). The run is built once in BENCH_DIR (default: the system's temporary
   folder) and reused while its size matches.
2. For each format in BENCH_FORMATS (default parquet,csv,jsonl), interleaved over BENCH_ROUNDS rounds (default 3),
   each case in its own child process on a warm page cache:
   - tau: `tau-collect RUN --destination D --format F` (every winner checked whole, the partition plan, the
     digests of what it writes, the atomic publication);
   - duckdb: `COPY (SELECT * FROM read_parquet([winner files])) TO D (FORMAT F)`, uncapped, and with
     `memory_limit='256MB'`;
   - pyarrow: a plain loop of `iter_batches` into ParquetWriter / CSVWriter / orjson lines, with no checks.
   Before each case the winner files are read through once more, so that no case starts with winners that the
   case before it evicted from the page cache (at 8 GB, a run's winners and one output do not both fit here).
   BENCH_CASES (default: all) names the baselines to run beside tau, e.g. `duckdb` alone for a quicker 8 GB run.
   Wall time, MB/s of winner bytes read, and the child's peak RSS (from its rusage, os.wait4).
3. Prints, per format, each case's median MB/s and peak RSS and the ratio of tau's MB/s to each baseline's, then
   one JSON line. DuckDB is a benchmark-only dependency (`pip install 'tau[bench]'`); without it those cases are
   skipped and say so.
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
FORMATS = [f for f in os.environ.get("BENCH_FORMATS", "parquet,csv,jsonl").split(",") if f]
CASES = [c.strip() for c in os.environ.get("BENCH_CASES", "pyarrow,duckdb,duckdb 256MB").split(",") if c.strip()]
ROWS_PER_SHARD = 150_000
BYTES_PER_ROW = 217  # what bench/collect_client.py's rows take in Parquet

DUCKDB = """
import sys, duckdb
files, out, fmt, limit = sys.argv[1].split("\\n"), sys.argv[2], sys.argv[3], sys.argv[4]
con = duckdb.connect()
if limit != "none":
    con.execute(f"SET memory_limit='{limit}'")
options = {"parquet": "FORMAT PARQUET", "csv": "FORMAT CSV, HEADER", "jsonl": "FORMAT JSON"}[fmt]
con.execute(f"COPY (SELECT * FROM read_parquet({files!r})) TO '{out}' ({options})")
"""

PYARROW = """
import sys
import orjson
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
files, out, fmt = sys.argv[1].split("\\n"), sys.argv[2], sys.argv[3]
writer = None
with open(out, "wb") as fh:
    for path in files:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65536):
            if fmt == "jsonl":
                fh.write(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in batch.to_pylist()))
                continue
            if writer is None:
                writer = (pq.ParquetWriter if fmt == "parquet" else pacsv.CSVWriter)(fh, batch.schema)
            writer.write_batch(batch)
    if writer is not None:
        writer.close()
"""


def tau(*args: str, input: str | None = None) -> dict:
    proc = subprocess.run([str(BIN / args[0]), *args[1:]], input=input, capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{args[0]} failed ({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout) if proc.stdout.strip() else {}


def build(workspace: Path) -> tuple[Path, list[str]]:
    """The run of MB megabytes of winners (built once, reused while its size matches) and its winner files."""
    shards = max(2, round(MB * 2**20 / (ROWS_PER_SHARD * BYTES_PER_ROW)))
    rows = min(ROWS_PER_SHARD, max(1000, MB * 2**20 // (BYTES_PER_ROW * shards)))
    run_dir = workspace / f"run-{shards}x{rows}"
    if not (run_dir / "run.json").exists():
        workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        plan = {"records": shards * rows, "shards": shards, "command": [PY, str(ROOT / "bench" / "collect_client.py")],
                "scheduler": {"profile": "local", "local": {"max_parallel": os.cpu_count() or 2}},
                "output": {"format": "parquet", "rows_per_partition": 1_000_000}}
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
        time.sleep(1)
    winners = subprocess.run([str(BIN / "tau-winner"), str(run_dir)], capture_output=True, text=True, check=True)
    files = []
    for shard in json.loads(winners.stdout)["shards"]:
        dataset = run_dir / "shards" / shard["shard_id"] / "attempts" / shard["winner"] / "dataset"
        files += sorted(str(p) for p in dataset.glob("*.parquet"))
    return run_dir, files


class Failed(Exception):
    """A baseline that could not finish (DuckDB out of its memory limit, say): reported, not measured."""


def measure(argv: list[str]) -> tuple[float, int]:
    """(seconds, peak RSS in bytes) of a child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        last = [line for line in err.strip().splitlines() if line.strip()]
        raise Failed(last[-1][:200] if last else f"exit {proc.returncode}")
    return elapsed, usage.ru_maxrss * 1024


def cases(run_dir: Path, files: list[str], fmt: str, out: Path) -> dict[str, list[str]]:
    joined = "\n".join(files)
    shape = [] if fmt == "parquet" else ["--format", fmt]  # the run's own format is the plan's
    found = {"tau": [str(BIN / "tau-collect"), str(run_dir), "--destination", str(out / "tau"), *shape],
             "pyarrow": [PY, "-c", PYARROW, joined, str(out / f"pyarrow.{fmt}"), fmt]}
    try:
        import duckdb  # noqa: F401
    except ImportError:
        return found
    found["duckdb"] = [PY, "-c", DUCKDB, joined, str(out / f"duckdb.{fmt}"), fmt, "none"]
    found["duckdb 256MB"] = [PY, "-c", DUCKDB, joined, str(out / f"duckdb-capped.{fmt}"), fmt, "256MB"]
    return {name: argv for name, argv in found.items() if name == "tau" or name in CASES}


def warm(files: list[str]) -> None:
    """Read every winner file through (into the page cache, as far as it holds them)."""
    for path in files:
        with open(path, "rb") as fh:
            while fh.read(8 << 20):
                pass


def main() -> int:
    base = Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir()) / "tau-bench-collect"
    run_dir, files = build(base)
    size = sum(os.path.getsize(f) for f in files)
    samples: dict[tuple[str, str], list[tuple[float, int]]] = {}
    failed: dict[tuple[str, str], str] = {}
    for _ in range(ROUNDS):
        for fmt in FORMATS:
            out = base / "out"
            for name, argv in cases(run_dir, files, fmt, out).items():
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir(mode=0o700)
                warm(files)  # a warm page cache for every case alike
                try:
                    samples.setdefault((fmt, name), []).append(measure(argv))
                except Failed as exc:
                    if name == "tau":
                        raise SystemExit(f"tau-collect failed: {exc}") from None
                    failed[(fmt, name)] = str(exc)
            shutil.rmtree(out, ignore_errors=True)
    results: dict = {}
    print(f"collection benchmark: {len(files)} winner files, {size / 1e9:.2f} GB, {ROUNDS} interleaved rounds")
    print(f"{'format':8} {'case':14} {'MB/s':>8} {'peak RSS MiB':>13} {'tau / case':>11}")
    for fmt in FORMATS:
        rates = {name: size / 1e6 / statistics.median(t for t, _ in runs)
                 for (f, name), runs in samples.items() if f == fmt and (f, name) not in failed}
        for (f, name), runs in samples.items():
            if f != fmt:
                continue
            if (f, name) in failed:
                print(f"{fmt:8} {name:14} failed: {failed[(f, name)]}")
                results.setdefault(fmt, {})[name] = {"failed": failed[(f, name)]}
                continue
            rss = max(r for _, r in runs) / 2**20
            ratio = rates["tau"] / rates[name]
            results.setdefault(fmt, {})[name] = {"mb_per_s": round(rates[name], 1), "peak_rss_mib": round(rss),
                                                 "tau_ratio": round(ratio, 2)}
            print(f"{fmt:8} {name:14} {rates[name]:8.1f} {rss:13.0f} {ratio:10.2f}x")
        if "duckdb" in CASES and "duckdb" not in rates \
                and not any(f == fmt and name.startswith("duckdb") for f, name in failed):
            try:
                import duckdb  # noqa: F401
            except ImportError:
                print(f"{fmt:8} duckdb         not installed: pip install 'tau[bench]'")
    print(json.dumps({"benchmark": "collect", "bytes": size, "files": len(files), "rounds": ROUNDS,
                      "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
