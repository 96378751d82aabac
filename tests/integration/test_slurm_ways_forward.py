"""The ways forward on the real test cluster: a hung attempt stopped without giving up its shard
(tau-cancel --attempt: scancel of exactly its array task), a stalled client stopped by its own allocation
(windows.stall_action stop), and tau-drive bringing both runs to success with nothing else running."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import tau
from slurm import cancel_workspace_jobs, init_slurm_run, job_id, sacct_rows, submit, wait_for, wait_until

pytestmark = pytest.mark.slurm


@pytest.fixture
def jobs_cancelled(workspace):
    yield
    cancel_workspace_jobs(workspace)


def drive(run_dir: Path) -> dict:
    proc = tau("tau-drive", str(run_dir), "--interval", "2", timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def attempt(run_dir: Path, aid: str, name: str) -> dict:
    return json.loads((run_dir / "shards/shard-00001/attempts" / aid / name).read_text())


def test_a_hung_attempt_stopped_with_cancel_attempt_is_scancelled_alone_and_tau_drive_retries_it(
        cluster, workspace, jobs_cancelled):
    run_dir = init_slurm_run(workspace, client_args=("--hang-first", "shard-00001"))
    submit(run_dir)
    job = job_id(run_dir)
    progress = run_dir / "shards/shard-00001/attempts/attempt-0001/progress"
    wait_until(progress.exists, 120, "the hung client's progress")
    wait_for(lambda s: s["counts"]["succeeded"] == 3, run_dir, timeout=180)
    proc = tau("tau-cancel", str(run_dir), "--shard", "shard-00001", "--attempt")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert [(s["shard_id"], s["scheduler"]["job_id"], s["scheduler"]["task_index"]) for s in result["stopped"]] == [
        ("shard-00001", job, 1)]
    done = drive(run_dir)
    assert done["state"] == "succeeded" and done["status"]["shards"][1]["winner"] == "attempt-0002"
    first = attempt(run_dir, "attempt-0001", "attempt.json")
    assert first["state"] == "failed"
    assert first["terminal"]["reason"] == f"stopped by the user at {result['requested_at']}"
    rows = {row["job"]: row["state"] for row in sacct_rows(job)}
    assert rows[f"{job}_1"].startswith("CANCELLED")
    assert all(rows[f"{job}_{task}"] == "COMPLETED" for task in (0, 2, 3))  # scancel of exactly that task


def test_a_client_whose_progress_stands_still_is_stopped_by_its_allocation_and_retried(
        cluster, workspace, jobs_cancelled):
    run_dir = init_slurm_run(workspace, client_args=("--hang-first", "shard-00001"),
                             windows={"heartbeat_seconds": 1, "progress_stall_seconds": 5, "stall_action": "stop"})
    submit(run_dir)
    done = drive(run_dir)
    assert done["state"] == "succeeded" and done["status"]["shards"][1]["winner"] == "attempt-0002"
    stop = attempt(run_dir, "attempt-0001", "stop.json")
    assert stop["by"] == "stall" and stop["reason"].startswith("stalled: no progress for ")
    result = attempt(run_dir, "attempt-0001", "result.json")
    assert result["outcome"] == "failed" and result["error"] == stop["reason"]
