"""The ways forward from a stuck shard: stopping one attempt without giving up its shard (tau-cancel --attempt),
lifting a cancellation (tau-retry --reopen), and cancelling what already ended (a no-op that says so)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from helpers import CLIENT, PYTHON, error_of, init_run, settle, snapshot, tau, wait_for

pytestmark = pytest.mark.slow


def hanging(*hang: str, **extra) -> dict:
    command = [PYTHON, CLIENT, "--rows-per-file", "10"]
    for sid in hang:
        command += ["--hang-first", sid]
    doc = {"records": 40, "shards": 4, "command": command,
           "scheduler": {"profile": "local", "local": {"max_parallel": 4}},
           "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}
    doc.update(extra)
    return doc


def run_json(command: str, *args: str) -> dict:
    proc = tau(command, *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def observed(run_dir: Path) -> dict:
    obs = tau("tau-observe", str(run_dir))
    assert obs.returncode == 0, obs.stderr
    rec = tau("tau-reconcile", str(run_dir), input=obs.stdout)
    assert rec.returncode == 0, rec.stderr
    return json.loads(rec.stdout)


def hung_run(workspace: Path, **extra) -> Path:
    """A run whose shard-00001 hangs on its first attempt while the three others win."""
    run_dir = init_run(workspace, plan_doc=hanging("shard-00001", **extra))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    wait_for(lambda: (lambda d: d["counts"]["succeeded"] == 3 and d["shards"][1]["state"] == "running")(
        observed(run_dir)), what="three winners and the hung shard running")
    return run_dir


def test_stopping_a_hung_attempt_fails_it_and_its_shard_is_retried_to_success(workspace):
    run_dir = hung_run(workspace)
    result = run_json("tau-cancel", str(run_dir), "--shard", "shard-00001", "--attempt")
    assert (result["scope"], result["cancelled"], result["ended"], result["noop"], result["problem"]) == (
        "attempts", [], [], None, None)
    assert [(s["shard_id"], s["attempt_id"]) for s in result["stopped"]] == [("shard-00001", "attempt-0001")]
    stop = json.loads((run_dir / "shards/shard-00001/attempts/attempt-0001/stop.json").read_text())
    assert (stop["kind"], stop["by"], stop["reason"]) == (
        "tau.stop", "user", f"stopped by the user at {result['requested_at']}")
    assert not (run_dir / "shards/shard-00001/cancel.json").exists()
    doc = settle(run_dir)
    shard = doc["shards"][1]
    assert (shard["state"], shard["reason"]) == ("failed", f"stopped by the user at {result['requested_at']}")
    assert doc["retryable"] == ["shard-00001"] and doc["state"] == "failed"
    attempt = json.loads((run_dir / "shards/shard-00001/attempts/attempt-0001/attempt.json").read_text())
    assert attempt["state"] == "failed"
    retried = run_json("tau-retry", str(run_dir))
    assert [t["attempt_id"] for t in retried["tasks"]] == ["attempt-0002"] and retried["reason"] is None
    final = settle(run_dir)
    assert final["state"] == "succeeded" and final["shards"][1]["winner"] == "attempt-0002"
    assert final["budget"]["failed_attempts"] == 1  # the stopped attempt is spent from the shard's budget
    # stopping what already ended is a no-op that says so, and writes nothing
    before = snapshot(run_dir)
    again = run_json("tau-cancel", str(run_dir), "--shard", "shard-00001", "--attempt")
    assert again["noop"] == "no named shard has a live attempt (ended or sealed): nothing to stop, nothing was recorded"
    assert (again["stopped"], again["sealed"], again["requested_at"]) == ([], ["shard-00001"], None)
    assert snapshot(run_dir) == before


def test_a_cancelled_shard_is_reopened_with_who_and_when_and_runs_to_success(workspace):
    run_dir = hung_run(workspace)
    cancelled = run_json("tau-cancel", str(run_dir), "--shard", "shard-00001")
    assert cancelled["cancelled"] == ["shard-00001"]
    doc = settle(run_dir)
    assert doc["state"] == "cancelled" and doc["shards"][1]["state"] == "cancelled"
    refused = run_json("tau-retry", str(run_dir), "--shard", "shard-00001")
    assert refused["submission_id"] is None
    assert refused["reason"] == (
        f"no named shard is retryable (shard-00001: not retryable: cancelled by the user at "
        f"{cancelled['requested_at']}); tau-retry {run_dir} --shard shard-00001 --reopen lifts its cancellation")
    reopened = run_json("tau-retry", str(run_dir), "--shard", "shard-00001", "--reopen")
    assert [(r["shard_id"], r["lifts"]) for r in reopened["reopened"]] == [("shard-00001", cancelled["requested_at"])]
    assert [t["attempt_id"] for t in reopened["tasks"]] == ["attempt-0002"]
    record = json.loads((run_dir / "shards/shard-00001/reopen.json").read_text())
    assert (record["kind"], record["lifts"], record["requested_at"]) == (
        "tau.reopen", cancelled["requested_at"], reopened["reopened"][0]["requested_at"])
    assert isinstance(record["uid"], int) and record["host"]
    assert (run_dir / "shards/shard-00001/cancel.json").exists()  # the history keeps both
    final = settle(run_dir)
    assert final["state"] == "succeeded" and final["shards"][1]["winner"] == "attempt-0002"
    collected = tau("tau-collect", str(run_dir), "--destination", str(workspace / "out"))
    assert collected.returncode == 0, collected.stderr


def test_a_shard_cancelled_again_after_a_reopen_starts_a_new_generation_of_records(workspace):
    run_dir = init_run(workspace, plan_doc=hanging("shard-00001", scheduler={"profile": "local", "local": {
        "max_parallel": 4}}))
    first = run_json("tau-cancel", str(run_dir), "--shard", "shard-00001")
    lifted = run_json("tau-retry", str(run_dir), "--shard", "shard-00001", "--reopen")
    assert [r["lifts"] for r in lifted["reopened"]] == [first["requested_at"]]
    second = run_json("tau-cancel", str(run_dir), "--shard", "shard-00001")
    assert second["cancelled"] == ["shard-00001"] and second["requested_at"] != first["requested_at"]
    folder = run_dir / "shards/shard-00001"
    assert json.loads((folder / "cancel-2.json").read_text())["requested_at"] == second["requested_at"]
    assert run_json("tau-status", str(run_dir))["shards"][1]["state"] == "cancelled"
    again = run_json("tau-retry", str(run_dir), "--shard", "shard-00001", "--reopen")
    assert [r["lifts"] for r in again["reopened"]] == [second["requested_at"]]
    assert sorted(p.name for p in folder.iterdir() if p.suffix == ".json") == [
        "cancel-2.json", "cancel.json", "reopen-2.json", "reopen.json"]
    assert run_json("tau-status", str(run_dir))["shards"][1]["state"] == "pending"
    nothing = run_json("tau-retry", str(run_dir), "--shard", "shard-00001", "--reopen")
    assert nothing["reopened"] == []  # nothing in force to lift


def test_a_run_cancelled_as_a_whole_is_reopened_whole_and_a_shard_of_it_alone_is_refused(workspace):
    run_dir = init_run(workspace, plan_doc=hanging())
    cancelled = run_json("tau-cancel", str(run_dir))
    before = snapshot(run_dir)
    refused = tau("tau-retry", str(run_dir), "--shard", "shard-00002", "--reopen")
    assert refused.returncode == 73
    assert error_of(refused)["message"] == (
        f"tau-retry: run 'run' is cancelled as a whole (at {cancelled['requested_at']}); lift that with tau-retry "
        f"{run_dir} --reopen, then name shards if only some should run")
    assert snapshot(run_dir) == before
    whole = run_json("tau-retry", str(run_dir), "--reopen")
    assert [(r["shard_id"], r["lifts"]) for r in whole["reopened"]] == [(None, cancelled["requested_at"])]
    assert json.loads((run_dir / "reopen.json").read_text())["shard_id"] is None
    submitted = run_json("tau-submit", str(run_dir))
    assert len(submitted["tasks"]) == 4
    assert settle(run_dir)["state"] == "succeeded"


def test_cancelling_a_run_that_succeeded_records_nothing_and_says_so(workspace):
    run_dir = init_run(workspace, plan_doc=hanging())
    assert tau("tau-submit", str(run_dir)).returncode == 0
    assert settle(run_dir)["state"] == "succeeded"
    before = snapshot(run_dir)
    result = run_json("tau-cancel", str(run_dir))
    assert result["noop"] == "every shard of the run already has its winner: nothing to cancel, nothing was recorded"
    assert (result["cancelled"], result["requested_at"], result["stopped"]) == ([], None, [])
    assert snapshot(run_dir) == before and not (run_dir / "cancel.json").exists()
    doc = run_json("tau-status", str(run_dir))
    assert (doc["state"], doc["cancelled"]) == ("succeeded", None)
    table = tau("tau-cancel", str(run_dir), "-o", "table")
    assert table.returncode == 0 and table.stdout == f"{result['noop']}\n"


def test_stopping_an_attempt_needs_a_named_shard(workspace):
    run_dir = init_run(workspace, plan_doc=hanging())
    before = snapshot(run_dir)
    proc = tau("tau-cancel", str(run_dir), "--attempt")
    assert proc.returncode == 2
    assert error_of(proc)["message"] == ("tau-cancel: --attempt stops the live attempt of the shards named with "
                                         "--shard; name at least one")
    assert snapshot(run_dir) == before


def test_a_retry_that_submits_nothing_names_the_exhausted_shards(workspace):
    run_dir = init_run(workspace, plan_doc=dict(hanging(), retry={"max_attempts": 1}, command=[
        PYTHON, CLIENT, "--rows-per-file", "10", "--fail-first", "shard-00002"]))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    doc = settle(run_dir)
    assert doc["shards"][2]["state"] == "exhausted"
    result = run_json("tau-retry", str(run_dir))
    assert result["submission_id"] is None
    assert result["exhausted"] == [{"shard_id": "shard-00002", "reason": doc["shards"][2]["reason"]}]
    assert result["reason"] == (f"1 shard(s) used every attempt of their budget (shard-00002); tau-retry {run_dir} "
                                "--shard S grants one more")


STALL_WINDOWS = {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5,
                 "heartbeat_seconds": 1, "progress_stall_seconds": 3}


def test_a_client_whose_progress_stands_still_is_shown_stalled_and_left_running_by_default(workspace):
    run_dir = hung_run(workspace, windows=STALL_WINDOWS)

    def stalled() -> dict | None:
        shard = run_json("tau-status", str(run_dir))["shards"][1]
        return shard if shard["stalled"] else None

    shard = wait_for(stalled, timeout=30, what="the hung shard shown stalled")
    assert shard["state"] == "running"
    assert shard["stalled"].startswith("no progress for ")
    assert shard["stalled"].endswith(": 5 of 10 records done (the run's progress_stall_seconds is 3)")
    assert shard["progress"]["records_done"] == 5 and shard["progress"]["progress_at"] is not None
    doc = run_json("tau-status", str(run_dir))
    assert doc["degraded"] is True and "shard-00001 stalled: no progress for " in doc["reason"]
    assert not (run_dir / "shards/shard-00001/attempts/attempt-0001/stop.json").exists()
    run_json("tau-cancel", str(run_dir))  # the test's own end: nothing else would stop it


def test_with_stall_action_stop_a_stalled_client_is_stopped_failed_and_retried_to_success(workspace):
    windows = dict(STALL_WINDOWS, stall_action="stop")
    run_dir = init_run(workspace, plan_doc=hanging("shard-00001", windows=windows))
    started = time.monotonic()
    assert tau("tau-submit", str(run_dir)).returncode == 0
    stop_path = run_dir / "shards/shard-00001/attempts/attempt-0001/stop.json"
    wait_for(stop_path.exists, timeout=30, what="the stall's stop record")
    assert time.monotonic() - started < 20
    stop = json.loads(stop_path.read_text())
    assert stop["by"] == "stall" and stop["reason"].startswith("stalled: no progress for ")
    assert stop["reason"].endswith("5 of 10 records done (the run's progress_stall_seconds is 3); stopped, as the "
                                   "run's stall_action says")
    doc = settle(run_dir)
    assert (doc["shards"][1]["state"], doc["shards"][1]["reason"]) == ("failed", stop["reason"])
    result = json.loads((run_dir / "shards/shard-00001/attempts/attempt-0001/result.json").read_text())
    assert result["error"] == stop["reason"] and result["outcome"] == "failed"
    retried = run_json("tau-retry", str(run_dir))
    assert [t["attempt_id"] for t in retried["tasks"]] == ["attempt-0002"]
    final = settle(run_dir)
    assert final["state"] == "succeeded" and final["shards"][1]["winner"] == "attempt-0002"


def test_shard_numbers_name_shards_in_cancel_and_retry(workspace):
    run_dir = init_run(workspace, plan_doc=hanging())
    cancelled = run_json("tau-cancel", str(run_dir), "--shard", "2")
    assert cancelled["cancelled"] == ["shard-00002"]
    reopened = run_json("tau-retry", str(run_dir), "--shard", "shard-2", "--reopen")
    assert [r["shard_id"] for r in reopened["reopened"]] == ["shard-00002"]
    proc = tau("tau-cancel", str(run_dir), "--shard", "9")
    assert proc.returncode == 66
    assert error_of(proc)["message"] == "tau-cancel: run 'run' has no shard 'shard-00009'"
