"""tau-init NEW --from OLD: a new run (another plan: a declared schema, another client) reuses every winner of an
old one that holds under its own rules, runs only the rest, and collects byte for byte what a fresh run collects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import PYTHON, error_of, quiesce, snapshot, tau
from test_cli_run_environment import PROBE

pytestmark = pytest.mark.slow

DOUBLE = [{"name": "id", "type": "int64"}, {"name": "score", "type": "double"}]


def plan(*args: str, **extra) -> dict:
    doc = {"records": 40, "shards": 4, "command": [PYTHON, str(PROBE), *args],
           "scheduler": {"profile": "local", "local": {"max_parallel": 2}},
           "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}
    doc.update(extra)
    return doc


def init(run_dir: Path, doc: dict, *args: str) -> dict:
    proc = tau("tau-init", str(run_dir), *args, input=json.dumps(doc))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def drive(run_dir: Path, expect: int = 0) -> dict:
    proc = tau("tau-drive", str(run_dir), "--interval", "0.3")
    assert proc.returncode == expect, proc.stderr
    return json.loads(proc.stdout)


def old_run(workspace: Path) -> Path:
    """A run whose shard-00003 wrote a float column: three winners, and shard-00003 exhausted."""
    old = workspace / "old"
    init(old, plan("--float", "shard-00003", retry={"max_attempts": 1},
                   scheduler={"profile": "local", "local": {"max_parallel": 1}}))
    done = drive(old, expect=1)
    assert [s["state"] for s in done["status"]["shards"]] == ["succeeded", "succeeded", "succeeded", "exhausted"]
    quiesce(old)  # the drive is done once the records say so; the supervisor still records its last task's end
    return old


def test_a_new_run_adopts_every_valid_winner_runs_only_the_rest_and_collects_what_a_fresh_run_does(workspace):
    old = old_run(workspace)
    before = snapshot(old)
    new = workspace / "new"
    made = init(new, plan(output={"schema": DOUBLE}), "--from", str(old))
    assert made["adopted"] == {"from": str(old), "run_id": "old", "adoptable": 3, "submission_id": "submission-0001",
                               "tasks": 3, "not_adopted": []}
    adoption = json.loads((new / "submissions/submission-0001/plan.json").read_text())
    assert (adoption["purpose"], adoption["executor"]) == ("adopt", "local")
    assert adoption["adopt_from"]["run_dir"] == str(old)
    done = drive(new)
    assert done["state"] == "succeeded"
    for index in range(3):
        manifest = json.loads((new / f"shards/shard-0000{index}/attempts/attempt-0001/manifest.json").read_text())
        old_winner = json.loads((old / f"shards/shard-0000{index}/winner.json").read_text())
        assert manifest["adopted_from"] == {"run_dir": str(old), "run_id": "old", "shard_id": f"shard-0000{index}",
                                            "attempt_id": "attempt-0001",
                                            "manifest_sha256": old_winner["manifest"]["sha256"]}
        assert manifest["provenance"] == json.loads((new / "run.json").read_text())["plan"]["sha256"]
        result = json.loads((new / f"shards/shard-0000{index}/attempts/attempt-0001/result.json").read_text())
        assert result["outcome"] == "complete"
    ran = json.loads((new / "shards/shard-00003/attempts/attempt-0001/manifest.json").read_text())
    assert "adopted_from" not in ran  # the one shard without a valid winner ran its client
    plans = sorted(json.loads(p.read_text())["purpose"] for p in new.glob("submissions/submission-*/plan.json"))
    assert plans == ["adopt", "initial"]
    assert snapshot(old) == before  # nothing of OLD changes
    fresh = workspace / "fresh"
    init(fresh, plan(output={"schema": DOUBLE}))
    assert drive(fresh)["state"] == "succeeded"
    for run_dir, out in ((new, "new-out"), (fresh, "fresh-out")):
        proc = tau("tau-collect", str(run_dir), "--destination", str(workspace / out))
        assert proc.returncode == 0, proc.stderr
    files = sorted(p.name for p in (workspace / "new-out").iterdir() if p.suffix == ".parquet")
    assert files and files == sorted(p.name for p in (workspace / "fresh-out").iterdir() if p.suffix == ".parquet")
    for name in files:
        assert (workspace / "new-out" / name).read_bytes() == (workspace / "fresh-out" / name).read_bytes()


def test_a_winner_whose_columns_are_not_the_new_schema_is_not_adopted_and_says_why(workspace):
    old = old_run(workspace)
    floats = [{"name": "id", "type": "int64"}, {"name": "score", "type": "float"}]
    made = init(workspace / "new", plan(output={"schema": floats}), "--from", str(old))
    assert made["adopted"]["adoptable"] == 0 and made["adopted"]["submission_id"] is None
    assert made["adopted"]["not_adopted"][0] == {
        "shard_id": "shard-00000", "from_shard_id": "shard-00000",
        "reason": "its columns are not the new run's output schema: field 'score' is double where the run's is float"}
    assert len(made["adopted"]["not_adopted"]) == 3


def test_a_winner_file_changed_since_it_won_fails_its_adoption_and_the_shard_runs_its_client(workspace):
    old = old_run(workspace)
    part = old / "shards/shard-00001/attempts/attempt-0001/dataset/part-00000.parquet"
    data = bytearray(part.read_bytes())
    data[10] ^= 0xFF  # the bytes change; the size stays
    part.write_bytes(bytes(data))
    new = workspace / "new"
    init(new, plan(output={"schema": DOUBLE}), "--from", str(old))
    done = drive(new)
    assert done["state"] == "succeeded"
    first = json.loads((new / "shards/shard-00001/attempts/attempt-0001/result.json").read_text())
    assert first["outcome"] == "failed"
    assert first["error"] == ("the files of run 'old''s winner of shard-00001 are not those its manifest recorded "
                              "(changed since it was published); not adopted")
    second = json.loads((new / "shards/shard-00001/attempts/attempt-0002/manifest.json").read_text())
    assert "adopted_from" not in second


def test_from_a_folder_that_is_not_a_run_is_refused_before_anything_is_created(workspace):
    (workspace / "nothing").mkdir(mode=0o700)
    proc = tau("tau-init", str(workspace / "new"), "--from", str(workspace / "nothing"), input=json.dumps(plan()))
    assert proc.returncode == 66
    assert error_of(proc)["message"] == (f"tau-init: '{workspace / 'nothing'}' is not a tau run (no run.json); "
                                         "create it with tau-init")
    assert not (workspace / "new").exists()
