"""Services beside the client on the real Slurm test cluster: stand-in model servers started in every array task,
their readiness recorded, their endpoints given to the client, stopped by scancel and by a requeue (after which the
same attempt writes RESTARTING and wins), and GPUs that Slurm itself schedules (the test cluster's four fake GPUs,
contrib/slurm/cluster-up.sh) split between the backends of each task, disjoint across tasks.

Each test has its own run under `workspace`; every job it started is cancelled (by id) when it ends.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from services_fixtures import attempt_dir, backend_pids, record, revisions, running, services_plan

from helpers import init_run, tau
from slurm import job_id, run_cmd, settled, shard, submit, wait_for, wait_task_state, wait_until

pytestmark = pytest.mark.slurm


def slurm_services_plan(pids: Path, **args) -> dict:
    doc = services_plan(pids, **args)
    doc["scheduler"] = {"profile": "slurm", "slurm": {"partition": "debug", "time": "10:00",
                                                      **doc["scheduler"].get("slurm", {})}}
    doc["windows"] = {"heartbeat_seconds": 2, "accounting_lag_seconds": 30, "preemption_seconds": 60,
                      "submission_visibility_seconds": 30}
    return doc


def allocation_log(run_dir: Path, job: str, task: int = 0) -> str:
    path = run_dir / "submissions" / "submission-0001" / f"slurm-{job}_{task}.out"
    return path.read_text() if path.exists() else ""


def test_two_backends_in_an_array_task_get_ready_serve_the_client_and_are_gone_after_it(cluster, workspace,
                                                                                        extra_jobs):
    pids = workspace / "pids"
    run_dir = init_run(workspace, plan_doc=slurm_services_plan(pids, server=("--stagger", "1.5", "--child")))
    submit(run_dir)
    job = job_id(run_dir)
    status = wait_for(settled, run_dir, timeout=120)
    assert status["state"] == "succeeded", status
    seen = revisions(allocation_log(run_dir, job))
    assert [(state, said, client) for _, state, said, client in seen] == [
        ("pending", "generator 0/2 pending", "waiting"), ("starting", "generator 0/2 starting", "waiting"),
        ("starting", "generator 1/2 starting", "waiting"), ("ready", "generator 2/2 ready", "waiting"),
        ("ready", "generator 2/2 ready", "running"), ("stopped", "generator 0/2 stopped", "ended")]
    numbers = [n for n, *_ in seen]
    assert numbers[0] == 1 and numbers == sorted(set(numbers))
    rows = pq.read_table(attempt_dir(run_dir) / "dataset").to_pylist()
    assert {r["answer"] for r in rows} == {f"{r['prompt'][::-1].upper()} [stand-in generator-{1 + r['id'] % 2}]"
                                           for r in rows}
    assert len({r["url"] for r in rows}) == 2
    started = backend_pids(run_dir, pids)
    assert len(started) == 4 and running(started) == set()


def test_a_backend_killed_under_slurm_fails_the_attempt_naming_it_and_the_retry_wins(cluster, workspace, extra_jobs):
    pids = workspace / "pids"
    run_dir = init_run(workspace, plan_doc=slurm_services_plan(pids, client=("--sleep", "5")))
    submit(run_dir)
    ready = wait_until(lambda: (r := record(run_dir, "readiness.json")) and r["client"] == "running" and r, 60,
                       "the client running", pause=0.2)
    os.kill(ready["deployments"][0]["backends"][0]["pid"], signal.SIGKILL)
    status = wait_for(lambda st: shard(st, "shard-00000")["state"] == "failed", run_dir, timeout=60)
    assert shard(status, "shard-00000")["reason"].startswith(
        "service 'generator' backend 1 was killed by signal 9 while the client ran")
    assert record(run_dir, "result.json")["error_code"] == "exited"
    assert running(backend_pids(run_dir, pids)) == set()
    assert tau("tau-retry", str(run_dir)).returncode == 0
    status = wait_for(settled, run_dir, timeout=120)
    assert status["state"] == "succeeded" and shard(status, "shard-00000")["winner"] == "attempt-0002"


@pytest.mark.parametrize("when, how", [("readiness", "scancel"), ("client", "scancel"), ("client", "tau-cancel")])
def test_scancel_or_tau_cancel_while_services_start_or_while_the_client_runs_leaves_no_backend(
        cluster, workspace, extra_jobs, when, how):
    pids = workspace / "pids"
    server = ("--never-ready", "--child") if when == "readiness" else ("--child",)
    run_dir = init_run(workspace, plan_doc=slurm_services_plan(pids, server=server, client=("--sleep", "120"),
                                                               service={"stop_grace": 2}))
    submit(run_dir)
    job = job_id(run_dir)
    wait_until(lambda: (r := record(run_dir, "readiness.json"))
               and all(b["pid"] for b in r["deployments"][0]["backends"])
               and (when == "readiness" or r["client"] == "running"), 60, f"the {when}", pause=0.2)
    wait_until(lambda: len(list(pids.glob("*.child.pid"))) == 2, 30, "the servers' children", pause=0.2)
    started = backend_pids(run_dir, pids)
    if how == "scancel":
        run_cmd("scancel", f"{job}_0")
    else:
        assert tau("tau-cancel", str(run_dir)).returncode == 0
    gone_by = time.monotonic() + 2 + 5 + 3  # the services' grace, Slurm's KillWait, a look
    wait_until(lambda: not running(started), gone_by - time.monotonic(), "every backend gone", pause=0.2)
    state = "failed" if how == "scancel" else "cancelled"
    status = wait_for(lambda st: shard(st, "shard-00000")["state"] == state, run_dir, timeout=60)
    assert "CANCELLED" in shard(status, "shard-00000")["reason"] or "cancel" in shard(status, "shard-00000")["reason"]


def test_a_requeued_task_writes_restarting_starts_its_services_again_and_the_same_attempt_wins(cluster, workspace,
                                                                                              extra_jobs):
    pids = workspace / "pids"
    run_dir = init_run(workspace, plan_doc=slurm_services_plan(pids, client=("--sleep", "15")))
    submit(run_dir)
    job = job_id(run_dir)
    wait_task_state(job, 0, "RUNNING")
    first = wait_until(lambda: (r := record(run_dir, "readiness.json")) and r["client"] == "running" and r, 60,
                       "the client running", pause=0.2)
    before = {b["pid"] for b in first["deployments"][0]["backends"]}
    run_cmd("scontrol", "requeue", f"{job}_0")
    wait_until(lambda: not running(before), 15, "the first allocation's backends gone", pause=0.2)
    status = wait_for(settled, run_dir, timeout=120)
    assert status["state"] == "succeeded", status
    s = shard(status, "shard-00000")
    assert (s["attempt"], s["winner"]) == ("attempt-0001", "attempt-0001")
    seen = []
    for _, state, _, client in revisions(allocation_log(run_dir, job)):
        if not seen or seen[-1] != (state, client):  # backends ready together or one after the other: same phases
            seen.append((state, client))
    life = [("pending", "waiting"), ("starting", "waiting"), ("ready", "waiting"), ("ready", "running")]
    assert seen == [*life, ("stopped", "ended"),  # the requeue's signal: the client and the services stopped
                    ("restarting", "waiting"), *life[1:], ("stopped", "ended")], seen
    final = record(run_dir, "readiness.json")
    assert (final["restarts"], final["state"]) == (1, "stopped")
    after = {b["pid"] for b in final["deployments"][0]["backends"]}
    assert not after & before and running(after | before) == set()
    assert record(run_dir, "endpoints.json")["revision"] == 2  # published again by the restarted allocation


@pytest.mark.parametrize("option", ["gpus-per-task", "gres"])
def test_two_array_tasks_of_two_gpus_each_split_their_own_devices_and_the_client_gets_none(cluster, workspace,
                                                                                           extra_jobs, option):
    pids = workspace / "pids"
    plan = slurm_services_plan(pids, shards=2, records=4, service={"gpus": 1}, client=("--sleep", "3"))
    plan["scheduler"]["slurm"].update(gpus=2, gpu_option=option)
    run_dir = init_run(workspace, plan_doc=plan)
    submit(run_dir)
    job = job_id(run_dir)
    script = (run_dir / "submissions" / "submission-0001" / "job.sh").read_text()
    assert ("#SBATCH --gpus-per-task=2" in script and "#SBATCH --ntasks=1" in script) if option == "gpus-per-task" \
        else "#SBATCH --gres=gpu:2" in script
    status = wait_for(settled, run_dir, timeout=120)
    assert status["state"] == "succeeded", status
    given = []
    for index in (0, 1):
        readiness = record(run_dir, "readiness.json", index)
        devices = [b["devices"] for b in readiness["deployments"][0]["backends"]]
        assert all(len(d) == 1 for d in devices) and devices[0] != devices[1]
        for backend, seen in enumerate(devices, start=1):
            log = (attempt_dir(run_dir, index) / "services" / f"generator-{backend}.log").read_text()
            assert f"devices {seen[0]!r}" in log.splitlines()[0]  # CUDA_VISIBLE_DEVICES, as the server saw it
        client = json.loads((pids / f"client-shard-{index:05d}-attempt-0001.json").read_text())
        assert client["env"]["CUDA_VISIBLE_DEVICES"] == ""
        assert client["env"]["SLURM_JOB_GPUS"] == ",".join(sorted(d[0] for d in devices))  # Slurm's own word
        given.append({d[0] for d in devices})
    assert not given[0] & given[1] and given[0] | given[1] <= {"0", "1", "2", "3"}
    rows = [r for r in run_cmd("sacct", "-n", "-P", "-X", "-j", job, "-o", "JobID,AllocTRES").stdout.splitlines()]
    assert all("gres/gpu=2" in r for r in rows if r.startswith(f"{job}_")), rows
