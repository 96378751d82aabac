"""A run's life on the real Slurm test cluster: an array that succeeds, a requeued task, a preempted task.

Each test has its own run under `workspace`; every job it started is cancelled (by id) when it ends.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import Sampler, tau
from slurm import (attempt_record, init_slurm_run, job_id, observation_of, observe_reconcile,
                   run_cmd, sacct_rows, settled, shard, submit, task_states, wait_for, wait_task_state, wait_until)

pytestmark = pytest.mark.slurm


class ReadinessWatcher(Sampler):
    """Samples an attempt's readiness.json every 20 ms in a thread: the distinct snapshots, in order."""

    interval = 0.02

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.snapshots: list[tuple[int, str, int]] = []

    def sample(self) -> None:
        try:
            doc = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return
        snap = (doc["revision"], doc["state"], doc["restarts"])
        if not self.snapshots or self.snapshots[-1] != snap:
            self.snapshots.append(snap)

    def states(self) -> list[str]:
        return [s[1] for s in self.snapshots]


def _queue_reasons(job: str) -> dict[int, tuple[str, str]]:
    proc = run_cmd("squeue", "--noheader", "--array", "--format=%i|%T|%r", f"--jobs={job}", check=False)
    out = {}
    for line in proc.stdout.splitlines():
        ident, state, reason = line.split("|")
        task = ident.partition("_")[2]
        if task.isdigit():
            out[int(task)] = (state, reason)
    return out


def test_an_array_that_succeeds_is_seen_pending_and_running_from_the_queue_then_wins_and_collects_every_record(
        cluster, workspace, extra_jobs):
    # each client runs 15 s: long enough that the observations (a few seconds apart on a busy machine) see it
    run_dir = init_slurm_run(workspace, client_args=("--sleep", "15"))
    summary = submit(run_dir)
    assert summary["created"] is True and summary["job_id"] == job_id(run_dir)
    script = (run_dir / "submissions" / "submission-0001" / "job.sh").read_text()
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert directives == sorted(directives)
    assert "#SBATCH --array=0-3" in directives

    seen_live: set[str] = set()

    def watch(status: dict) -> bool:
        for s in status["shards"]:
            if s["state"] in ("pending", "running"):
                obs = observation_of(status, s["id"])
                assert obs is not None and obs["source"] == "queue", s
                assert obs["state"] == s["state"] and obs["terminal"] is False, s
                seen_live.add(s["state"])
            assert s["state"] not in ("failed", "unknown", "accounting_lag"), s
        return settled(status)

    status = wait_for(watch, run_dir, timeout=90, pause=0.5)
    assert seen_live == {"pending", "running"}
    assert status["state"] == "succeeded", status
    assert status["counts"]["succeeded"] == 4 and status["retryable"] == []
    for s in status["shards"]:
        assert s["state"] == "succeeded" and s["winner"] == "attempt-0001", s
        assert s["reason"] == "sealed by its winner"

    destination = workspace / "dataset"
    proc = tau("tau-collect", str(run_dir), "--destination", str(destination), "--wait")  # a CPU job under Slurm
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["state"], result["records"], result["partitions"]) == ("succeeded", 40, 2), result
    ids = sorted(pq.read_table(destination, columns=["id"]).column("id").to_pylist())
    assert ids == list(range(40))


SHAPES = [("parquet", ()), ("csv", ("--format", "csv", "--rows-per-partition", "15")),
          ("jsonl", ("--format", "jsonl", "--rows-per-partition", "40"))]


def test_one_run_is_collected_in_three_shapes_by_slurm_jobs_byte_for_byte_as_the_local_executor_collects_them(
        cluster, workspace, tmp_path, extra_jobs):
    from helpers import complete_run

    run_dir = init_slurm_run(workspace)  # 40 records in 4 shards, 25 rows per partition
    submit(run_dir)
    status = wait_for(settled, run_dir, timeout=90, pause=0.5)
    assert status["state"] == "succeeded", status
    local_ws = tmp_path / "local"
    local_ws.mkdir(mode=0o700)
    local = complete_run(local_ws, records=40, shards=4, output={"format": "parquet", "rows_per_partition": 25})
    for number, (fmt, options) in enumerate(SHAPES, start=1):
        proc = tau("tau-collect", str(run_dir), "--destination", str(workspace / f"data-{fmt}"), *options, "--wait")
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)
        assert (result["collection_id"], result["state"], result["format"], result["records"]) == (
            f"collection-{number:04d}", "succeeded", fmt, 40), result
        assert result["job_id"] is not None  # written by the collection's CPU job, from its plan record
        plan = json.loads((run_dir / "collections" / f"collection-{number:04d}" / "plan.json").read_text())
        assert (plan["format"], plan["rows_per_partition"]) == (fmt, result["rows_per_partition"])
        here = tau("tau-collect", str(local), "--destination", str(local_ws / f"data-{fmt}"), *options)
        assert here.returncode == 0, here.stderr
        assert [(f["path"], f["rows"], f["sha256"]) for f in json.loads(here.stdout)["files"]] == \
            [(f["path"], f["rows"], f["sha256"]) for f in result["files"]]  # the same bytes, either executor
        for f in result["files"]:
            slurm_bytes = (workspace / f"data-{fmt}" / f["path"]).read_bytes()
            assert slurm_bytes == (local_ws / f"data-{fmt}" / f["path"]).read_bytes(), f
    ids = sorted(pq.read_table(workspace / "data-parquet", columns=["id"]).column("id").to_pylist())
    assert ids == list(range(40))
    again = tau("tau-collect", str(run_dir), "--destination", str(workspace / "data-csv"))  # the plan's shape
    assert again.returncode == 73, again.stderr


def test_a_requeued_task_goes_pending_then_the_same_attempt_restarts_cleanly_and_wins(cluster, workspace, extra_jobs):
    run_dir = init_slurm_run(workspace, records=10, shards=1, client_args=("--sleep", "15"))
    # widen the windows between readiness writes a little, so that the sampler sees every snapshot
    submit(run_dir, env={"TAU_FAILPOINTS": "attempt.running=delay:1.5"})
    job = job_id(run_dir)
    readiness = run_dir / "shards" / "shard-00000" / "attempts" / "attempt-0001" / "readiness.json"
    with ReadinessWatcher(readiness) as watcher:
        wait_task_state(job, 0, "RUNNING")
        wait_until(lambda: "running" in watcher.states(), 30, "the client runs")
        run_cmd("scontrol", "requeue", f"{job}_0")

        # held for cred_expire (5 s) with reason BeginTime, then scheduled again (a pending row's reason is
        # squeue's code alone, None while it gives none)
        status = wait_for(lambda st: shard(st, "shard-00000")["state"] == "pending"
                          and observation_of(st, "shard-00000")["reason"] == "BeginTime", run_dir, timeout=30,
                          pause=0.3)
        assert shard(status, "shard-00000")["reason"] == ("queued (BeginTime: not before its begin time; a requeued "
                                                          "task waits here)")
        obs = observation_of(status, "shard-00000")
        assert (obs["state"], obs["source"], obs["terminal"]) == ("pending", "queue", False), obs
        assert shard(status, "shard-00000")["evidence"]["attempt_state"] == "running"

        status = wait_for(settled, run_dir, timeout=60)
        wait_until(lambda: watcher.snapshots and watcher.snapshots[-1][1] == "stopped"
                   and watcher.snapshots[-1][2] == 1, 10, "the final readiness")

    assert status["state"] == "succeeded", status
    s = shard(status, "shard-00000")
    assert (s["state"], s["attempt"], s["winner"]) == ("succeeded", "attempt-0001", "attempt-0001"), s
    assert sorted(p.name for p in (run_dir / "shards" / "shard-00000" / "attempts").iterdir()) == ["attempt-0001"]
    attempt = attempt_record(run_dir, "shard-00000")
    assert (attempt["state"], attempt["restarts"]) == ("succeeded", 1), attempt
    assert watcher.snapshots == [(1, "starting", 0), (2, "running", 0), (3, "stopped", 0),
                                 (4, "restarting", 1), (5, "running", 1), (6, "stopped", 1)], watcher.snapshots
    final = attempt_record(run_dir, "shard-00000", name="readiness.json")
    assert final["message"] is None  # stopped after a complete result, not by a signal
    # the attempt sealed its shard before its job's end reached accounting (which lags): wait for the last row
    states = wait_until(lambda: (lambda rows: rows if rows[-1:] != ["RUNNING"] else None)(
        [r["state"] for r in sacct_rows(job) if r["job"] == f"{job}_0"]), 30, "the task's end in accounting")
    assert states == ["REQUEUED", "COMPLETED"], states


def test_a_preempted_task_is_requeued_by_slurm_and_its_attempt_goes_on_to_win(cluster, workspace, extra_jobs):
    run_dir = init_slurm_run(workspace, records=20, shards=2, client_args=("--sleep", "20"))
    submit(run_dir)
    job = job_id(run_dir)
    wait_until(lambda: task_states(job) == {0: "RUNNING", 1: "RUNNING"}, 30, "both tasks running (both CPUs)")
    for sid in ("shard-00000", "shard-00001"):
        wait_until(lambda sid=sid: (run_dir / "shards" / sid / "attempts" / "attempt-0001" / "client.log").exists(),
                   30, f"the client of {sid} runs")
    time.sleep(1)  # the attempts have handed over to their clients
    proc = run_cmd("sbatch", "--parsable", "--partition=high", "--job-name=tau-test-high",
                   f"--output={workspace}/high-%j.out", "--wrap", "sleep 5")
    high = proc.stdout.strip()
    extra_jobs.append(high)

    preempted = wait_until(lambda: [t for t, (st, why) in _queue_reasons(job).items()
                                    if st == "PENDING" and why == "BeginTime"], 30, "a task requeued by preemption")
    assert len(preempted) == 1
    task = preempted[0]
    sid = f"shard-{task:05d}"
    other = f"shard-{1 - task:05d}"
    wait_until(lambda: any(r["job"] == f"{job}_{task}" and r["state"] == "PREEMPTED" for r in sacct_rows(job)), 15,
               "a PREEMPTED row in sacct -D")

    status = observe_reconcile(run_dir)
    s = shard(status, sid)
    obs = observation_of(status, sid)
    if s["state"] == "pending":  # still held after the requeue (BeginTime) or waiting for a CPU
        assert (obs["state"], obs["source"], obs["terminal"]) == ("pending", "queue", False), obs
    else:  # already running again
        assert s["state"] == "running" and obs["state"] == "running", s
    assert shard(status, other)["state"] == "running", status

    status = wait_for(settled, run_dir, timeout=90)
    assert status["state"] == "succeeded", status
    assert shard(status, sid)["winner"] == "attempt-0001"
    assert attempt_record(run_dir, sid)["restarts"] == 1
    assert attempt_record(run_dir, other)["restarts"] == 0
    for s in status["shards"]:
        assert (s["state"], s["winner"]) == ("succeeded", "attempt-0001"), s
    # the attempt sealed its shard before its job's end reached accounting (which lags): wait for the last row
    states = wait_until(lambda: (lambda rows: rows if rows[-1:] != ["RUNNING"] else None)(
        [r["state"] for r in sacct_rows(job) if r["job"] == f"{job}_{task}"]), 30, "the task's end in accounting")
    assert states == ["PREEMPTED", "COMPLETED"], states
