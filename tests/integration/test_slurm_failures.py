"""Failures on the real Slurm test cluster: a failing task, scancel (running and pending), a time limit, and the
scheduler's own daemons going away. Each ends in the right reconciled status, with the reasons behind it.

Each test has its own run under `workspace`; every job it started is cancelled (by id) when it ends, and a daemon
it stops is always started again.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from helpers import tau
from slurm import (attempt_record, cancel_workspace_jobs, clients_running, daemon_stopped, init_slurm_run, job_id,
                   observation_of, observe_reconcile, run_cmd, sacct_rows, settled, shard, submit, task_states,
                   two_tasks_running, wait_for, wait_job_gone, wait_until, epilog_passes_held)

pytestmark = pytest.mark.slurm

WINDOWS = {"accounting_lag_seconds": 30, "preemption_seconds": 60, "submission_visibility_seconds": 30}


@pytest.fixture
def jobs_cancelled(workspace):
    """Every job the test's runs recorded is cancelled at the end."""
    yield
    cancel_workspace_jobs(workspace)


def test_a_task_that_exits_3_fails_with_that_status_and_a_sparse_retry_makes_the_run_succeed(
        cluster, workspace, jobs_cancelled):
    run_dir = init_slurm_run(workspace, client_args=("--fail-first", "shard-00001"))
    submit(run_dir)
    status = wait_for(settled, run_dir, timeout=60)
    assert status["state"] == "failed" and status["retryable"] == ["shard-00001"], status
    failed = shard(status, "shard-00001")
    assert failed["state"] == "failed" and failed["winner"] is None, failed
    assert re.search(r"\b(status|exit code) 3\b", failed["reason"]), failed
    attempt = attempt_record(run_dir, "shard-00001")
    assert attempt["state"] == "failed" and attempt["terminal"]["exit_code"] == 3, attempt
    assert "exited with status 3" in attempt["terminal"]["reason"]
    for sid in ("shard-00000", "shard-00002", "shard-00003"):
        assert shard(status, sid)["state"] == "succeeded"

    proc = tau("tau-retry", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    retry = json.loads(proc.stdout)
    assert retry["submission_id"] == "submission-0002" and retry["purpose"] == "retry", retry
    assert [(t["shard_id"], t["attempt_id"], t["task_index"]) for t in retry["tasks"]] == [
        ("shard-00001", "attempt-0002", 1)]
    script = (run_dir / "submissions" / "submission-0002" / "job.sh").read_text()
    assert "#SBATCH --array=1\n" in script
    assert retry["job_id"] == job_id(run_dir, "submission-0002") != job_id(run_dir)

    status = wait_for(settled, run_dir, timeout=60)
    assert status["state"] == "succeeded", status
    assert shard(status, "shard-00001")["winner"] == "attempt-0002"


def test_scancel_of_a_running_task_fails_its_shard_as_cancelled_from_accounting_and_spares_the_others(
        cluster, workspace, jobs_cancelled):
    # 20 s: the cancellation is terminal in accounting within about 6 s, well before the other task ends
    run_dir, job = two_tasks_running(workspace, sleep=20)
    status = observe_reconcile(run_dir)
    assert [s["state"] for s in status["shards"]] == ["running", "running"], status

    run_cmd("scancel", f"{job}_1")
    status = wait_for(lambda st: shard(st, "shard-00001")["state"] == "failed", run_dir, timeout=30, pause=0.5)
    obs = observation_of(status, "shard-00001")
    assert (obs["state"], obs["source"], obs["terminal"]) == ("cancelled", "accounting", True), obs
    assert "CANCELLED" in obs["reason"]
    assert "CANCELLED" in shard(status, "shard-00001")["reason"]
    assert status["retryable"] == ["shard-00001"]
    attempt = attempt_record(run_dir, "shard-00001")
    assert attempt["state"] == "failed" and attempt["terminal"]["classification"] == "cancelled", attempt
    # slurmctld marks the job CANCELLED (and accounting says so) at once, while the allocation's tau-attempt may
    # still be handling its SIGTERM: wait for it to record the stop
    readiness = wait_until(lambda: (lambda r: r if r["state"] == "stopped" else None)(
        attempt_record(run_dir, "shard-00001", name="readiness.json")), 15, "readiness records the stop")
    assert readiness["state"] == "stopped" and "signal" in readiness["message"], readiness
    assert not (run_dir / "shards" / "shard-00001" / "attempts" / "attempt-0001" / "result.json").exists()
    # the other task is untouched: still running from the queue
    other = shard(status, "shard-00000")
    assert other["state"] == "running" and observation_of(status, "shard-00000")["source"] == "queue", other
    # tau-attempt records the stop as soon as the signal arrives, so the cancelled task may still be COMPLETING in
    # the queue while its processes end; it leaves the queue, and the other task runs on
    states = task_states(job)
    assert states[0] == "RUNNING" and states.get(1) in (None, "COMPLETING"), states
    wait_until(lambda: task_states(job) == {0: "RUNNING"}, 30, "the cancelled task leaves the queue", pause=0.3)

    status = wait_for(settled, run_dir, timeout=60)
    assert shard(status, "shard-00000")["state"] == "succeeded"
    assert shard(status, "shard-00000")["winner"] == "attempt-0001"
    assert shard(status, "shard-00001")["state"] == "failed"
    assert status["state"] == "failed" and status["retryable"] == ["shard-00001"], status


def test_scancel_of_a_pending_task_leaves_no_accounting_row_so_its_shard_waits_out_the_lag_then_is_unknown(
        cluster, workspace, jobs_cancelled):
    run_dir = init_slurm_run(workspace, records=30, shards=3, client_args=("--sleep", "10"),
                             scheduler={"profile": "slurm",
                                        "slurm": {"partition": "debug", "time": "10:00", "max_parallel": 1}},
                             windows=dict(WINDOWS, accounting_lag_seconds=8))
    submit(run_dir)
    assert "#SBATCH --array=0-2%1\n" in (run_dir / "submissions" / "submission-0001" / "job.sh").read_text()
    job = job_id(run_dir)
    clients_running(run_dir, job, {0: "RUNNING", 1: "PENDING", 2: "PENDING"})
    # task 1 is not the array's master record (that is the highest task, 2): cancelled while pending, it gets no row
    run_cmd("scancel", f"{job}_1")
    wait_until(lambda: 1 not in task_states(job), 15, "task 1 gone from squeue", pause=0.2)

    deadlines = set()
    lag_seen_at = None
    while True:
        status = observe_reconcile(run_dir)
        now = time.time()
        s = shard(status, "shard-00001")
        obs = observation_of(status, "shard-00001")
        assert not obs["terminal"], obs  # never failed or succeeded: absence is not guessed
        if s["state"] == "pending" and lag_seen_at is None:
            # for a moment sacct may still list the task in the array's pending record (`JOB_[1-2%1]`): that row is
            # non-terminal accounting evidence, and the shard waits; it is never read as an outcome
            assert (obs["state"], obs["source"]) == ("pending", "accounting"), obs
            time.sleep(0.5)
            continue
        assert s["state"] in ("accounting_lag", "unknown"), s
        assert obs["source"] == "absent", obs
        if s["state"] == "unknown":
            break
        assert obs["state"] == "accounting_lag" and obs["deadline"]["window"] == "accounting_lag", obs
        assert "not yet in accounting" in obs["reason"]
        deadlines.add(obs["deadline"]["at"])
        lag_seen_at = lag_seen_at or now
        assert now - lag_seen_at < 20, "the accounting-lag window did not end"
        time.sleep(0.5)
    assert lag_seen_at is not None and len(deadlines) == 1, deadlines  # the deadline is fixed when first seen
    assert obs["state"] == "unknown" and obs["deadline"] is None, obs
    assert "past the accounting-lag deadline" in s["reason"], s
    assert status["retryable"] == ["shard-00001"], status
    assert not [r for r in sacct_rows(job) if r["job"] == f"{job}_1"]

    status = wait_for(settled, run_dir, timeout=60)
    assert [(s["id"], s["state"]) for s in status["shards"]] == [
        ("shard-00000", "succeeded"), ("shard-00001", "unknown"), ("shard-00002", "succeeded")], status
    assert status["state"] == "unknown" and status["retryable"] == ["shard-00001"], status
    assert attempt_record(run_dir, "shard-00001")["state"] == "submitted"  # never started, never finalised


def test_a_task_past_its_time_limit_fails_its_shard_as_timed_out(cluster, workspace, jobs_cancelled):
    run_dir = init_slurm_run(workspace, records=10, shards=1, client_args=("--sleep", "300"),
                             scheduler={"profile": "slurm", "slurm": {"partition": "debug", "time": "0:01"}})
    submit(run_dir)
    assert "#SBATCH --time=0:01\n" in (run_dir / "submissions" / "submission-0001" / "job.sh").read_text()
    status = wait_for(lambda st: shard(st, "shard-00000")["state"] == "failed", run_dir, timeout=150, pause=1)
    s = shard(status, "shard-00000")
    obs = observation_of(status, "shard-00000")
    assert (obs["state"], obs["source"], obs["terminal"]) == ("timed_out", "accounting", True), obs
    assert "TIMEOUT" in obs["reason"] and "TIMEOUT" in s["reason"], s
    assert status["state"] == "failed" and status["retryable"] == ["shard-00000"], status
    attempt = attempt_record(run_dir, "shard-00000")
    assert attempt["state"] == "failed" and attempt["terminal"]["classification"] == "timed_out", attempt
    assert [r["state"] for r in sacct_rows(job_id(run_dir))] == ["TIMEOUT"]


def test_with_slurmdbd_down_accounting_is_unavailable_and_nothing_is_guessed_until_it_returns(
        cluster, workspace, jobs_cancelled):
    run_dir, job = two_tasks_running(workspace, sleep=20)
    wait_until(lambda: sorted((r["job"], r["state"]) for r in sacct_rows(job)) == [
        (f"{job}_0", "RUNNING"), (f"{job}_1", "RUNNING")], 15, "both tasks running in accounting")
    status = observe_reconcile(run_dir)
    assert [s["state"] for s in status["shards"]] == ["running", "running"], status
    cancelled_obs = run_dir / "shards" / "shard-00001" / "attempts" / "attempt-0001" / "observation.json"

    with daemon_stopped("slurmdbd"):
        status = observe_reconcile(run_dir)
        assert status["sources"]["accounting"] == "unavailable", status["sources"]
        assert status["sources"]["queue"] == "observed"
        assert "sacct" in status["sources"]["reason"], status["sources"]
        for s in status["shards"]:
            obs = observation_of(status, s["id"])
            assert s["state"] == "running" and obs["source"] == "queue" and not obs["terminal"], s

        # a task that ends while accounting is down: the queue no longer shows it and nothing is guessed
        run_cmd("scancel", f"{job}_1")
        wait_until(lambda: 1 not in task_states(job), 20, "task 1 gone from squeue", pause=0.2)
        # the epilog hook's own pass, started while the task was COMPLETING, may still be writing its evidence
        # (still running): wait for it, and keep the hook's later passes out while the bytes are compared
        with epilog_passes_held(run_dir):
            before = cancelled_obs.read_bytes()
            for _ in range(2):
                status = observe_reconcile(run_dir)
                assert status["sources"]["accounting"] == "unavailable"
                s = shard(status, "shard-00001")
                obs = observation_of(status, "shard-00001")
                assert s["state"] == "running", s  # not accounting_lag, not failed: the last evidence stands
                assert (obs["state"], obs["source"], obs["terminal"], obs["deadline"]) == ("running", "queue",
                                                                                            False, None), obs
                assert cancelled_obs.read_bytes() == before
                assert attempt_record(run_dir, "shard-00001")["state"] == "running"
                time.sleep(1)
            assert not status["changes"], status["changes"]

    # slurmdbd is back: slurmctld hands it the records it kept, and the cancellation becomes evidence
    status = wait_for(lambda st: st["sources"]["accounting"] == "observed"
                      and shard(st, "shard-00001")["state"] == "failed", run_dir, timeout=60)
    obs = observation_of(status, "shard-00001")
    assert (obs["state"], obs["source"], obs["terminal"]) == ("cancelled", "accounting", True), obs
    assert status["retryable"] == ["shard-00001"]
    proc = tau("tau-retry", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    status = wait_for(settled, run_dir, timeout=90)
    assert status["state"] == "succeeded", status
    assert [(s["id"], s["winner"]) for s in status["shards"]] == [("shard-00000", "attempt-0001"),
                                                                  ("shard-00001", "attempt-0002")]


def test_with_slurmctld_down_the_queue_is_unavailable_and_the_evidence_stands_until_it_restarts(
        cluster, workspace, jobs_cancelled):
    # the clients outlast the outage: slurmctld's shutdown and a query that times out take seconds each on a busy
    # machine, and a client that ended meanwhile wins without slurmctld (a CI run saw that with 15 s)
    run_dir, job = two_tasks_running(workspace, sleep=45)
    status = observe_reconcile(run_dir)
    assert [s["state"] for s in status["shards"]] == ["running", "running"], status
    paths = [run_dir / "shards" / sid / "attempts" / "attempt-0001" / "observation.json"
             for sid in ("shard-00000", "shard-00001")]
    before = [p.read_bytes() for p in paths]

    with daemon_stopped("slurmctld"):
        # squeue retries for about 18 s before it gives up on a controller that is down; a shorter query timeout
        # (TAU_SLURM_TIMEOUT) keeps the tasks running meanwhile
        status = observe_reconcile(run_dir, env={"TAU_SLURM_TIMEOUT": "5"})
        assert status["sources"]["queue"] == "unavailable", status["sources"]
        assert "squeue" in status["sources"]["reason"], status["sources"]
        assert not status["changes"], status["changes"]
        for s in status["shards"]:
            obs = observation_of(status, s["id"])
            assert s["state"] == "running", s
            assert (obs["state"], obs["source"], obs["terminal"], obs["deadline"]) == ("running", "queue", False,
                                                                                        None), obs
        assert [p.read_bytes() for p in paths] == before

    status = wait_for(settled, run_dir, timeout=90)
    assert status["state"] == "succeeded", status
    assert [(s["state"], s["winner"]) for s in status["shards"]] == [("succeeded", "attempt-0001")] * 2
    wait_job_gone(job)
    assert sorted(r["state"] for r in sacct_rows(job)) == ["COMPLETED", "COMPLETED"]
