"""tau-attempt run: the in-allocation side. An allocation writes nothing until it proves it is the persisted
attempt's scheduler identity; a late, duplicate or foreign allocation exits 77 and writes nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers import BIN, CLIENT, PYTHON, env_for_tests, error_of, init_run, settle, snapshot, tau


@pytest.fixture(scope="module")
def settled(tmp_path_factory) -> Path:
    """A settled run of 4 shards whose shard-00001 failed its first attempt (not retried)."""
    ws = tmp_path_factory.mktemp("attempt") / "ws"
    ws.mkdir(mode=0o700)
    run_dir = init_run(ws, fail_first=("shard-00001",))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    settle(run_dir)
    return run_dir


def allocation(run_dir: Path, submission: str = "submission-0001", **env: str) -> subprocess.CompletedProcess:
    """Run `tau-attempt run` as an allocation with exactly the scheduler variables given."""
    full = env_for_tests()
    for name in [k for k in full if k.startswith(("TAU_LOCAL_", "SLURM_"))]:
        del full[name]
    full.update(env)
    return subprocess.run([str(BIN / "tau-attempt"), "run", str(run_dir), "--submission", submission],
                          capture_output=True, text=True, env=full, timeout=60)


# (case id, submission, scheduler variables, exit code, message after "tau-attempt: ")
REFUSED = [
    ("finished-attempt", "submission-0001", {"TAU_LOCAL_JOB_ID": "submission-0001", "TAU_LOCAL_TASK_ID": "1"}, 77,
     "shard-00001/attempt-0001 is already failed; a duplicate allocation writes nothing"),
    ("sealed-shard", "submission-0001", {"TAU_LOCAL_JOB_ID": "submission-0001", "TAU_LOCAL_TASK_ID": "0"}, 77,
     "shard-00000 already has a winner; this allocation writes nothing"),
    ("foreign-job-id", "submission-0001", {"TAU_LOCAL_JOB_ID": "submission-0007", "TAU_LOCAL_TASK_ID": "1"}, 77,
     "allocation submission-0007_1 does not match the persisted scheduler identity of shard-00001/attempt-0001; a "
     "late or duplicate allocation writes nothing"),
    ("task-not-in-submission", "submission-0001", {"TAU_LOCAL_JOB_ID": "submission-0001", "TAU_LOCAL_TASK_ID": "7"},
     77, "submission 'submission-0001' has no task 7"),
    ("unknown-submission", "submission-0042", {"TAU_LOCAL_JOB_ID": "submission-0042", "TAU_LOCAL_TASK_ID": "1"},
     66, "run 'run' has no submission 'submission-0042'"),
    ("task-id-not-a-number", "submission-0001", {"TAU_LOCAL_JOB_ID": "submission-0001", "TAU_LOCAL_TASK_ID": "one"},
     77, "TAU_LOCAL_TASK_ID is not a task index; tau-attempt runs only inside an allocation"),
    ("slurm-job-not-an-array", "submission-0001", {"SLURM_JOB_ID": "4242"}, 77,
     "this Slurm job is not an array task (SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID unset)"),
    ("slurm-task-of-a-local-run", "submission-0001",
     {"SLURM_JOB_ID": "4243", "SLURM_ARRAY_JOB_ID": "4242", "SLURM_ARRAY_TASK_ID": "1"}, 77,
     "allocation 4242_1 does not match the persisted scheduler identity of shard-00001/attempt-0001; a late or "
     "duplicate allocation writes nothing"),
]


@pytest.mark.parametrize("submission,env,code,message", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_an_allocation_that_is_not_the_persisted_attempt_writes_nothing(settled, submission, env, code, message):
    before = snapshot(settled)
    proc = allocation(settled, submission, **env)
    assert proc.returncode == code, proc.stderr
    err = error_of(proc)
    assert (err["code"], err["command"]) == (code, "tau-attempt")
    assert err["message"] == "tau-attempt: " + message
    assert proc.stdout == ""
    assert snapshot(settled) == before


def test_a_late_allocation_of_a_retried_shard_is_stale_and_writes_nothing(workspace):
    run_dir = init_run(workspace, records=10, shards=1,
                       command=[PYTHON, CLIENT, "--fail-first", "shard-00000", "--sleep", "1"])
    assert tau("tau-submit", str(run_dir)).returncode == 0
    assert settle(run_dir)["retryable"] == ["shard-00000"]
    assert tau("tau-retry", str(run_dir)).returncode == 0  # attempt-0002 now sleeps before it writes its result
    first = run_dir / "shards/shard-00000/attempts/attempt-0001"
    before = snapshot(first)
    proc = allocation(run_dir, TAU_LOCAL_JOB_ID="submission-0001", TAU_LOCAL_TASK_ID="0")
    assert proc.returncode == 77, proc.stderr
    assert error_of(proc)["message"] == "tau-attempt: shard-00000/attempt-0001 is stale: a newer attempt exists"
    assert snapshot(first) == before
    final = settle(run_dir)
    assert final["state"] == "succeeded" and final["shards"][0]["winner"] == "attempt-0002"


def test_the_allocation_started_by_the_executor_records_result_manifest_and_winner(settled):
    attempt = settled / "shards/shard-00002/attempts/attempt-0001"
    record = json.loads((attempt / "attempt.json").read_text())
    assert (record["state"], record["terminal"]["classification"]) == ("succeeded", "succeeded")
    result = json.loads((attempt / "result.json").read_text())
    assert (result["outcome"], result["exit_code"], result["actual_records"]) == ("complete", 0, 20)
    assert json.loads((attempt / "readiness.json").read_text())["state"] == "stopped"
    manifest = json.loads((attempt / "manifest.json").read_text())
    assert sum(f["rows"] for f in manifest["files"]) == 20
    assert json.loads((settled / "shards/shard-00002/winner.json").read_text())["attempt_id"] == "attempt-0001"
    failed = settled / "shards/shard-00001/attempts/attempt-0001"
    assert json.loads((failed / "result.json").read_text())["error"] == "the client exited with status 3"
    assert not (failed / "manifest.json").exists()
    assert not (settled / "shards/shard-00001/winner.json").exists()
