"""Helpers for tests on the real Slurm test cluster (contrib/slurm/cluster-up.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from helpers import CLIENT, PYTHON, ROOT, tau

CLUSTER_UP = str(ROOT / "contrib" / "slurm" / "cluster-up.sh")
CLUSTER_DOWN = str(ROOT / "contrib" / "slurm" / "cluster-down.sh")


def cluster_is_up() -> bool:
    try:
        proc = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False
    return "is UP" in proc.stdout


def require_cluster() -> None:
    if not cluster_is_up():
        pytest.fail("the Slurm test cluster is not running: start it with `make slurm-up` (as root); "
                    "`make check` starts and stops it by itself")


def slurm_plan(records: int = 40, shards: int = 4, client_args: tuple[str, ...] = (), **extra) -> dict:
    doc = {"records": records, "shards": shards,
           "command": [PYTHON, CLIENT, "--rows-per-file", "10", *client_args],
           "scheduler": {"profile": "slurm", "slurm": {"partition": "debug", "time": "10:00"}},
           "output": {"format": "parquet", "rows_per_partition": 25},
           "windows": {"accounting_lag_seconds": 30, "preemption_seconds": 60, "submission_visibility_seconds": 30}}
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return doc


def init_slurm_run(workspace: Path, name: str = "run", **plan_args) -> Path:
    run_dir = workspace / name
    proc = tau("tau-init", str(run_dir), input=json.dumps(slurm_plan(**plan_args)))
    assert proc.returncode == 0, proc.stderr
    return run_dir


def job_id(run_dir: Path, submission: str = "submission-0001") -> str:
    return json.loads((run_dir / "submissions" / submission / "status.json").read_text())["job_id"]


def observe_reconcile(run_dir: Path) -> dict:
    obs = tau("tau-observe", str(run_dir))
    assert obs.returncode == 0, obs.stderr
    rec = tau("tau-reconcile", str(run_dir), input=obs.stdout)
    assert rec.returncode == 0, rec.stderr
    return json.loads(rec.stdout)


def wait_for(predicate, run_dir: Path, timeout: float = 120, pause: float = 1.0) -> dict:
    """observe | reconcile until predicate(status) holds; returns that status."""
    deadline = time.monotonic() + timeout
    while True:
        status = observe_reconcile(run_dir)
        if predicate(status):
            return status
        assert time.monotonic() < deadline, f"condition not reached in {timeout}s: {json.dumps(status)[:2000]}"
        time.sleep(pause)


def shard(status: dict, sid: str) -> dict:
    return next(s for s in status["shards"] if s["id"] == sid)


def settled(status: dict) -> bool:
    return not any(status["counts"][k] for k in ("pending", "running", "accounting_lag", "candidate"))


def squeue_tasks(job: str) -> list[str]:
    proc = subprocess.run(["squeue", "--noheader", "--array", "--format=%i|%T", f"--jobs={job}"],
                          capture_output=True, text=True, timeout=30)
    return [line for line in proc.stdout.splitlines() if line.strip()]


def env_with(**values: str) -> dict:
    env = dict(os.environ)
    env.update(values)
    return env
