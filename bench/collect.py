"""Collection benchmark: tau-collect against DuckDB `COPY ... TO`, Polars streaming, the like-for-like anchor, a plain
pyarrow loop and `cp -r`, per output format, shape and size.

1. For each shape in BENCH_SHAPES and each size in BENCH_COLLECT_MB (a comma-separated list of megabytes of
   winners, default 1024; 64 for a quick check; `256,1024,8192` measures each in turn), builds a run with tau's own
   commands (tau-init, tau-submit under the local executor, observe | reconcile until every shard has its winner):
   shards of rows of id, a 200-character text that barely compresses, score and shard (bench/collect_client.py),
   one Parquet file each. The shapes (default `32,1024,4096,1`):
   - `32`: 32 winners, each one row group (at 1 GB, ~32 MB and 150,000 rows each);
   - `1024`: 1,024 winners of about 1 MB (the shape of a real run with many small shards; every row group is below
     the rows tau copies whole, so every row is decoded and encoded again, by every tool);
   - `4096`: 4,096 winners of about 256 KB, measured at 1 GB only (at another size it is passed over, and said);
   - `1`: one winner in one row group (at 1 GB, ~4.9 million rows: a reader that decodes a row group whole holds
     all of it);
   - `shards`: winners of ~32 MB in row groups of BENCH_ROW_GROUP rows (default 131,072), as many as the size needs.
   Each run is built once in BENCH_DIR (default: the system's temporary folder), in a folder named by its shards x
   rows (and row group), and reused while that matches.
2. For each format in BENCH_FORMATS (default parquet,csv,jsonl), interleaved over BENCH_ROUNDS rounds (default 3),
   each case in its own child process on a warm page cache, writing one output:
   - tau: `tau-collect RUN --destination D --format F` (every winner checked whole, the partition plan, the
     digests of what it writes, the atomic publication, every file fsynced);
   - duckdb: `COPY (SELECT * FROM read_parquet([winner files])) TO D (FORMAT F)`, uncapped, and with
     `memory_limit='256MB'` (case `duckdb 256MB`);
   - polars: `pl.scan_parquet([winner files])` then `sink_parquet` / `sink_csv` / `sink_ndjson` on the streaming
     engine, rows kept in the order of the winner files (`maintain_order=True`), Parquet snappy-compressed as tau,
     DuckDB and pyarrow write it; and the same with the output fsynced before the command ends (case `polars
     fsync`);
   - like-for-like: the work tau does that Polars does not, added to Polars: `polars`, then the sha256 of every
     winner file and of the output, then the output fsynced (each file read in 1 MiB pieces, one after another);
   - pyarrow: a plain loop of `iter_batches` into ParquetWriter / CSVWriter / orjson lines, on one thread, with no
     hashing, no fsync and no checks;
   - cp: `cp -r --parents` of the winner files into a folder (the speed of copying the bytes; Parquet only).
   Before each case the winner files are read through once more, so that no case starts with winners that the
   case before it evicted from the page cache. BENCH_CASES (default: all, `pyarrow,duckdb,duckdb 256MB,polars,
   polars fsync,like-for-like,cp`) names the baselines to run beside tau; a name it does not know is refused.
   Each child's wall time, CPU seconds (ru_utime + ru_stime) and peak RSS come from its rusage (os.wait4).
   BENCH_TAU_ARGS adds arguments to tau-collect (e.g. `--memory 128M`).
3. Prints, per shape and size, a table: per format and case, the median MB/s (winner bytes read / median wall
   time), the median CPU seconds per GB of winner bytes, the largest peak RSS, and the ratio of tau's MB/s to the
   case's (above 1.0x: tau is faster), and each round's paired ratio (tau's time against the case's in the same
   round). Then one JSON line per shape and size: {"benchmark": "collect", "shape", "mb", "rounds", "winners",
   "rows_per_winner", "bytes", "files", "results": {format: {case: {"mb_per_s", "cpu_s_per_gb", "peak_rss_mib",
   "tau_ratio", "paired": [per round]} or {"failed": message} or {"skipped": "not installed"}}}}.
   DuckDB and Polars are benchmark-only dependencies (`pip install 'tau[bench]'`); without one, its cases are
   skipped and say so. A baseline that cannot finish (DuckDB out of its memory limit, say) is reported as failed.
"""

from __future__ import annotations

import importlib.util
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
SIZES = [int(mb) for mb in os.environ.get("BENCH_COLLECT_MB", "1024").split(",") if mb.strip()]
SHAPES = [n.strip() for n in os.environ.get("BENCH_SHAPES", "32,1024,4096,1").split(",") if n.strip()]
WINNERS = int(os.environ["BENCH_WINNERS"]) if os.environ.get("BENCH_WINNERS", "").strip() else None
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
GROUP = int(os.environ.get("BENCH_ROW_GROUP", "131072"))  # rows of a winner's row group in the `shards` shape
FORMATS = [f for f in os.environ.get("BENCH_FORMATS", "parquet,csv,jsonl").split(",") if f]
TAU_ARGS = os.environ.get("BENCH_TAU_ARGS", "").split()
# each baseline and the module it needs (pyarrow is tau's own dependency; the others come with tau[bench]; cp is a
# program)
BASELINES = {"pyarrow": "pyarrow", "duckdb": "duckdb", "duckdb 256MB": "duckdb", "polars": "polars",
             "polars fsync": "polars", "like-for-like": "polars", "cp": None}
CASES = [c.strip() for c in os.environ.get("BENCH_CASES", ",".join(BASELINES)).split(",") if c.strip()]
ROWS_PER_SHARD = 150_000
BYTES_PER_ROW = 217  # what bench/collect_client.py's rows take in Parquet
# shape -> (winners, row group rows: 0 one row group, None the `shards` shape's BENCH_ROW_GROUP, the only size it is
# measured at or None)
NAMED = {"32": (32, 0, None), "1024": (1024, 0, None), "4096": (4096, 0, 1024), "1": (1, 0, None),
         "shards": (None, None, None)}

DUCKDB = """
import sys, duckdb
files, out, fmt, limit = open(sys.argv[1]).read().split("\\n"), sys.argv[2], sys.argv[3], sys.argv[4]
con = duckdb.connect()
if limit != "none":
    con.execute(f"SET memory_limit='{limit}'")
options = {"parquet": "FORMAT PARQUET", "csv": "FORMAT CSV, HEADER", "jsonl": "FORMAT JSON"}[fmt]
con.execute(f"COPY (SELECT * FROM read_parquet({files!r})) TO '{out}' ({options})")
"""

POLARS = """
import os, sys
import polars as pl
files, out, fmt, mode = open(sys.argv[1]).read().split("\\n"), sys.argv[2], sys.argv[3], sys.argv[4]
frame = pl.scan_parquet(files, glob=False)
# maintain_order=True is Polars' default, said here because the comparison depends on it: tau-collect writes the rows
# in the order of the winner files, and a sink free to reorder them would be doing less. snappy as the others write.
if fmt == "parquet":
    frame.sink_parquet(out, compression="snappy", maintain_order=True, engine="streaming")
elif fmt == "csv":
    frame.sink_csv(out, maintain_order=True, engine="streaming")
else:
    frame.sink_ndjson(out, maintain_order=True, engine="streaming")
if mode == "like-for-like":  # what tau-collect does beside: every input and the output hashed whole
    import hashlib
    for path in files + [out]:
        sha = hashlib.sha256()
        with open(path, "rb", buffering=0) as fh:
            while piece := fh.read(1 << 20):
                sha.update(piece)
if mode != "-":  # on disk before the command ends, as tau-collect's files are (it fsyncs every file it publishes)
    fd = os.open(out, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
"""

PYARROW = """
import sys
import orjson
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
files, out, fmt = open(sys.argv[1]).read().split("\\n"), sys.argv[2], sys.argv[3]
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


def shape(mb: int) -> tuple[int, int]:
    """(shards, rows per shard) of the `shards` shape at mb megabytes: BENCH_WINNERS shards if set, else ~32 MB
    each."""
    if WINNERS is not None:
        return WINNERS, max(1000, mb * 2**20 // (BYTES_PER_ROW * WINNERS))
    shards = max(2, round(mb * 2**20 / (ROWS_PER_SHARD * BYTES_PER_ROW)))
    return shards, min(ROWS_PER_SHARD, max(1000, mb * 2**20 // (BYTES_PER_ROW * shards)))


def layout(name: str, mb: int) -> tuple[int, int, int | None] | None:
    """(winners, rows per winner, rows of a row group: 0 one, None pyarrow's default) of shape `name` at mb
    megabytes; None when the shape is not measured at that size."""
    winners, group, only = NAMED[name]
    if only is not None and mb != only:
        return None
    if winners is None:
        return (*shape(mb), GROUP or None)
    return winners, max(100, mb * 2**20 // (BYTES_PER_ROW * winners)), group


def build(workspace: Path, shards: int, rows: int, scheduler: dict | None = None,
          prefix: str = "run", group: int | None = None) -> tuple[Path, list[str]]:
    """The run of shards x rows (built once, reused while its folder holds a run) and its winner files; `scheduler`
    the plan's (default: the local executor on every core), `prefix` its folder's name before the shape, `group`
    the rows of a winner's row group (0: each winner one row group; None: pyarrow's default)."""
    suffix = "" if group is None else "-g1" if group == 0 else f"-g{group}"
    run_dir = workspace / f"{prefix}-{shards}x{rows}{suffix}"
    if not (run_dir / "run.json").exists():
        workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        client = [PY, str(ROOT / "bench" / "collect_client.py")] + ([] if group is None else [str(group)])
        plan = {"records": shards * rows, "shards": shards, "command": client,
                "scheduler": scheduler or {"profile": "local", "local": {"max_parallel": os.cpu_count() or 2}},
                "output": {"format": "parquet", "rows_per_partition": 1_000_000}}
        tau("tau-init", str(run_dir), input=json.dumps(plan))
        tau("tau-submit", str(run_dir))
    deadline = time.monotonic() + 3 * 3600
    while True:
        obs = subprocess.run([str(BIN / "tau-observe"), str(run_dir)], capture_output=True, text=True)
        if obs.returncode != 0:
            raise SystemExit(f"tau-observe failed ({obs.returncode}): {obs.stderr.strip()}")
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


def measure(argv: list[str]) -> tuple[float, int, float]:
    """(seconds, peak RSS in bytes, CPU seconds: user + system) of a child process."""
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
    return elapsed, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime


def missing() -> list[str]:
    """The modules of the asked baselines that are not installed (found without importing them)."""
    return sorted({BASELINES[c] for c in CASES
                   if BASELINES[c] is not None and importlib.util.find_spec(BASELINES[c]) is None})


def cases(run_dir: Path, files: list[str], fmt: str, out: Path) -> dict[str, list[str]]:
    """Each case's command line; the baselines read the winner files' paths from a file beside the run (4,096 of
    them do not fit in one argument)."""
    joined = str(run_dir.parent / f"{run_dir.name}.files")
    Path(joined).write_text("\n".join(files))
    form = [] if fmt == "parquet" else ["--format", fmt]  # the run's own format is the plan's
    found = {"tau": [str(BIN / "tau-collect"), str(run_dir), "--destination", str(out / "tau"), *form, *TAU_ARGS],
             "pyarrow": [PY, "-c", PYARROW, joined, str(out / f"pyarrow.{fmt}"), fmt],
             "duckdb": [PY, "-c", DUCKDB, joined, str(out / f"duckdb.{fmt}"), fmt, "none"],
             "duckdb 256MB": [PY, "-c", DUCKDB, joined, str(out / f"duckdb-capped.{fmt}"), fmt, "256MB"],
             "polars": [PY, "-c", POLARS, joined, str(out / f"polars.{fmt}"), fmt, "-"],
             "polars fsync": [PY, "-c", POLARS, joined, str(out / f"polars-fsync.{fmt}"), fmt, "fsync"],
             "like-for-like": [PY, "-c", POLARS, joined, str(out / f"like.{fmt}"), fmt, "like-for-like"],
             "cp": ["cp", "-r", "--parents", *files, str(out)]}
    absent = missing()
    wanted = [case for case in CASES if BASELINES[case] not in absent and (case != "cp" or fmt == "parquet")]
    return {name: argv for name, argv in found.items() if name == "tau" or name in wanted}


def warm(files: list[str]) -> None:
    """Read every winner file through (into the page cache, as far as it holds them)."""
    for path in files:
        with open(path, "rb") as fh:
            while fh.read(8 << 20):
                pass


def bench(base: Path, name: str, mb: int) -> dict | None:
    """Measures every case on shape `name` at mb megabytes, prints its table and returns its JSON line (None: the
    shape is not measured at this size)."""
    shaped = layout(name, mb)
    if shaped is None:
        print(f"collection benchmark: shape {name} is measured at {NAMED[name][2]} MB only; {mb} MB passed over")
        return None
    shards, rows, group = shaped
    run_dir, files = build(base, shards, rows, group=group)
    size = sum(os.path.getsize(f) for f in files)
    samples: dict[tuple[str, str], list[tuple[float, int, float]]] = {}
    failed: dict[tuple[str, str], str] = {}
    for _ in range(ROUNDS):
        for fmt in FORMATS:
            out = base / "out"
            for case, argv in cases(run_dir, files, fmt, out).items():
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir(mode=0o700)
                warm(files)  # a warm page cache for every case alike
                try:
                    samples.setdefault((fmt, case), []).append(measure(argv))
                except Failed as exc:
                    if case == "tau":
                        raise SystemExit(f"tau-collect failed: {exc}") from None
                    failed[(fmt, case)] = str(exc)
            shutil.rmtree(out, ignore_errors=True)
    results: dict = {}
    print(f"collection benchmark, shape {name}: {mb} MB asked, {shards} winners x {rows:,} rows, {len(files)} winner "
          f"files, {size / 1e9:.2f} GB, {ROUNDS} interleaved rounds")
    print(f"{'format':8} {'case':14} {'MB/s':>8} {'CPU-s/GB':>9} {'peak RSS MiB':>13} {'tau / case':>11}  paired")
    for fmt in FORMATS:
        rates = {case: size / 1e6 / statistics.median(t for t, _, _ in runs)
                 for (f, case), runs in samples.items() if f == fmt and (f, case) not in failed}
        for (f, case), runs in samples.items():
            if f != fmt:
                continue
            if (f, case) in failed:
                print(f"{fmt:8} {case:14} failed: {failed[(f, case)]}")
                results.setdefault(fmt, {})[case] = {"failed": failed[(f, case)]}
                continue
            cpu = statistics.median(c for _, _, c in runs) / (size / 1e9)
            rss = max(r for _, r, _ in runs) / 2**20
            ratio = rates["tau"] / rates[case]
            paired = [round(theirs / ours, 2)  # a case that failed in a round has fewer: paired by round up to it
                      for (ours, _, _), (theirs, _, _) in zip(samples[(fmt, "tau")], runs, strict=False)]
            results.setdefault(fmt, {})[case] = {"mb_per_s": round(rates[case], 1), "cpu_s_per_gb": round(cpu, 2),
                                                 "peak_rss_mib": round(rss), "tau_ratio": round(ratio, 2),
                                                 "paired": paired}
            print(f"{fmt:8} {case:14} {rates[case]:8.1f} {cpu:9.2f} {rss:13.0f} {ratio:10.2f}x  "
                  + " ".join(f"{p:.2f}" for p in paired))
        for module in missing():
            print(f"{fmt:8} {module:14} not installed: pip install 'tau[bench]'")
            results.setdefault(fmt, {})[module] = {"skipped": "not installed"}
    line = {"benchmark": "collect", "shape": name, "mb": mb, "rounds": ROUNDS, "winners": shards,
            "rows_per_winner": rows, "bytes": size, "files": len(files), "results": results}
    print(json.dumps(line))
    sys.stdout.flush()
    return line


def main() -> int:
    if unknown := [c for c in CASES if c not in BASELINES]:
        raise SystemExit(f"bench/collect.py: BENCH_CASES names {', '.join(map(repr, unknown))}, which is not a "
                         f"baseline; use some of {', '.join(BASELINES)}")
    if unknown := [n for n in SHAPES if n not in NAMED]:
        raise SystemExit(f"bench/collect.py: BENCH_SHAPES names {', '.join(map(repr, unknown))}, which is not a "
                         f"shape; use some of {', '.join(NAMED)}")
    if not SIZES or min(SIZES) < 1 or (WINNERS is not None and WINNERS < 1):
        raise SystemExit("bench/collect.py: BENCH_COLLECT_MB needs sizes of at least 1 (MB) and BENCH_WINNERS, if "
                         "set, at least 1 winner")
    base = Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir()) / "tau-bench-collect"
    for name in SHAPES:
        for mb in SIZES:
            bench(base, name, mb)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
