"""Crash the real commands at their protocol failpoints (TAU_FAILPOINTS=<name>=crash: a real SIGKILL at that
step), then run them again without failpoints: each must recover to the end state of an uninterrupted run, with
no duplicate attempt, submission, collection or dataset, and no debris."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import (as_format_1, complete_run, copy_run, error_of, init_run, module_workspace, plan, settle, snapshot,
                     tau)

pytestmark = pytest.mark.slow


def crash(command: str, failpoint: str, *args: str):
    proc = tau(command, *args, env={"TAU_FAILPOINTS": f"{failpoint}=crash"})
    assert proc.returncode == -9, (proc.returncode, proc.stderr)  # SIGKILL: no clean-up, no error text
    assert proc.stdout == "" and proc.stderr == ""
    return proc


def attempts_of(run_dir: Path) -> dict[str, list[str]]:
    shards = run_dir / "shards"
    return {sid: sorted(os.listdir(shards / sid / "attempts")) if (shards / sid / "attempts").exists() else []
            for sid in sorted(os.listdir(shards))}


def outcome(doc: dict) -> list[tuple]:
    return [(s["id"], s["state"], s["attempt"], s["winner"]) for s in doc["shards"]]


def json_of(path: Path) -> dict:
    return json.loads(path.read_text())


# -- tau-init -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("declared", [False, True], ids=["plain", "declared-schema"])
def test_tau_init_killed_after_writing_the_shards_finishes_the_run_when_run_again(tmp_path, declared):
    doc = plan(output={"format": "parquet", "rows_per_partition": 30,
                       "schema": [{"name": "id", "type": "int64"}]}) if declared else plan()
    crashed_ws, clean_ws = tmp_path / "crashed", tmp_path / "clean"
    for ws in (crashed_ws, clean_ws):
        ws.mkdir(mode=0o700)
    run_dir = crashed_ws / "run"
    proc = tau("tau-init", str(run_dir), input=json.dumps(doc), env={"TAU_FAILPOINTS": "init.shards_written=crash"})
    assert proc.returncode == -9
    assert (run_dir / "plan.json").exists() and not (run_dir / "run.json").exists()
    observe = tau("tau-observe", str(run_dir))  # a run exists exactly when run.json does
    assert observe.returncode == 66
    assert "is not a tau run (no run.json)" in error_of(observe)["message"]
    again = tau("tau-init", str(run_dir), input=json.dumps(doc))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["created"] is True
    assert init_run(clean_ws, plan_doc=doc).name == "run"
    recovered, clean = snapshot(run_dir), snapshot(clean_ws / "run")
    assert sorted(recovered) == sorted(clean)  # the same entries: nothing missing, no debris
    for rel in clean:
        if rel in ("run.json", "schema.json"):
            strip = lambda rec: {k: v for k, v in rec.items() if k not in ("created_at", "fixed_at")}  # noqa: E731
            assert strip(json_of(run_dir / rel)) == strip(json_of(clean_ws / "run" / rel))
        else:
            assert recovered[rel] == clean[rel], rel


# -- tau-submit ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[tuple]:
    """How a run of the standard plan ends after one uninterrupted tau-submit."""
    ws = module_workspace(tmp_path_factory, "uninterrupted")
    run_dir = init_run(ws, records=20, shards=2, fail_first=("shard-00001",))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    return outcome(settle(run_dir))


@pytest.mark.parametrize("run_format, failpoint", [
    (2, "submit.prepared"), (2, "submit.submitted"),
    (1, "submit.prepared"), (1, "submit.attempts_published"), (1, "submit.submitted"),  # an earlier version's run
])
def test_tau_submit_killed_mid_protocol_submits_exactly_once_when_run_again(workspace, run_format, failpoint,
                                                                           uninterrupted):
    run_dir = init_run(workspace, records=20, shards=2, fail_first=("shard-00001",))
    if run_format == 1:
        as_format_1(run_dir)
    crash("tau-submit", failpoint, str(run_dir))
    journal = run_dir / "submissions" / "submission-0001"
    expected_state = "submitted" if failpoint == "submit.submitted" else "prepared"
    assert json_of(journal / "status.json")["state"] == expected_state
    published = [sid for sid, aids in attempts_of(run_dir).items()
                 if aids and (run_dir / "shards" / sid / "attempts" / aids[0] / "attempt.json").exists()]
    # format 2 writes nothing per shard (the status alone gives every task its attempt); format 1 publishes them
    assert published == ([] if failpoint == "submit.prepared" or run_format == 2 else ["shard-00000", "shard-00001"])
    assert not (journal / "local").exists()  # the executor never started

    again = tau("tau-submit", str(run_dir))
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert (doc["submission_id"], doc["state"]) == ("submission-0001", "submitted")
    assert [t["attempt_id"] for t in doc["tasks"]] == ["attempt-0001"] * 2
    final = settle(run_dir)
    assert outcome(final) == uninterrupted
    assert {k: v for k, v in final["counts"].items() if v} == {"succeeded": 1, "failed": 1}
    third = tau("tau-submit", str(run_dir))
    assert third.returncode == 0 and json.loads(third.stdout)["created"] is False
    assert sorted(os.listdir(run_dir / "submissions")) == ["submission-0001"]
    assert attempts_of(run_dir) == {"shard-00000": ["attempt-0001"], "shard-00001": ["attempt-0001"]}
    assert all((run_dir / f"shards/{sid}/shard.json").exists() == (run_format == 1) for sid in attempts_of(run_dir))


# -- tau-attempt (in the allocation) ------------------------------------------------------------------------------

@pytest.mark.parametrize("failpoint", ["attempt.recorded", "attempt.running", "attempt.manifest_written",
                                       "attempt.result_written"])
def test_an_attempt_killed_in_its_allocation_ends_failed_and_a_retry_wins(workspace, failpoint):
    run_dir = init_run(workspace, records=20, shards=2)
    # the supervisor passes TAU_FAILPOINTS to its tasks; tau-submit itself never reaches an attempt.* failpoint
    proc = tau("tau-submit", str(run_dir), env={"TAU_FAILPOINTS": f"{failpoint}=crash"})
    assert proc.returncode == 0, proc.stderr
    killed = settle(run_dir)  # may wait out the 5 s accounting-lag window
    assert [(s["id"], s["attempt"], s["winner"]) for s in killed["shards"]] == [
        ("shard-00000", "attempt-0001", None), ("shard-00001", "attempt-0001", None)]
    assert {s["state"] for s in killed["shards"]} <= {"failed", "unknown"}
    assert killed["retryable"] == ["shard-00000", "shard-00001"]
    for sid in ("shard-00000", "shard-00001"):
        folder = run_dir / "shards" / sid / "attempts" / "attempt-0001"
        assert json_of(folder / "attempt.json")["state"] in ("running", "failed")
        assert (folder / "manifest.json").exists() == (failpoint not in ("attempt.recorded", "attempt.running"))
        assert (folder / "result.json").exists() == (failpoint == "attempt.result_written")
        assert not (run_dir / "shards" / sid / "winner.json").exists()

    retry = tau("tau-retry", str(run_dir))
    assert retry.returncode == 0, retry.stderr
    assert [(t["shard_id"], t["attempt_id"]) for t in json.loads(retry.stdout)["tasks"]] == [
        ("shard-00000", "attempt-0002"), ("shard-00001", "attempt-0002")]
    final = settle(run_dir)
    assert final["state"] == "succeeded"
    assert [(s["id"], s["winner"]) for s in final["shards"]] == [("shard-00000", "attempt-0002"),
                                                                   ("shard-00001", "attempt-0002")]
    assert attempts_of(run_dir) == {sid: ["attempt-0001", "attempt-0002"] for sid in ("shard-00000", "shard-00001")}
    assert sorted(os.listdir(run_dir / "submissions")) == ["submission-0001", "submission-0002"]
    winners = tau("tau-winner", str(run_dir))
    assert winners.returncode == 0, winners.stderr


# -- tau-collect --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """A complete run of 80 records in 4 shards; copy it to collect."""
    ws = module_workspace(tmp_path_factory, "crash-collect")
    return complete_run(ws, fail_first=("shard-00001",))


@pytest.fixture(scope="module")
def reference(done, tmp_path_factory) -> dict[str, bytes]:
    """The dataset files of an uninterrupted collection of the complete run."""
    run_dir = copy_run(done, tmp_path_factory.mktemp("reference") / "ws")
    dest = run_dir.parent / "dataset"
    proc = tau("tau-collect", str(run_dir), "--destination", str(dest))
    assert proc.returncode == 0, proc.stderr
    return {name: (dest / name).read_bytes() for name in os.listdir(dest) if name.startswith("part-")}


def stage_debris(parent: Path) -> list[str]:
    return sorted(n for n in os.listdir(parent) if ".tau-stage-" in n or n.endswith(".tau-reserved"))


@pytest.mark.parametrize("failpoint", ["collect.planned", "collect.staged", "collect.renamed"])
def test_tau_collect_killed_mid_protocol_publishes_exactly_one_dataset_when_run_again(done, reference, tmp_path,
                                                                                       failpoint):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "dataset"
    crash("tau-collect", failpoint, str(run_dir), "--destination", str(dest))
    assert dest.exists() == (failpoint == "collect.renamed")
    assert len(stage_debris(dest.parent)) == (1 if failpoint == "collect.staged" else 0)
    journal = run_dir / "collections" / "collection-0001"
    assert json_of(journal / "status.json")["state"] in ("prepared", "running")

    again = tau("tau-collect", str(run_dir), "--destination", str(dest))
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert (doc["collection_id"], doc["state"], doc["records"]) == ("collection-0001", "succeeded", 80)
    assert stage_debris(dest.parent) == []
    assert os.listdir(run_dir / "collections") == ["collection-0001"]
    assert json_of(journal / "status.json")["state"] == "succeeded"
    assert sorted(os.listdir(dest)) == sorted([*reference, "_tau_collection.json"])
    assert {f["path"] for f in json_of(dest / "_tau_collection.json")["files"]} == set(reference)
    for name, data in reference.items():
        assert (dest / name).read_bytes() == data, name
    third = tau("tau-collect", str(run_dir), "--destination", str(dest))
    assert third.returncode == 0 and json.loads(third.stdout)["created"] is False
