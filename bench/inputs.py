"""Inputs benchmark: a run over a Parquet dataset of BENCH_INPUT_MB megabytes (default 2048), in the same run:
  init      tau-init over it (every file read once: its sha256 and a sha256 per row group, footers read), against
  baseline  `sha256sum` of the same files (what a careful user runs to pin a dataset by hand)
both with the files in the page cache (each is run once before it is timed: the disk's speed is neither's);
  cut       the peak RSS of one allocation (`tau-attempt run` under the local executor, as its supervisor measured
            it with getrusage) cutting one shard of BENCH_SHARD_MB megabytes (default 512) from that input: the row
            groups it needs copied to a verified sparse file, decoded, written as its TAU_INPUT_FILE; the client is
            a shell that only counts the file's bytes (so the measure is tau's), against the 256 MiB budget.
The dataset: 4 files, row groups of about 64 MB, rows of 1,000 random base64 characters (no compression helps),
made once per run in a private temporary folder. The same is measured for tau-init over JSON lines and CSV inputs
of BENCH_TEXT_MB megabytes (default 1024; their rows are read, not only hashed: every JSON line parsed, every CSV
row counted again by Arrow's reader, and output.keep_input's column typed). Prints the seconds and ratios, the
RSS, and one JSON line.
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from services import finished_task  # bench/ is this script's folder, first on sys.path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
SIZE_MB = int(os.environ.get("BENCH_INPUT_MB", "2048"))
SHARD_MB = int(os.environ.get("BENCH_SHARD_MB", "512"))
TEXT_MB = int(os.environ.get("BENCH_TEXT_MB", "1024"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
ROW_BYTES = 1000
FILES = 4
BUDGET = 256 << 20


def make_input(folder: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = SIZE_MB * 1_000_000 // ROW_BYTES
    group = max(1, min(64_000_000 // ROW_BYTES, rows // FILES))
    per_file = -(-rows // FILES)
    folder.mkdir()
    row = 0
    for k in range(FILES):
        with pq.ParquetWriter(folder / f"part-{k}.parquet", pa.schema([("id", pa.int64()), ("text", pa.string())]),
                              compression="snappy") as writer:
            end = min(rows, row + per_file)
            while row < end:
                n = min(group, end - row)
                texts = [base64.b64encode(os.urandom(ROW_BYTES * 3 // 4)).decode() for _ in range(n)]
                writer.write_table(pa.table({"id": pa.array(range(row, row + n), pa.int64()), "text": texts}),
                                   row_group_size=n)
                row += n


def make_text(folder: Path, fmt: str) -> None:
    """TEXT_MB of rows {id, prompt} as JSON lines or CSV (prompts of words, some quoted), in 2 files."""
    import csv
    import random

    import orjson

    rng = random.Random(1)
    words = ["alpha", "beta", "gamma", 'say "hi"', "x,y", "naïve", "two\nlines"]
    folder.mkdir()
    rows = TEXT_MB * 1_000_000 // 200
    for k in range(2):
        with open(folder / f"part-{k}.{fmt}", "w", newline="", encoding="utf-8") as fh:
            out = csv.writer(fh) if fmt == "csv" else None
            if out is not None:
                out.writerow(["id", "prompt"])
            for row in range(rows * k // 2, rows * (k + 1) // 2):
                prompt = " ".join(rng.choice(words) for _ in range(30))
                if out is not None:
                    out.writerow([row, prompt])
                else:
                    fh.write(orjson.dumps({"id": row, "prompt": prompt}).decode() + "\n")


def text_ratio(work: Path, fmt: str, env: dict[str, str]) -> dict[str, float]:
    """tau-init over a TEXT_MB JSON lines or CSV input (keeping its ids), and sha256sum of it: medians."""
    source = work / f"input-{fmt}"
    make_text(source, fmt)
    files = sorted(str(p) for p in source.iterdir())
    plan = {"input": {"path": str(source)}, "shards": 8, "command": ["/bin/true"],
            "output": {"keep_input": ["id"]}}
    subprocess.run(["sha256sum", *files], check=True, capture_output=True)
    seconds: dict[str, list[float]] = {"baseline": [], "init": []}
    for index in range(ROUNDS):
        seconds["baseline"].append(timed(["sha256sum", *files]))
        seconds["init"].append(timed([str(BIN / "tau-init"), str(work / f"run-{fmt}-{index}")],
                                     input=json.dumps(plan).encode(), env=env))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    size = sum(os.path.getsize(p) for p in files)
    print(f"{fmt}: {size / 1e6:.0f} MB: sha256sum {medians['baseline']:.2f} s, tau-init {medians['init']:.2f} s: "
          f"{medians['init'] / medians['baseline']:.2f}x", flush=True)
    return {"bytes": size, **medians, "ratio": round(medians["init"] / medians["baseline"], 3)}


def timed(argv: list[str], **kwargs: object) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, **kwargs)  # type: ignore[call-overload]
    return time.perf_counter() - start


def main() -> int:
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    with tempfile.TemporaryDirectory(prefix="tau-bench-inputs-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o700)
        source = work / "input"
        made = time.perf_counter()
        make_input(source)
        files = sorted(str(p) for p in source.iterdir())
        size = sum(os.path.getsize(p) for p in files)
        print(f"input: {size / 1e6:.0f} MB in {len(files)} files, made in {time.perf_counter() - made:.0f} s",
              flush=True)
        client = work / "client.sh"
        client.write_text('#!/bin/sh\nwc -c "$TAU_INPUT_FILE" > "$TAU_OUTPUT_DIR/../count"\n')
        client.chmod(0o755)
        shards = max(1, size // (SHARD_MB << 20))
        plan = {"input": {"path": str(source)}, "shards": int(shards), "command": [str(client)],
                "scheduler": {"profile": "local", "local": {"max_parallel": 1}}, "retry": {"max_attempts": 1}}
        seconds: dict[str, list[float]] = {"baseline": [], "init": []}
        subprocess.run(["sha256sum", *files], check=True, capture_output=True)  # the page cache, for both
        for index in range(ROUNDS):
            seconds["baseline"].append(timed(["sha256sum", *files]))
            seconds["init"].append(timed([str(BIN / "tau-init"), str(work / f"run-{index}")],
                                         input=json.dumps(plan).encode(), env=env))
        run_dir = work / "run-0"
        subprocess.run([str(BIN / "tau-submit"), str(run_dir), "--shard", "shard-00000"], check=True,
                       capture_output=True, env=env)
        task = finished_task(run_dir, timeout=600)
        cut = run_dir / "shards" / "shard-00000" / "attempts" / "attempt-0001" / "input.parquet"
        if not cut.exists():
            raise SystemExit(f"bench: the shard cut no input file: {task}")
        rss = int(task["usage"]["max_rss_bytes"])
        cut_bytes = cut.stat().st_size
        text = {fmt: text_ratio(work, fmt, env) for fmt in ("jsonl", "csv")} if TEXT_MB else {}
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    for name, values in seconds.items():
        print(f"{name:9s} median {medians[name]:.2f} s  best {min(values):.2f} s  ({len(values)} rounds, "
              f"{size / 1e6 / medians[name]:.0f} MB/s)")
    ratio = medians["init"] / medians["baseline"]
    print(f"tau-init / sha256sum: {ratio:.2f}x (goal: at most 1.5x)")
    print(f"cut of a {cut_bytes / 1e6:.0f} MB shard: peak RSS {rss / 2**20:.0f} MiB (budget 256 MiB)")
    print(json.dumps({"benchmark": "inputs", "input_bytes": size, "rounds": ROUNDS, "median_seconds": medians,
                      "ratio": round(ratio, 3), "cut_bytes": cut_bytes, "cut_peak_rss": rss, "text": text,
                      "within": ratio <= 1.5 and rss <= BUDGET and all(t["ratio"] <= 1.5 for t in text.values())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
