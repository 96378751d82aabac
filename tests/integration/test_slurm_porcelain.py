"""The client's environment and tau-cancel on the real Slurm test cluster: a relative client from `/` and from a
cron-like `env -i` runs the same program in the same environment on every attempt, and tau-cancel of a running
array (running and pending tasks) leaves every shard cancelled, no job behind, and nothing started again.

Each test has its own run under `workspace`; every job it started is cancelled (by id) when it ends.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers import BIN, PYTHON, env_for_tests, tau
from slurm import (cancel_workspace_jobs, job_id, observe_reconcile, shard, slurm_plan, squeue_tasks, task_states,
                   wait_for, wait_job_gone, wait_until)
from test_cli_run_environment import PROBE, client_dir, seen

pytestmark = pytest.mark.slurm


@pytest.fixture
def cleanup(workspace):
    yield
    cancel_workspace_jobs(workspace, [])


def init_in(folder, doc):
    proc = subprocess.run([str(BIN / "tau-init"), "run"], input=json.dumps(doc), capture_output=True, text=True,
                          cwd=folder, env=env_for_tests())
    assert proc.returncode == 0, proc.stderr
    return folder / "run"


def test_a_relative_client_runs_the_same_way_from_slash_and_from_env_minus_i(cluster, workspace, cleanup):
    folder = client_dir(workspace)
    doc = slurm_plan(records=20, shards=2, command=["./probe.py", "--fail", "--report", "."], env={"FOO": "x"},
                     retry={"max_attempts": 5})
    run_dir = init_in(folder, doc)
    proc = subprocess.run([str(BIN / "tau-submit"), str(run_dir)], capture_output=True, text=True, cwd="/",
                          env=env_for_tests({"NOISE": "from the shell"}))
    assert proc.returncode == 0, proc.stderr
    wait_for(lambda s: s["counts"]["failed"] == 2, run_dir, timeout=180)
    cron = {"PATH": "/usr/bin:/bin", "TAU_LOCK_TIMEOUT": "10"}
    proc = subprocess.run([str(BIN / "tau-retry"), str(run_dir)], capture_output=True, text=True, cwd="/", env=cron)
    assert proc.returncode == 0, proc.stderr
    wait_for(lambda s: all(x["attempts"] == 2 and x["state"] == "failed" for x in s["shards"]), run_dir,
             timeout=180)

    def own(report: dict) -> dict:  # what the run defines: not Slurm's nor tau's per-attempt variables
        return {k: v for k, v in report["env"].items()
                if not k.startswith(("SLURM_", "TAU_")) and k not in ("LC_CTYPE", "CUDA_VISIBLE_DEVICES")}

    first, retry = seen(folder, "shard-00001", "attempt-0001"), seen(folder, "shard-00001", "attempt-0002")
    assert own(first) == own(retry) == {"PATH": env_for_tests()["PATH"], "FOO": "x"}
    assert first["cwd"] == retry["cwd"] == str(folder)
    assert first["argv0"] == retry["argv0"] == str(folder / "probe.py")
    assert first["env"]["SLURM_ARRAY_TASK_ID"] == retry["env"]["SLURM_ARRAY_TASK_ID"] == "1"
    logs = tau("tau-logs", str(run_dir), "shard-00001")
    assert logs.returncode == 0
    assert logs.stdout.startswith("probe: failing shard-00001 attempt-0002, as asked\n")


def test_cancelling_a_running_array_cancels_running_and_pending_tasks_and_nothing_starts_again(cluster, workspace,
                                                                                              cleanup):
    doc = slurm_plan(records=40, shards=4, command=[PYTHON, str(PROBE), "--sleep", "120"],
                     scheduler={"slurm": {"max_parallel": 2}})
    run_dir = init_in(workspace, doc)
    assert tau("tau-submit", str(run_dir)).returncode == 0
    job = job_id(run_dir)
    wait_until(lambda: sorted(task_states(job).values()) == ["PENDING", "PENDING", "RUNNING", "RUNNING"], 90,
               "two running and two pending tasks", pause=0.5)
    observe_reconcile(run_dir)
    proc = tau("tau-cancel", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["cancelled"] == [f"shard-{i:05d}" for i in range(4)] and result["problem"] is None
    assert sorted(s["shard_id"] for s in result["stopped"]) == [f"shard-{i:05d}" for i in range(4)]
    wait_job_gone(job, timeout=120)
    assert squeue_tasks(job) == []
    status = wait_for(lambda s: s["counts"]["cancelled"] == 4 and not s["counts"]["running"], run_dir, timeout=120)
    assert status["state"] == "cancelled"
    for i in range(4):
        assert shard(status, f"shard-{i:05d}")["reason"] == f"cancelled by the user at {result['requested_at']}"
    assert json.loads(tau("tau-retry", str(run_dir)).stdout)["tasks"] == []
    assert json.loads(tau("tau-submit", str(run_dir)).stdout)["created"] is False
    assert len(list((run_dir / "submissions").iterdir())) == 1
    assert squeue_tasks(job) == []
