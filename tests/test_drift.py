"""taulib.lifecycle.drift: a running client's Parquet files are held to the run's schema as soon as each is complete,
so a drifting client is stopped seconds after its first file (with a real client on the local executor), and a file
still being written is never judged."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import PYTHON, init_run, settle, tau
from taulib.lifecycle import drift
from taulib.rundir.run import Run

DECLARED = [{"name": "id", "type": "int64"}, {"name": "score", "type": "double"}]

# writes its first file (with an extra column on DRIFT_SHARD), says when on stderr, then would work for 10 minutes
CLIENT = """\
import os, sys, time
import pyarrow as pa, pyarrow.parquet as pq
start, end = int(os.environ["TAU_RECORD_START"]), int(os.environ["TAU_RECORD_END"])
columns = {"id": pa.array(range(start, end), pa.int64()), "score": pa.array([0.5] * (end - start), pa.float64())}
drifts = os.environ["TAU_SHARD_ID"] == os.environ["DRIFT_SHARD"]
if drifts:
    columns[os.environ["DRIFT_COLUMN"]] = pa.array(["x"] * (end - start), pa.string())
    columns.pop(os.environ["DROP_COLUMN"], None)
pq.write_table(pa.table(columns), os.path.join(os.environ["TAU_OUTPUT_DIR"], "part-00000.parquet"))
print(f"wrote {time.time()}", file=sys.stderr, flush=True)
if drifts:
    time.sleep(600)
"""


def drifting_plan(workspace: Path, shards: int, drift_shard: str, column: str, drop: str = "",
                  schema: list | None = None) -> dict:
    client = workspace / "client.py"
    client.write_text(CLIENT)
    return {"records": 2 * shards, "shards": shards, "command": [PYTHON, str(client)],
            "env": {"DRIFT_SHARD": drift_shard, "DRIFT_COLUMN": column, "DROP_COLUMN": drop},
            "scheduler": {"profile": "local", "local": {"max_parallel": 1}},
            **({"output": {"schema": schema}} if schema else {}),
            "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}


def attempt_dir(run: Path, sid: str) -> Path:
    return run / "shards" / sid / "attempts" / "attempt-0001"


def wrote_at(run: Path, sid: str) -> float:
    log = (attempt_dir(run, sid) / "client.log").read_text()
    return float(next(line for line in log.splitlines() if line.startswith("wrote "))[6:])


def ended_at(run: Path, sid: str) -> float:
    result = json.loads((attempt_dir(run, sid) / "result.json").read_text())
    return datetime.fromisoformat(result["completed_at"].replace("Z", "+00:00")).timestamp()


def test_a_client_that_drifts_from_the_declared_schema_fails_within_seconds_of_its_first_file(workspace):
    run = init_run(workspace, plan_doc=drifting_plan(workspace, 1, "shard-00000", "extra", schema=DECLARED))
    assert tau("tau-submit", str(run)).returncode == 0
    doc = settle(run)
    shard = doc["shards"][0]
    assert (doc["state"], shard["state"]) == ("failed", "failed")
    assert shard["reason"] == ("the client wrote columns other than the run's output schema (fixed by the plan): "
                               "field 'extra' (string) is not in the run's schema (in part-00000.parquet, stopped "
                               "while it ran)")
    assert doc["retryable"] == ["shard-00000"]
    assert ended_at(run, "shard-00000") - wrote_at(run, "shard-00000") < 10
    result = json.loads((attempt_dir(run, "shard-00000") / "result.json").read_text())
    assert (result["outcome"], result["signal"], result["manifest"]) == ("failed", 15, None)
    attempt = json.loads((attempt_dir(run, "shard-00000") / "attempt.json").read_text())
    assert attempt["terminal"]["classification"] == "failed"


def test_without_a_declared_schema_a_client_that_drifts_from_the_first_winner_fails_within_seconds(workspace):
    run = init_run(workspace, plan_doc=drifting_plan(workspace, 2, "shard-00001", "label", drop="score"))
    assert tau("tau-submit", str(run)).returncode == 0
    doc = settle(run)
    assert [s["state"] for s in doc["shards"]] == ["succeeded", "failed"]
    assert doc["shards"][1]["reason"] == (
        "the client wrote columns other than the run's output schema (fixed by shard-00000/attempt-0001): field "
        "'label' (string) is not in the run's schema; field 'score' (double) of the run's schema is missing (in "
        "part-00000.parquet, stopped while it ran)")
    assert ended_at(run, "shard-00001") - wrote_at(run, "shard-00001") < 10


# -- the watch itself, on files the test writes -------------------------------------------------------------------

@pytest.fixture
def watched(workspace):
    run_dir = init_run(workspace, plan_doc=drifting_plan(workspace, 1, "-", "-", schema=DECLARED))
    with Run(str(run_dir)) as run:
        run.dir.make_folders("shards/shard-00000/attempts/attempt-0001/dataset")
        yield run, run_dir / "shards/shard-00000/attempts/attempt-0001/dataset", drift.Watch(
            run, {"dataset": "shards/shard-00000/attempts/attempt-0001/dataset"})


def parquet_bytes(path: Path, **columns) -> bytes:
    pq.write_table(pa.table(columns), path)
    return path.read_bytes()


def test_a_file_still_being_written_is_not_judged_and_a_complete_one_is_once_its_size_holds(watched, workspace):
    run, dataset, watch = watched
    data = parquet_bytes(workspace / "t.parquet", id=pa.array([1], pa.int64()), score=pa.array([1], pa.float32()))
    part = dataset / "part-00000.parquet"
    part.write_bytes(data[:-8])  # no footer yet
    assert watch.check() is None and watch.check() is None
    part.write_bytes(data)
    assert watch.check() is None  # complete, but its size has not held for one look yet
    assert watch.check() == ("the client wrote columns other than the run's output schema (fixed by the plan): field "
                             "'score' is float where the run's is double (in part-00000.parquet, stopped while it ran)")
    assert watch.stopped is not None


def test_files_of_the_runs_columns_and_names_that_are_not_parquet_files_pass(watched, workspace):
    run, dataset, watch = watched
    (dataset / "part-00000.parquet").write_bytes(
        parquet_bytes(workspace / "t.parquet", id=pa.array([1], pa.int64()), score=pa.array([1.0], pa.float64())))
    (dataset / "notes.txt").write_text("PAR1")
    (dataset / "part-00001.parquet").write_bytes(b"not parquet, but it ends as one PAR1")
    for _ in range(3):
        assert watch.check() is None
    assert watch.done == {"part-00000.parquet", "part-00001.parquet"}  # each read once; the bad one left to the end


def test_without_a_run_schema_an_attempts_files_are_held_to_its_first(workspace):
    run_dir = init_run(workspace, plan_doc=drifting_plan(workspace, 1, "-", "-"))
    with Run(str(run_dir)) as run:
        rel = "shards/shard-00000/attempts/attempt-0001/dataset"
        run.dir.make_folders(rel)
        dataset = run_dir / rel
        watch = drift.Watch(run, {"dataset": rel})
        (dataset / "part-00000.parquet").write_bytes(parquet_bytes(workspace / "a.parquet", id=pa.array([1])))
        assert watch.check() is None and watch.check() is None
        (dataset / "part-00001.parquet").write_bytes(parquet_bytes(workspace / "b.parquet", id=pa.array(["1"])))
        assert watch.check() is None
        time.sleep(0.01)
        assert watch.check() == ("the client wrote Parquet files of different schemas: field 'id' is string where "
                                 "part-00000.parquet's is int64 (in part-00001.parquet, stopped while it ran)")
