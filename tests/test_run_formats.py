"""Run formats (run.json `run_format`, tau-run(5)): a run made by this version writes nothing per shard, neither at
tau-init nor at tau-submit, and every command derives the same shards and attempts; a run made by an earlier version
of tau (format 1: a shard.json per shard, task lists, every attempt.json published by tau-submit, the whole-run
sealed-shard index) keeps working exactly, with every command, and keeps its format."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_cli_cancel import alive, process_groups, sleeping

from helpers import (BIN, as_format_1, env_for_tests, error_of, init_run, plan, quiesce, settle, snapshot, status,
                     tau, wait_settled)
from taulib import jsonio
from taulib.rundir.run import Run


def json_of(path: Path) -> dict:
    return json.loads(path.read_text())


def stop(run_dir: Path) -> None:
    assert tau("tau-cancel", str(run_dir)).returncode == 0
    deadline = time.monotonic() + 30
    while alive(process_groups(run_dir)):
        assert time.monotonic() < deadline, "the attempts were not stopped"
        time.sleep(0.2)


def allocation(run_dir: Path, submission: str, task: int) -> subprocess.CompletedProcess:
    """`tau-attempt run` as the local executor's allocation of task `task` of `submission`."""
    env = env_for_tests({"TAU_LOCAL_JOB_ID": submission, "TAU_LOCAL_TASK_ID": str(task)})
    return subprocess.run([str(BIN / "tau-attempt"), "run", str(run_dir), "--submission", submission],
                          capture_output=True, text=True, env=env, timeout=60)


# -- format 2: nothing per shard ------------------------------------------------------------------------------------

def test_tau_init_of_100000_shards_writes_nothing_per_shard_and_the_ranges_come_from_the_plan(workspace):
    run_dir = workspace / "run"
    proc = tau("tau-init", str(run_dir), input=json.dumps(plan(records=250_000, shards=100_000)))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["shard_count"] == 100_000
    assert sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")) == [
        "locks", "locks/run.lock", "plan.json", "run.json", "shards"]
    assert json_of(run_dir / "run.json")["run_format"] == 2
    with Run(str(run_dir)) as run:
        assert run.format == 2
        first, last = run.shard("shard-00000"), run.shard("shard-99999")
    assert (first["record_start"], first["record_end"]) == (0, 2)
    assert (last["index"], last["record_start"], last["record_end"]) == (99_999, 249_997, 250_000)


@pytest.mark.slow
def test_tau_submit_writes_nothing_per_shard_and_every_task_has_its_attempt(workspace):
    run_dir = init_run(workspace, plan_doc=sleeping(60, records=40, shards=4,
                                                    scheduler={"profile": "local", "local": {"max_parallel": 1}}))
    proc = tau("tau-submit", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    assert [t["attempt_id"] for t in json.loads(proc.stdout)["tasks"]] == ["attempt-0001"] * 4
    journal = run_dir / "submissions" / "submission-0001"
    sub = json_of(journal / "plan.json")
    assert sub["task_ranges"] == [{"first": 0, "count": 4, "ordinal": 1}] and "tasks" not in sub
    doc = json.loads(tau("tau-status", str(run_dir)).stdout)  # the one slot runs shard-00000; the rest wait
    assert [(s["id"], s["attempt"], s["attempts"]) for s in doc["shards"]] == [
        (f"shard-0000{i}", "attempt-0001", 1) for i in range(4)]
    assert [s["state"] for s in doc["shards"][1:]] == ["pending"] * 3, doc["shards"]
    assert set(os.listdir(run_dir / "shards")) <= {"shard-00000"}  # made by its allocation, if it started yet
    again = tau("tau-submit", str(run_dir))
    assert again.returncode == 0 and json.loads(again.stdout)["created"] is False
    stop(run_dir)
    done = wait_settled(run_dir)
    assert done["state"] == "cancelled", done["counts"]
    # the attempts that never started were ended by tau-reconcile, which published their revision 1 first
    record = json_of(run_dir / "shards/shard-00003/attempts/attempt-0001/attempt.json")
    assert (record["revision"], record["state"], record["terminal"]["classification"]) == (2, "failed", "cancelled")
    assert record["created_at"] == sub["created_at"] and record["scheduler"] == {
        "executor": "local", "job_id": "submission-0001", "task_index": 3}


@pytest.mark.slow
def test_a_late_allocation_is_stale_when_a_newer_attempt_has_no_record_yet(workspace):
    """A retry's attempt exists from its submission's status alone: the fence of the older allocation sees it."""
    run_dir = init_run(workspace, records=20, shards=2, fail_first=("shard-00001",))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    assert settle(run_dir)["retryable"] == ["shard-00001"]
    from taulib.lifecycle import retry
    from taulib.executors.local import supervisor

    spawn, supervisor.spawn = supervisor.spawn, lambda run, sid: None  # no executor: attempt-0002 stays unstarted
    try:
        with Run(str(run_dir)) as run:
            assert retry.retry(run)["submission_id"] == "submission-0002"
    finally:
        supervisor.spawn = spawn
    first = run_dir / "shards" / "shard-00001" / "attempts"
    assert os.listdir(first) == ["attempt-0001"]
    before = snapshot(run_dir / "shards")
    late = allocation(run_dir, "submission-0001", 1)
    assert late.returncode == 77, late.stderr
    assert error_of(late)["message"] == "tau-attempt: shard-00001/attempt-0001 is stale: a newer attempt exists"
    assert snapshot(run_dir / "shards") == before
    mine = allocation(run_dir, "submission-0002", 1)
    assert mine.returncode == 0, mine.stderr
    assert json.loads(mine.stdout)["winner"]["published"] is True
    record = json_of(first / "attempt-0002" / "attempt.json")
    assert (record["revision"], record["state"], record["submission_id"]) == (3, "succeeded", "submission-0002")
    final = status(run_dir)
    assert final["state"] == "succeeded" and final["shards"][1]["winner"] == "attempt-0002"


# -- format 1: runs made by earlier versions ------------------------------------------------------------------------

@pytest.mark.slow
def test_a_format_1_run_observes_reconciles_retries_collects_and_keeps_its_format(workspace):
    run_dir = as_format_1(init_run(workspace, records=40, shards=4, fail_first=("shard-00002",)))
    shards_before = {sid: (run_dir / "shards" / sid / "shard.json").read_bytes()
                     for sid in os.listdir(run_dir / "shards")}
    proc = tau("tau-submit", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    sub = json_of(run_dir / "submissions" / "submission-0001" / "plan.json")
    assert "task_ranges" not in sub and [t["shard_id"] for t in sub["tasks"]] == [f"shard-0000{i}" for i in range(4)]
    for i in range(4):  # tau-submit published every attempt, as that version did
        record = json_of(run_dir / f"shards/shard-0000{i}/attempts/attempt-0001/attempt.json")
        assert (record["submission_id"], record["ordinal"]) == ("submission-0001", 1)
    doc = settle(run_dir)
    assert {k: v for k, v in doc["counts"].items() if v} == {"succeeded": 3, "failed": 1}
    assert doc["retryable"] == ["shard-00002"]
    retried = tau("tau-retry", str(run_dir))
    assert retried.returncode == 0, retried.stderr
    assert "tasks" in json_of(run_dir / "submissions" / "submission-0002" / "plan.json")
    assert json_of(run_dir / "shards/shard-00002/attempts/attempt-0002/attempt.json")["state"] in (
        "submitted", "running", "succeeded")  # published by tau-retry before its status said submitted
    final = settle(run_dir)
    assert final["state"] == "succeeded"
    assert [s["winner"] for s in final["shards"]] == ["attempt-0001", "attempt-0001", "attempt-0002", "attempt-0001"]
    winners = tau("tau-winner", str(run_dir))
    assert winners.returncode == 0, winners.stderr
    dest = workspace / "data"
    collected = tau("tau-collect", str(run_dir), "--destination", str(dest))
    assert collected.returncode == 0, collected.stderr
    assert json.loads(collected.stdout)["records"] == 40
    assert sorted(pq.read_table(dest, columns=["id"]).column("id").to_pylist()) == list(range(40))
    assert "run_format" not in json_of(run_dir / "run.json")
    assert {sid: (run_dir / "shards" / sid / "shard.json").read_bytes() for sid in shards_before} == shards_before


def test_a_format_1_shard_without_its_shard_json_fails_its_attempt_as_before(workspace):
    run_dir = as_format_1(init_run(workspace, records=20, shards=2))
    (run_dir / "shards" / "shard-00001" / "shard.json").unlink()
    assert tau("tau-submit", str(run_dir)).returncode == 0
    quiesce(run_dir)
    log = (run_dir / "submissions/submission-0001/local/task-00001.log").read_text().splitlines()
    error = json.loads(log[-1])
    assert (error["code"], error["error"], error["command"]) == (66, "not_found", "tau-attempt")
    assert error["message"] == f"tau-attempt: {run_dir}/shards/shard-00001/shard.json does not exist"
    doc = wait_settled(run_dir)
    assert [(s["id"], s["state"]) for s in doc["shards"]] == [("shard-00000", "succeeded"), ("shard-00001", "failed")]


@pytest.mark.slow
def test_the_whole_run_index_of_an_earlier_version_is_still_read_and_never_written(workspace):
    run_dir = as_format_1(init_run(workspace, records=20, shards=2))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    assert settle(run_dir)["state"] == "succeeded"
    shutil.rmtree(run_dir / "index")
    legacy = run_dir / "index" / "sealed.json"  # what that version's tau-reconcile left
    legacy.parent.mkdir(mode=0o700)
    legacy.write_bytes(jsonio.canonical({"kind": "tau.sealed-index", "schema_version": 1, "run_id": "run",
                                         "shard_count": 2, "revision": 4, "updated_at": jsonio.now_rfc3339(),
                                         "ordinals": "1,1", "durations": "3,4"}))
    legacy.chmod(0o600)
    before = legacy.read_bytes()
    (run_dir / "shards" / "shard-00001" / "winner.json").unlink()  # by hand: only the index says sealed now
    doc = status(run_dir)
    assert [(s["id"], s["state"], s["reason"]) for s in doc["shards"]] == [
        ("shard-00000", "succeeded", "sealed by its winner"), ("shard-00001", "succeeded", "sealed by its winner")]
    assert doc["eta_seconds"] is None  # every shard sealed: the run ended
    assert legacy.read_bytes() == before and os.listdir(run_dir / "index") == ["sealed.json"]
    legacy.unlink()  # without the cache, the shard's own records say what it is
    assert [s["state"] for s in status(run_dir)["shards"]] == ["succeeded", "candidate"]
