"""tau-retry: a new attempt for every retryable shard (no winner, newest attempt failed or unknown), submitted as
one sparse submission; idempotent, never touching a sealed shard."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path


from helpers import BIN, copy_run, env_for_tests, error_of, init_run, settle, snapshot, tau



def attempts_of(run_dir: Path) -> dict[str, list[str]]:
    shards = run_dir / "shards"
    return {sid: sorted(os.listdir(shards / sid / "attempts")) for sid in sorted(os.listdir(shards))}


def test_retry_creates_attempt_0002_for_exactly_the_failed_shard(settled, tmp_path):
    run_dir = copy_run(settled, tmp_path / "copy")
    proc = tau("tau-retry", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["submission_id"], doc["purpose"], doc["created"], doc["job_id"], doc["skipped"]) == (
        "submission-0002", "retry", True, "submission-0002", [])
    assert doc["tasks"] == [{"shard_id": "shard-00001", "attempt_id": "attempt-0002", "ordinal": 2,
                             "task_index": 1}]
    final = settle(run_dir)  # attempt-0002's folder is made by its allocation, which may not have started yet
    assert attempts_of(run_dir) == {"shard-00000": ["attempt-0001"], "shard-00001": ["attempt-0001", "attempt-0002"],
                                    "shard-00002": ["attempt-0001"], "shard-00003": ["attempt-0001"]}
    assert final["state"] == "succeeded"
    assert [(s["id"], s["winner"]) for s in final["shards"]] == [
        ("shard-00000", "attempt-0001"), ("shard-00001", "attempt-0002"), ("shard-00002", "attempt-0001"),
        ("shard-00003", "attempt-0001")]


def test_a_second_retry_creates_nothing(settled, tmp_path):
    run_dir = copy_run(settled, tmp_path / "copy")
    assert tau("tau-retry", str(run_dir)).returncode == 0
    second = tau("tau-retry", str(run_dir))  # attempt-0002 is live, or (observed first) has won: nothing to retry
    assert second.returncode == 0, second.stderr
    said = json.loads(second.stdout)
    assert said.pop("reason") in ("no shard is retryable: 1 shard(s) are live (pending, running or waiting for their "
                                  "winner), and a live shard is retried only once its attempt has failed",
                                  "no shard is retryable: every shard has a winner or is cancelled (tau-retry RUN "
                                  "--shard S --reopen lifts a shard's cancellation)")
    assert said == {"submission_id": None, "purpose": "retry", "job_id": None, "created": False,
                    "tasks": [], "skipped": [], "run_id": "run", "stopped": None,
                    "job_name": None, "state": None, "adopted": False, "windows": [],
                    "deferred": {"shards": 0, "holding": None, "unread": []},
                    "reopened": [], "exhausted": [], "waiting": [], "granted_request": None}
    settle(run_dir)
    third = tau("tau-retry", str(run_dir))  # every shard has won
    assert third.returncode == 0 and json.loads(third.stdout)["created"] is False
    assert sorted(os.listdir(run_dir / "submissions")) == ["submission-0001", "submission-0002"]
    assert attempts_of(run_dir)["shard-00001"] == ["attempt-0001", "attempt-0002"]


def test_concurrent_retries_converge_on_one_new_attempt(settled, tmp_path):
    run_dir = copy_run(settled, tmp_path / "copy")
    procs = [subprocess.Popen([str(BIN / "tau-retry"), str(run_dir)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env_for_tests()) for _ in range(3)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1] for o in outs]
    assert sorted(json.loads(out)["created"] for out, _ in outs) == [False, False, True]
    assert settle(run_dir)["state"] == "succeeded"
    assert sorted(os.listdir(run_dir / "submissions")) == ["submission-0001", "submission-0002"]
    assert attempts_of(run_dir)["shard-00001"] == ["attempt-0001", "attempt-0002"]


def test_retrying_a_sealed_shard_reports_it_as_skipped_and_submits_nothing(settled):
    before = snapshot(settled)
    proc = tau("tau-retry", str(settled), "--shard", "shard-00002")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["submission_id"], doc["created"], doc["tasks"]) == (None, False, [])
    assert doc["skipped"] == [{"shard_id": "shard-00002", "state": "succeeded",
                               "reason": "not retryable: sealed by its winner"}]
    assert snapshot(settled) == before


def test_retry_of_named_shards_retries_the_retryable_and_skips_the_sealed(settled, tmp_path):
    run_dir = copy_run(settled, tmp_path / "copy")
    proc = tau("tau-retry", str(run_dir), "--shard", "shard-00003", "--shard", "shard-00001")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [t["shard_id"] for t in doc["tasks"]] == ["shard-00001"]
    assert [s["shard_id"] for s in doc["skipped"]] == ["shard-00003"]
    settle(run_dir)


def test_retrying_a_shard_the_run_does_not_have_exits_66_and_changes_nothing(settled):
    before = snapshot(settled)
    proc = tau("tau-retry", str(settled), "--shard", "shard-99999")
    assert proc.returncode == 66
    err = error_of(proc)
    assert (err["code"], err["error"]) == (66, "not_found")
    assert err["message"] == "tau-retry: run 'run' has no shard 'shard-99999'"
    assert proc.stdout == ""
    assert snapshot(settled) == before


def test_a_shard_id_that_is_not_a_shard_id_exits_66(settled):
    proc = tau("tau-retry", str(settled), "--shard", "../shard-00001")
    assert proc.returncode == 66
    assert error_of(proc)["message"] == "tau-retry: run 'run' has no shard '../shard-00001'"


def test_retry_before_any_submission_submits_nothing(workspace):
    run_dir = init_run(workspace, records=20, shards=2)
    proc = tau("tau-retry", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["created"] is False
    assert not (run_dir / "submissions").exists() or os.listdir(run_dir / "submissions") == []
