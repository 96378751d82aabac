"""The run's output schema is fixed by the plan or by the first complete candidate: a candidate with other columns
fails its attempt naming the fields, so its shard stays retryable, and tau-collect never meets two schemas."""

from __future__ import annotations

import json

import pytest

from helpers import PYTHON, init_run, settle, tau
from test_cli_run_environment import PROBE

pytestmark = pytest.mark.slow


def plan(*args: str, **extra) -> dict:
    doc = {"records": 20, "shards": 2, "command": [PYTHON, str(PROBE), *args],
           "scheduler": {"profile": "local", "local": {"max_parallel": 1}},
           "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}
    doc.update(extra)
    return doc


def test_the_second_shard_with_other_columns_fails_at_its_winner_naming_the_field(workspace):
    run_dir = init_run(workspace, plan_doc=plan("--float", "shard-00001"))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    doc = settle(run_dir)
    fixed = json.loads((run_dir / "schema.json").read_text())
    assert fixed["fields"] == [{"name": "id", "type": "int64"}, {"name": "score", "type": "double"}]
    assert fixed["fixed_by"] == {"shard_id": "shard-00000", "attempt_id": "attempt-0001"}
    assert [s["state"] for s in doc["shards"]] == ["succeeded", "failed"]
    assert doc["shards"][1]["reason"] == (
        "the client wrote columns other than the run's output schema (fixed by shard-00000/attempt-0001): field "
        "'score' is float where the run's is double")
    assert doc["retryable"] == ["shard-00001"]
    assert not (run_dir / "shards/shard-00001/winner.json").exists()
    assert not (run_dir / "shards/shard-00001/attempts/attempt-0001/manifest.json").exists()
    refused = tau("tau-collect", str(run_dir), "--destination", str(workspace / "out"))
    assert refused.returncode == 1 and "1 shard(s) have no winner (shard-00001)" in refused.stderr


def test_a_schema_the_plan_declares_is_the_runs_from_the_start(workspace):
    declared = [{"name": "id", "type": "int64"}, {"name": "score", "type": "float"}]
    run_dir = init_run(workspace, plan_doc=plan("--float", "shard-00001", output={"schema": declared}))
    fixed = json.loads((run_dir / "schema.json").read_text())
    assert (fixed["fields"], fixed["fixed_by"]) == (declared, None)
    assert tau("tau-submit", str(run_dir)).returncode == 0
    doc = settle(run_dir)
    assert [s["state"] for s in doc["shards"]] == ["failed", "succeeded"]
    assert doc["shards"][0]["reason"] == ("the client wrote columns other than the run's output schema (fixed by the "
                                          "plan): field 'score' is double where the run's is float")


def test_winners_of_two_schemas_from_an_older_run_are_refused_naming_shards_and_fields(workspace):
    run_dir = init_run(workspace, plan_doc=plan("--float", "shard-00001", scheduler={"profile": "local"}))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    settle(run_dir)
    # a run made before the schema was fixed at the first candidate: both shards won with their own columns
    (run_dir / "schema.json").unlink()
    assert tau("tau-retry", str(run_dir)).returncode == 0
    settle(run_dir)
    proc = tau("tau-collect", str(run_dir), "--destination", str(workspace / "out"))
    assert proc.returncode == 1
    assert json.loads(proc.stderr)["message"] == (
        "tau-collect: the winners have incompatible schemas: shard-00001 has other columns than shard-00000 "
        "(shard-00001: field 'score' is float where shard-00000's is double); refusing to collect")
