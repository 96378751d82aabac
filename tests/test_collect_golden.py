"""The bytes of every output format are kept (tau-run(5) "DEST/_tau_collection.json", format contract version 1):
a run of the demo client collected as Parquet, CSV and JSON lines gives exactly the files recorded in
tests/golden/collect/bytes.json, which were made by the tau of before the collection's memory budget and its
faster JSON lines. A change of tau, or an upgrade of pyarrow or orjson, that changes a byte fails here, loudly:
contract version 1's bytes change only with a new version and a documented mapping, and old runs re-collect to
the bytes they gave. The same bytes come from one task or three, and from the smallest memory budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import GOLDEN, PYTHON, complete_run, copy_run, module_workspace, tau

CLIENT = str(Path(__file__).resolve().parent.parent / "contrib" / "demo" / "client.py")
# 4 shards of 50,000 rows in files of 40,000 and 10,000 rows, partitions of 70,000: winners' row groups copied
# whole, others decoded and encoded (a dictionary-encoded column among them), partitions across shards
PLAN = {"records": 200_000, "shards": 4, "command": [PYTHON, CLIENT, "--rows-per-file", "40000"],
        "scheduler": {"profile": "local", "local": {"max_parallel": 2}},
        "output": {"format": "parquet", "rows_per_partition": 70_000}}


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return complete_run(module_workspace(tmp_path_factory, "collect-golden"), **PLAN)


def files_of(run_dir: Path, dest: Path, *options: str) -> list[dict]:
    proc = tau("tau-collect", str(run_dir), "--destination", str(dest), *options, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return [{k: f[k] for k in ("path", "rows", "sha256", "size")} for f in json.loads(proc.stdout)["files"]]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_each_format_gives_the_bytes_it_gave_before_in_one_task_or_three_and_within_the_least_memory(demo, tmp_path,
                                                                                                   fmt):
    golden = json.loads((GOLDEN / "collect" / "bytes.json").read_text())
    run_dir = copy_run(demo, tmp_path / "ws")
    assert files_of(run_dir, run_dir.parent / "one", "--format", fmt) == golden[fmt]
    assert files_of(run_dir, run_dir.parent / "three", "--format", fmt, "--tasks", "3") == golden[fmt]
    assert files_of(run_dir, run_dir.parent / "least", "--format", fmt, "--memory", "128M") == golden[fmt]
