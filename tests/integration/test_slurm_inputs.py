"""A run over a dataset on the real Slurm test cluster: 50,000 rows of Parquet (three files, row groups of 4,000) in
17 shards, each an array task that cuts its own rows before its client starts; every shard's TAU_INPUT_FILE holds
exactly its rows (row by row against the source), and the collection, made by the collection job, keeps the input's
ids one for one. A piece changed after init fails the one shard that reads it "input changed", never retried."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from input_fixtures import CLIENT, read, rows, write

from helpers import PYTHON, tau
from slurm import init_slurm_run, record, settled, submit, wait_for

from taulib.rules import inputs as rules
from taulib.rules.shards import shard_range

pytestmark = pytest.mark.slurm

ROWS = 50_000


def over(workspace: Path, source: Path, **extra) -> Path:
    return init_slurm_run(workspace, shards=17, records=ROWS, command=[PYTHON, CLIENT],
                          input={"path": str(source), **extra}, output={"keep_input": ["id"]})


def test_17_array_tasks_each_cut_exactly_their_rows_and_the_collection_job_keeps_the_ids(cluster, workspace):
    data = rows(ROWS)
    source = write(workspace / "input", "parquet", data)
    run_dir = over(workspace, source)
    submit(run_dir)
    status = wait_for(settled, run_dir, timeout=420, pause=1.0)
    assert status["state"] == "succeeded", status["counts"]
    plan = record(run_dir, "plan.json")
    for index in range(17):
        start, end = shard_range(plan, index)
        got = read(run_dir / f"shards/shard-{index:05d}/attempts/attempt-0001/input.parquet", "parquet")
        assert got == data[start:end], f"shard {index}: not rows {start}..{end}"
    proc = tau("tau-collect", str(run_dir), "--destination", str(workspace / "out"), "--wait")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == "succeeded"
    import pyarrow.dataset as ds

    table = ds.dataset(str(workspace / "out"), format="parquet").to_table()
    assert table.column("id").to_pylist() == list(range(ROWS))
    assert table.column("seen_id").to_pylist() == list(range(ROWS))


def test_a_row_group_changed_after_init_fails_only_its_shard_under_slurm_and_it_is_not_retried(cluster, workspace):
    data = rows(ROWS)
    source = write(workspace / "input", "parquet", data, row_group=500)
    run_dir = over(workspace, source)
    index, plan = record(run_dir, "input.json"), record(run_dir, "plan.json")
    start, end = shard_range(plan, 3)
    number, pieces = rules.needed(index, start, end)[0]
    k = next(k for k in pieces if start <= index["files"][number]["pieces"][k]["row_start"] and
             index["files"][number]["pieces"][k]["row_start"] + index["files"][number]["pieces"][k]["rows"] <= end)
    piece = index["files"][number]["pieces"][k]
    path = source / index["files"][number]["name"]
    raw = bytearray(path.read_bytes())
    raw[piece["offset"] + piece["length"] // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    submit(run_dir)
    status = wait_for(settled, run_dir, timeout=420, pause=1.0)
    shard = status["shards"][3]
    assert shard["state"] == "exhausted" and shard["attempts"] == 1, shard
    result = record(run_dir, "shards/shard-00003/attempts/attempt-0001/result.json")
    assert result["error_code"] == "input_changed"
    assert result["error"] == (f"input changed: {path.name} ({path}) row group {k} (rows {piece['row_start']}.."
                               f"{piece['row_start'] + piece['rows']}) differs from the run's index; the client was "
                               "not started")
    assert [s["state"] for i, s in enumerate(status["shards"]) if i != 3] == ["succeeded"] * 16
    retry = tau("tau-retry", str(run_dir))
    assert retry.returncode == 0 and json.loads(retry.stdout)["submission_id"] is None, retry.stdout
