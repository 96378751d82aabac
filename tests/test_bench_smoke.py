"""The benchmarks still run: each that needs no service is run here at a size of seconds, as `make bench` would run
it at full size, so that a change to the library that a benchmark reads (a record's path, a module moved) breaks a
test rather than the next measurement. What they measure is not checked here: speed is measured by running them
alone on a quiet machine."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from containers import images
from helpers import PYTHON, ROOT

pytestmark = pytest.mark.slow


def bench(name: str, tmp_path, **settings: str) -> dict:
    """Run bench/NAME.py with the `settings` (BENCH_* variables) from a folder of its own; its last line, a JSON
    object naming the benchmark."""
    proc = subprocess.run([PYTHON, str(ROOT / "bench" / f"{name}.py")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, **settings))
    assert proc.returncode == 0, f"bench/{name}.py failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}" \
                                 f"{proc.stderr[-3000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["benchmark"] == name, result
    return result


def test_the_scale_benchmark_runs_on_a_small_run(tmp_path):
    result = bench("reconcile_scale", tmp_path, BENCH_SHARDS="40", BENCH_LIVE="4", BENCH_COLD="0")
    assert (result["shards"], result["live"]) == (40, 4)
    assert result["steady_ms"] > 0 and result["sacct_parse_ms"] > 0


def test_the_start_up_benchmark_runs_one_round(tmp_path):
    result = bench("startup", tmp_path, BENCH_ROUNDS="1")
    assert result["rounds"] == 1
    assert {"tau-status RUN (8 shards)", "tau-drive RUN --once (8 shards)"} <= set(result["results"])


@pytest.mark.containers
def test_the_containers_benchmark_runs_one_round(tmp_path):
    images()  # built first when missing, as the benchmark would
    result = bench("containers", tmp_path, BENCH_ROUNDS="1", BENCH_RECORDS="20")
    assert result["rounds"] == 1 and result["median_seconds"]["tau"] > 0 and result["ratio"] > 0


def test_the_inputs_benchmark_runs_on_a_small_input(tmp_path):
    result = bench("inputs", tmp_path, BENCH_INPUT_MB="40", BENCH_SHARD_MB="10", BENCH_TEXT_MB="8", BENCH_ROUNDS="1")
    assert result["input_bytes"] > 30_000_000 and result["cut_bytes"] > 0 and result["cut_peak_rss"] > 0
    assert set(result["text"]) == {"jsonl", "csv"} and all(t["ratio"] > 0 for t in result["text"].values())


def test_the_collection_benchmark_runs_each_shape_it_is_asked_for(tmp_path):
    proc = subprocess.run([PYTHON, str(ROOT / "bench" / "collect.py")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, BENCH_DIR=str(tmp_path), BENCH_COLLECT_MB="4",
                                                BENCH_SHAPES="32,4096,1", BENCH_ROUNDS="1", BENCH_CASES="pyarrow,cp"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [(line["shape"], line["winners"]) for line in lines] == [("32", 32), ("1", 1)]  # 4096: at 1 GB only
    assert "shape 4096 is measured at 1024 MB only; 4 MB passed over" in proc.stdout
    for line in lines:
        assert set(line["results"]) == {"parquet", "csv", "jsonl"}
        assert set(line["results"]["parquet"]) == {"tau", "pyarrow", "cp"} and set(line["results"]["csv"]) == \
            {"tau", "pyarrow"}
        assert all(case["mb_per_s"] > 0 and len(case["paired"]) == 1 for results in line["results"].values()
                   for case in results.values())
