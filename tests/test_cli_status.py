"""tau-status: the run's status now, read-only, by the same rules as tau-reconcile: progress and heartbeats,
stalls, budgets, journals, an estimate of the time left; and tau-reconcile refuses a terminal on stdin."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import time

import pytest

from helpers import BIN, CLIENT, PYTHON, copy_run, env_for_tests, error_of, init_run, plan, settle, snapshot, tau
from helpers import wait_for
from test_cli_run_environment import PROBE


def run_plan(*args: str, **extra) -> dict:
    doc = {"records": 40, "shards": 4, "command": [PYTHON, str(PROBE), *args],
           "scheduler": {"profile": "local", "local": {"max_parallel": 4}},
           "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5,
                       "heartbeat_seconds": 1, "stall_seconds": 3}}
    doc.update(extra)
    return doc


def status(run_dir, *args) -> dict:
    proc = tau("tau-status", str(run_dir), *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def frozen(run_dir, signum) -> list[int]:
    """Send `signum` to the local supervisor's and every task's process group; their pids."""
    records = [json.loads(p.read_text()) for p in run_dir.glob("submissions/*/local/*.json")]
    pids = [r["pid"] for r in records if r.get("pid")]
    for pid in pids:
        os.killpg(pid, signum)
    return pids


@pytest.mark.slow
def test_status_writes_nothing_at_all_while_the_run_is_live_and_after(workspace):
    run_dir = init_run(workspace, plan_doc=run_plan("--sleep", "3"))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    wait_for(lambda: status(run_dir)["counts"]["running"] == 4, what="four running shards")
    groups = frozen(run_dir, signal.SIGSTOP)  # the supervisor and every task: nothing else writes while we look
    try:
        before = snapshot(run_dir)
        for _ in range(3):
            doc = status(run_dir)
        assert snapshot(run_dir) == before
    finally:
        for pid in groups:
            os.killpg(pid, signal.SIGCONT)
    assert doc["state"] == "running" and "changes" not in doc
    settle(run_dir)
    before = snapshot(run_dir)
    assert status(run_dir)["state"] == "succeeded"
    assert snapshot(run_dir) == before


def test_status_says_what_reconcile_would_say(settled, tmp_path):
    run_dir = copy_run(settled, tmp_path / "copy")
    seen = status(run_dir)
    obs = tau("tau-observe", str(run_dir))
    rec = json.loads(tau("tau-reconcile", str(run_dir), input=obs.stdout).stdout)
    for key in ("state", "lifecycle", "degraded", "reason", "counts", "retryable", "budget", "cancelled", "submissions",
                "collections"):
        assert seen[key] == rec[key], key
    assert [(s["id"], s["state"], s["reason"], s["log"]) for s in seen["shards"]] == [
        (s["id"], s["state"], s["reason"], s["log"]) for s in rec["shards"]]


@pytest.mark.slow
def test_a_running_attempt_shows_the_progress_its_client_reports_and_its_heartbeat(workspace):
    run_dir = init_run(workspace, plan_doc=run_plan("--progress", "--sleep", "6"))
    assert tau("tau-submit", str(run_dir)).returncode == 0

    def reported():
        doc = status(run_dir)
        shard = doc["shards"][0]
        return doc if shard["progress"] and shard["progress"]["records_done"] == 5 else None

    doc = wait_for(reported, timeout=30, what="the client's progress in readiness")
    progress = doc["shards"][0]["progress"]
    assert (progress["state"], progress["records"]) == ("running", 10)
    assert 0 <= progress["age_seconds"] < 3 and doc["shards"][0]["stalled"] is None
    table = tau("tau-status", str(run_dir), "-o", "table").stdout
    assert "5/10" in table.splitlines()[5]
    settle(run_dir)


@pytest.mark.slow
def test_an_attempt_that_stops_heartbeating_is_shown_stalled_and_recovers(workspace):
    run_dir = init_run(workspace, plan_doc=run_plan("--sleep", "30", records=10, shards=1))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    # the shard is running as soon as its task process is; its first readiness comes once tau-attempt has started,
    # and a process frozen before that has no heartbeat whose age could be told
    wait_for(lambda: ((status(run_dir)["shards"][0]["progress"] or {}).get("state") == "running"),
             what="a running client")
    task = json.loads((run_dir / "submissions/submission-0001/local/task-00000.json").read_text())
    os.killpg(task["pid"], signal.SIGSTOP)  # tau-attempt and its client, frozen: no heartbeat
    try:
        doc = wait_for(lambda: (d := status(run_dir))["shards"][0]["stalled"] and d, timeout=20, what="a stall")
        shard = doc["shards"][0]
        assert shard["state"] == "running" and shard["stalled"].startswith("no heartbeat for ")
        assert "the run's stall_seconds is 3" in shard["stalled"]
        assert doc["degraded"] is True and doc["reason"] == f"shard-00000 stalled: {shard['stalled']}"
    finally:
        os.killpg(task["pid"], signal.SIGCONT)
    wait_for(lambda: status(run_dir)["shards"][0]["stalled"] is None, timeout=20, what="the heartbeat again")
    assert tau("tau-cancel", str(run_dir)).returncode == 0


@pytest.mark.slow
def test_the_run_status_names_an_unresolved_submission_the_collections_and_the_time_left(settled, tmp_path):
    run_dir = copy_run(settled, tmp_path / "copy")
    doc = status(run_dir)
    assert doc["submissions"] == [] and doc["collections"] == []
    assert doc["eta_seconds"] is None  # three attempts won and one failed: nothing at work, nothing to estimate
    assert tau("tau-retry", str(run_dir)).returncode == 0
    settle(run_dir)
    out = tmp_path / "copy" / "out"  # below the run's workspace, as a destination must be
    assert tau("tau-collect", str(run_dir), "--destination", str(out)).returncode == 0
    doc = status(run_dir)
    assert doc["eta_seconds"] is None  # the run succeeded
    assert doc["collections"] == [{"collection_id": "collection-0001", "destination": str(out),
                                   "format": "parquet", "state": "succeeded", "job_id": None, "reason": None,
                                   "tasks": 1, "tasks_done": 0}]


@pytest.mark.slow
def test_watch_renders_until_the_run_has_finished(workspace):
    run_dir = init_run(workspace, plan_doc=run_plan("--sleep", "1"))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    proc = tau("tau-status", str(run_dir), "-o", "table", "--watch", "--interval", "0.5", timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    heads = [line for line in lines if line.startswith("run run: ")]
    assert heads[-1] == "run run: succeeded (succeeded 4)"  # it ended once the run had succeeded
    assert [line.split()[1] for line in lines[-4:]] == ["succeeded"] * 4
    refused = tau("tau-status", str(run_dir), "--watch")
    assert refused.returncode == 2 and "--watch renders a table for people" in error_of(refused)["message"]


def test_reconcile_with_a_terminal_on_standard_input_exits_2_at_once(settled):
    leader, follower = pty.openpty()
    try:
        started = time.monotonic()
        proc = subprocess.run([str(BIN / "tau-reconcile"), str(settled)], stdin=follower, capture_output=True,
                              text=True, env=env_for_tests(), timeout=30)
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == 2
    assert time.monotonic() - started < 10
    assert error_of(proc)["message"] == (
        "tau-reconcile: tau-reconcile applies the output of tau-observe, on standard input: tau-observe RUN | "
        "tau-reconcile RUN (for the status without changing anything: tau-status RUN)")


# -- the time left, and the end of --watch --------------------------------------------------------------------------


def test_a_failed_run_with_nothing_at_work_shows_no_time_left(settled):
    doc = status(settled)
    assert (doc["state"], doc["counts"]["failed"], doc["eta_seconds"]) == ("failed", 1, None)
    proc = tau("tau-status", str(settled), "-o", "table")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("run run: failed (succeeded 3, failed 1)\n")
    assert "estimated time left" not in proc.stdout


@pytest.mark.slow
def test_a_hung_run_shows_a_time_left_while_its_attempt_works_none_once_it_stalls_and_watch_ends_settled(workspace):
    command = [PYTHON, CLIENT, "--rows-per-file", "10", "--hang-first", "shard-00001"]
    run_dir = init_run(workspace, plan_doc=run_plan(command=command, windows={
        "accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5,
        "heartbeat_seconds": 1, "progress_stall_seconds": 8}))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    doc = wait_for(lambda: (d := status(run_dir))["counts"]["succeeded"] == 3 and d, what="three winners")
    assert doc["shards"][1]["state"] == "running"
    assert doc["shards"][1]["stalled"] is None and isinstance(doc["eta_seconds"], int)  # at work: an estimate
    doc = wait_for(lambda: (d := status(run_dir))["shards"][1]["stalled"] and d, timeout=30, what="a stall")
    assert (doc["state"], doc["eta_seconds"]) == ("running", None)  # hung: nothing at work, nothing to estimate
    table = tau("tau-status", str(run_dir), "-o", "table").stdout
    assert "(stalled: " in table and "estimated time left" not in table
    assert tau("tau-cancel", str(run_dir)).returncode == 0
    proc = tau("tau-status", str(run_dir), "-o", "table", "--watch", "--interval", "0.5", timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")
    last = ("\n\n" + proc.stdout).split("\n\nrun run: ")[-1]  # frames: separated by an empty line off a terminal
    assert last.startswith("cancelled (succeeded 3, cancelled 1)\n")
    assert "estimated time left" not in last
    rows = [line.split() for line in last.splitlines() if line.startswith("shard-")]
    assert [row[1] for row in rows] == ["succeeded", "cancelled", "succeeded", "succeeded"]
    assert not any(word in ("running", "pending", "RUNNING", "PENDING") for row in rows for word in row[2:7])
    doc = status(run_dir)
    assert doc["state"] == "cancelled" and doc["eta_seconds"] is None
    assert doc["shards"][1]["evidence"]["effective_state"] not in ("pending", "running", "accounting_lag")


def test_watch_draws_its_last_frame_from_a_read_made_after_the_run_settled(capsys, monkeypatch):
    from taulib.cli import common

    reads = iter(["running 2", "running 1", "ending", "settled"])
    sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)
    common.watch(lambda: {"s": next(reads)}, lambda doc: doc["s"] + "\n", lambda doc: doc["s"] != "running 1"
                 and doc["s"] != "running 2", 0.5, "the run")
    # "ending" already counted as done, but it was read while the run ended: the frame drawn last is the read after
    assert capsys.readouterr().out == "running 2\n\nrunning 1\n\nsettled\n"
    assert sleeps == [0.5, 0.5]  # the read after the end comes at once


def test_watch_goes_on_when_the_read_after_the_end_is_not_done_any_more(capsys, monkeypatch):
    from taulib.cli import common

    reads = iter(["done", "reopened", "done", "done again"])
    monkeypatch.setattr(time, "sleep", lambda _seconds: None)
    common.watch(lambda: {"s": next(reads)}, lambda doc: doc["s"] + "\n", lambda doc: doc["s"].startswith("done"),
                 0.5, "the run")
    assert capsys.readouterr().out == "reopened\n\ndone again\n"


# -- what each shard's attempt asked for, and why a shard waits -------------------------------------------------------

HOLDING = "MaxSubmitJobs=250 of user alice's association (account lab) (250 queued)"


def test_a_shard_without_an_attempt_asks_for_nothing_and_a_deferred_one_names_the_limit_in_its_row(workspace):
    from taulib.lifecycle.submission import record_deferral
    from taulib.rundir.run import Run

    run_dir = init_run(workspace, plan_doc=run_plan())
    assert [s["request"] for s in status(run_dir)["shards"]] == [None] * 4  # every key present, null: no attempt
    with Run(str(run_dir)) as run:  # what tau-submit records when the scheduler's limits hold shards back
        record_deferral(run, "initial", 4, HOLDING, [])
    doc = status(run_dir)
    assert doc["deferred"]["holding"] == HOLDING
    table = tau("tau-status", str(run_dir), "-o", "table").stdout
    row = next(line for line in table.splitlines() if line.startswith("shard-00002 "))
    assert row.split(None, 8) == ["shard-00002", "pending", "-", "-", "0/3", "-", "-", "-",
                                  f"not submitted yet: deferred until the queue has room ({HOLDING}); the next "
                                  "tau-submit or tau-retry submits it"]


def test_every_unsealed_shard_says_what_its_newest_attempt_asked_for_and_a_sealed_one_null(settled, tmp_path):
    doc = status(copy_run(settled, tmp_path / "copy"))
    assert {s["id"]: s["request"] for s in doc["shards"]} == {
        "shard-00000": None, "shard-00001": {"mem": None, "time": None}, "shard-00002": None, "shard-00003": None}


@pytest.mark.slow
def test_a_time_limit_is_the_request_and_a_granted_one_replaces_it_for_the_attempt_it_was_granted_to(workspace):
    local = {"max_parallel": 4, "time_limit": 600}
    run_dir = init_run(workspace, plan_doc=plan(fail_first=("shard-00001",),
                                                scheduler={"profile": "local", "local": local}))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    settle(run_dir)
    assert status(run_dir)["shards"][1]["request"] == {"mem": None, "time": "00:10:00"}
    granted = tau("tau-retry", str(run_dir), "--shard", "1", "--time", "20:00")
    assert granted.returncode == 0, granted.stderr
    shard = status(run_dir)["shards"][1]
    assert (shard["attempt"], shard["request"]) == ("attempt-0002", {"mem": None, "time": "20:00"})
    settle(run_dir)
    assert status(run_dir)["shards"][1]["request"] is None  # sealed by its winner: read from the index


@pytest.mark.slow
def test_a_queued_task_says_in_its_row_the_limit_the_scheduler_gave_as_its_reason(workspace):
    run_dir = init_run(workspace, plan_doc=run_plan("--sleep", "30", scheduler={
        "profile": "local", "local": {"max_parallel": 1}}))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    try:
        wait_for(lambda: status(run_dir)["counts"]["running"] == 1, what="one running shard")
        observed = json.loads(tau("tau-observe", str(run_dir)).stdout)
        waiting = next(a for a in observed["attempts"] if a["shard_id"] == "shard-00003")
        assert waiting["queue"]["state"] == "pending"
        waiting["queue"]["reason"] = "JobArrayTaskLimit"  # what squeue says of a task its array's throttle holds
        proc = tau("tau-reconcile", str(run_dir), "-o", "table", input=json.dumps(observed))
        assert proc.returncode == 0, proc.stderr
        row = next(line for line in proc.stdout.splitlines() if line.startswith("shard-00003 "))
        assert row.endswith("  queued (JobArrayTaskLimit: the array's %N throttle, scheduler.slurm.max_parallel)")
        assert status(run_dir)["shards"][2]["reason"] == "queued"  # the local supervisor gives no reason code
    finally:
        assert tau("tau-cancel", str(run_dir)).returncode == 0
