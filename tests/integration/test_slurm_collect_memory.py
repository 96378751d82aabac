"""A collection task out of memory on the real test cluster (tau-collect(1) "Tasks"): the cluster enforces memory
without cgroups (`JobAcctGatherParams=OverMemoryKill`, a step sampled every 30 s above its --mem is killed), so a
collection asking for 64M (scheduler.slurm.collect_mem) whose tasks import pyarrow (about 85 MiB) and are held 40 s
after writing their partitions (a failpoint, so that a sample sees them) is killed: sacct says FAILED, slurmstepd's
line in the task's output names the memory kill. With retry.escalate growing memory the unfinished tasks are rerun
asking for 256M and the collection is published, the grown request journaled; without it the collection fails with
OUT_OF_MEMORY at once, its stage removed, and tau-collect --wait exits 1 saying so. Nothing is published before the
bytes are complete, either way."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from helpers import BIN, env_for_tests, error_of, tau
from slurm import data_bytes, finished_run, record, sacct_rows

pytestmark = pytest.mark.slurm

HELD = {"TAU_FAILPOINTS": "collect.task_written=delay:40"}  # every task, after its files, before its record
LIMIT_64M = "> 67108864), being killed"


def collect_watching(run_dir: Path, dest: Path, *options: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """tau-collect --wait with every task held, watched twice a second: the destination never appears before every
    task has its record. (its process, what was seen wrong)"""
    argv = [str(BIN / "tau-collect"), str(run_dir), "--destination", str(dest), "--wait", *options]
    proc = subprocess.Popen(argv, env=env_for_tests(HELD), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wrong = []
    deadline = time.monotonic() + 420
    while proc.poll() is None:
        if dest.exists():  # published: every task recorded before it
            folder = run_dir / "collections" / "collection-0001"
            plan = json.loads((folder / "plan.json").read_text())
            recorded = [k for k in range(plan["tasks"]) if (folder / f"task-{k:05d}.json").exists()]
            if len(recorded) < plan["tasks"]:
                wrong.append(f"published with tasks {recorded} of {plan['tasks']} recorded")
        if time.monotonic() > deadline:
            proc.kill()
        time.sleep(0.5)
    out, err = proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), wrong


def killed_for_memory(run_dir: Path, collection: str, job: str, tasks: range) -> None:
    """sacct says each task of `job` FAILED (OverMemoryKill; a cgroup cluster says OUT_OF_MEMORY), and its output
    holds slurmstepd's line naming the 64M limit."""
    states = {row["job"]: row["state"] for row in sacct_rows(job)}
    assert {f"{job}_{k}": states.get(f"{job}_{k}") for k in tasks} == {f"{job}_{k}": "FAILED" for k in tasks}, states
    for k in tasks:
        out = (run_dir / "collections" / collection / f"slurm-{job}_{k}.out").read_text()
        assert "exceeded memory limit (" in out and LIMIT_64M in out, out


def test_a_collection_task_out_of_memory_is_rerun_with_more_memory_and_published_its_grown_request_journaled(
        cluster, workspace, extra_jobs):
    run_dir = finished_run(workspace, records=40, shards=2, scheduler={"slurm": {
        "partition": "debug", "time": "10:00", "mem": "1G", "collect_mem": "64M"}},
        retry={"escalate": {"mem": 4, "max_mem": "1G"}})
    dest = workspace / "data"
    proc, wrong = collect_watching(run_dir, dest, "--tasks", "2")
    assert proc.returncode == 0, proc.stderr
    assert not wrong, wrong
    result = json.loads(proc.stdout)
    assert (result["collection_id"], result["state"], result["records"], result["created"]) == (
        "collection-0001", "succeeded", 40, True)
    folder = run_dir / "collections" / "collection-0001"
    status = record(run_dir, "collections/collection-0001/status.json")
    assert (status["state"], status["rerun"], status["resources"]) == ("succeeded", 1,
                                                                      {"mem": "256M", "time": "10:00"}), status
    [first] = status["ended"]
    assert first["resources"] == {"mem": "64M", "time": "10:00"} and first["job_id"] != status["job_id"]
    assert first["tasks"] == [
        {"task": k, "state": "out_of_memory", "accounting": "FAILED", "resources": {"mem": "256M", "time": "10:00"}}
        for k in (0, 1)], first
    assert "#SBATCH --mem=64M\n" in (folder / "job.sh").read_text()
    rerun = (folder / "job-r1.sh").read_text()
    assert "#SBATCH --mem=256M\n" in rerun and "#SBATCH --array=0-1\n" in rerun, rerun
    killed_for_memory(run_dir, "collection-0001", first["job_id"], range(2))
    grown = {row["job"]: row["state"] for row in sacct_rows(status["job_id"])}
    assert {grown.get(f"{status['job_id']}_{k}") for k in (0, 1)} == {"COMPLETED"}, grown
    for k in (0, 1):
        assert record(run_dir, f"collections/collection-0001/task-{k:05d}.json")["job_id"] == status["job_id"]
    assert not [n for n in os.listdir(workspace) if ".tau-stage-" in n]
    # the same bytes as a collection never short of memory (one task, not held: done before any sample)
    plain = workspace / "plain"
    again = tau("tau-collect", str(run_dir), "--destination", str(plain), "--tasks", "1", "--wait", timeout=300)
    assert again.returncode == 0, again.stderr
    assert data_bytes(dest) == data_bytes(plain) and len(data_bytes(dest)) == 2


def test_without_growth_a_collection_task_out_of_memory_fails_the_collection_with_out_of_memory_at_once(
        cluster, workspace, extra_jobs):
    run_dir = finished_run(workspace, records=40, shards=2,
                           scheduler={"slurm": {"partition": "debug", "time": "10:00", "collect_mem": "64M"}})
    dest = workspace / "data"
    proc, wrong = collect_watching(run_dir, dest)
    assert not wrong, wrong
    assert proc.returncode == 1, proc.stderr
    status = record(run_dir, "collections/collection-0001/status.json")
    job = status["job_id"]
    reason = (f"its Slurm job {job} ended without publishing the dataset: task 0 of 1 ran out of memory "
              "(OUT_OF_MEMORY) asking for 64M, and retry.escalate grows no memory: a rerun would ask the same and be "
              "killed the same; collect from a new run (tau-init --from) whose plan asks for more")
    error = error_of(proc)
    assert (error["error"], error["message"]) == ("check_failed",
                                                  f"tau-collect: collection collection-0001 failed: {reason}")
    assert error["details"] == {"collection_id": "collection-0001", "cause": "OUT_OF_MEMORY"}, error
    assert (status["state"], status["cause"], status["reason"]) == ("failed", "OUT_OF_MEMORY", reason)
    assert "rerun" not in status and "resources" not in status
    assert status["ended"] == [{"job_id": job, "resources": {"mem": "64M", "time": "10:00"}, "tasks": [
        {"task": 0, "state": "out_of_memory", "accounting": "FAILED", "resources": {"mem": "64M", "time": "10:00"}}]}]
    killed_for_memory(run_dir, "collection-0001", job, range(1))
    folder = run_dir / "collections" / "collection-0001"
    assert not (folder / "job-r1.sh").exists()  # the request that was killed is never asked again
    assert not dest.exists() and not [n for n in os.listdir(workspace) if ".tau-stage-" in n]
    # the next tau-collect makes a new collection (here without the hold: it is done before memory is sampled)
    again = tau("tau-collect", str(run_dir), "--destination", str(dest), "--wait", timeout=300)
    assert again.returncode == 0, again.stderr
    assert (json.loads(again.stdout)["collection_id"], json.loads(again.stdout)["state"]) == ("collection-0002",
                                                                                              "succeeded")
