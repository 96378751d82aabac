"""tau-cancel: a durable record first, then the live attempts stopped; cancelled shards are never started again
(a cancel racing 63 other cancels and retries: tests/adversarial/test_races.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from helpers import PYTHON, copy_run, error_of, init_run, settle, snapshot, tau, wait_for, wait_settled
from test_cli_run_environment import PROBE


def sleeping(seconds: float = 60, **extra) -> dict:
    doc = {"records": 60, "shards": 6, "command": [PYTHON, str(PROBE), "--sleep", str(seconds)],
           "scheduler": {"profile": "local", "local": {"max_parallel": 3}},
           "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}
    doc.update(extra)
    return doc


def status(run_dir: Path) -> dict:
    proc = tau("tau-status", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def clients_started(run_dir: Path) -> list[str]:
    """The shards whose attempt is marked running (its tau-attempt is past its look at the cancellations)."""
    records = [json.loads(p.read_text()) for p in run_dir.glob("shards/*/attempts/*/attempt.json")]
    return sorted(r["shard_id"] for r in records if r["state"] == "running")


def process_groups(run_dir: Path) -> set[int]:
    """The process groups of the run's local tasks and its supervisors (their pids)."""
    out = set()
    for path in run_dir.glob("submissions/*/local/*.json"):
        record = json.loads(path.read_text())
        if record.get("pid"):
            out.add(record["pid"])
    return out


def alive(pids: set[int]) -> set[int]:
    """Those of `pids` whose process group or process still has a member (zombies do not count)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        pgid = int(fields[2])
        if fields[0] != "Z" and (int(entry) in pids or pgid in pids):
            found.add(pgid if pgid in pids else int(entry))
    return found


def cancel(run_dir: Path, *args: str) -> dict:
    proc = tau("tau-cancel", str(run_dir), *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_cancelling_a_running_local_run_stops_every_process_and_nothing_starts_again(workspace):
    run_dir = init_run(workspace, plan_doc=sleeping())
    assert tau("tau-submit", str(run_dir)).returncode == 0
    # Each of the three has its client started: a task whose tau-attempt has not yet marked its attempt running sees
    # the cancellation under its shard's lock and ends on its own, the client never started, and is not "stopped".
    wait_for(lambda: status(run_dir)["counts"]["running"] == 3 and len(clients_started(run_dir)) == 3,
             what="three running shards, each with its client started")
    result = cancel(run_dir)
    assert result["scope"] == "run" and result["cancelled"] == [f"shard-{i:05d}" for i in range(6)]
    assert sorted(s["shard_id"] for s in result["stopped"]) == ["shard-00000", "shard-00001", "shard-00002"]
    assert result["sealed"] == [] and result["problem"] is None
    record = json.loads((run_dir / "cancel.json").read_text())
    assert (record["kind"], record["shard_id"], record["requested_at"]) == ("tau.cancel", None,
                                                                            result["requested_at"])
    groups = process_groups(run_dir)
    assert len(groups) == 4  # three tasks and the supervisor
    wait_for(lambda: not alive(groups), timeout=30, what="every process of the run ending")
    doc = settle(run_dir)
    assert doc["state"] == "cancelled" and doc["counts"]["cancelled"] == 6 and doc["degraded"] is False
    assert {s["reason"] for s in doc["shards"]} == {f"cancelled by the user at {result['requested_at']}"}
    assert doc["cancelled"] == {"requested_at": result["requested_at"]}
    before = snapshot(run_dir / "shards")
    again = tau("tau-retry", str(run_dir))
    assert again.returncode == 0 and json.loads(again.stdout)["tasks"] == []
    submit = tau("tau-submit", str(run_dir))
    assert submit.returncode == 0 and json.loads(submit.stdout)["created"] is False
    time.sleep(1)
    assert snapshot(run_dir / "shards") == before  # no new attempt, nothing started
    assert not alive(process_groups(run_dir))
    assert len(list((run_dir / "submissions").iterdir())) == 1
    attempts = [json.loads(p.read_text()) for p in run_dir.glob("shards/*/attempts/*/attempt.json")]
    assert {(a["state"], a["terminal"]["classification"]) for a in attempts} == {("failed", "cancelled")}


@pytest.mark.slow
def test_cancelling_named_shards_leaves_the_others_running_to_their_end(workspace):
    run_dir = init_run(workspace, plan_doc=sleeping(2, records=40, shards=4, scheduler={
        "profile": "local", "local": {"max_parallel": 4}}))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    result = cancel(run_dir, "--shard", "shard-00001", "--shard", "shard-00003")
    assert result["scope"] == "shards" and result["cancelled"] == ["shard-00001", "shard-00003"]
    assert json.loads((run_dir / "shards/shard-00001/cancel.json").read_text())["shard_id"] == "shard-00001"
    assert not (run_dir / "cancel.json").exists()
    doc = settle(run_dir)
    assert [s["state"] for s in doc["shards"]] == ["succeeded", "cancelled", "succeeded", "cancelled"]
    assert doc["state"] == "cancelled"


def test_cancelling_again_keeps_the_first_record_and_a_sealed_shard_keeps_its_winner(workspace, settled):
    run_dir = copy_run(settled, workspace / "copy")
    first = cancel(run_dir, "--shard", "shard-00001", "--shard", "shard-00002")
    assert (first["cancelled"], first["sealed"]) == (["shard-00001"], ["shard-00002"])
    record = (run_dir / "shards/shard-00001/cancel.json").read_bytes()
    again = cancel(run_dir, "--shard", "shard-00001")
    assert again["requested_at"] == first["requested_at"]
    assert (run_dir / "shards/shard-00001/cancel.json").read_bytes() == record
    assert not (run_dir / "shards/shard-00002/cancel.json").exists()
    doc = wait_settled(run_dir)
    assert [s["state"] for s in doc["shards"]] == ["succeeded", "cancelled", "succeeded", "succeeded"]
    table = tau("tau-cancel", str(run_dir), "--shard", "shard-00001", "-o", "table")
    assert table.returncode == 0
    assert table.stdout.splitlines()[0] == (f"cancelled 1 shard(s) of run run at {first['requested_at']}; stopped 0 "
                                            "live attempt(s)")


def test_a_run_cancelled_before_it_was_submitted_submits_nothing(workspace):
    run_dir = init_run(workspace, plan_doc=sleeping())
    cancel(run_dir)
    proc = tau("tau-submit", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["submission_id"] is None
    assert not (run_dir / "submissions").exists()


def test_an_unknown_shard_is_refused_with_66_and_nothing_is_recorded(workspace):
    run_dir = init_run(workspace, plan_doc=sleeping())
    before = snapshot(run_dir)
    proc = tau("tau-cancel", str(run_dir), "--shard", "shard-00099")
    assert proc.returncode == 66
    assert error_of(proc)["message"] == "tau-cancel: run 'run' has no shard 'shard-00099'"
    assert snapshot(run_dir) == before


@pytest.mark.slow
def test_what_the_user_stopped_or_cancelled_spends_neither_the_shards_attempts_nor_the_failure_budget(workspace):
    """A stop the user asked for (tau-cancel --attempt) and a cancellation later lifted (--reopen) are no failures
    of the client: a shard of one attempt each is still retried (not granted one more), and the run's budget counts
    no failed attempt."""
    run_dir = init_run(workspace, plan_doc=sleeping(60, records=20, shards=2, retry={"max_attempts": 1}))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    wait_for(lambda: clients_started(run_dir) == ["shard-00000", "shard-00001"], what="both clients started")
    cancel(run_dir, "--shard", "0", "--attempt")
    cancel(run_dir, "--shard", "1")
    doc = settle(run_dir)
    stopped, cancelled = doc["shards"]
    assert (stopped["state"], stopped["reason"].startswith("stopped by the user at ")) == ("failed", True), stopped
    assert cancelled["state"] == "cancelled"
    assert doc["budget"]["failed_attempts"] == 0 and doc["retryable"] == ["shard-00000"]
    retried = tau("tau-retry", str(run_dir))  # shard 0 is retryable, not exhausted at 1 attempt of 1
    assert retried.returncode == 0, retried.stderr
    assert [(t["shard_id"], t.get("granted", False)) for t in json.loads(retried.stdout)["tasks"]] == [
        ("shard-00000", False)]
    reopened = tau("tau-retry", str(run_dir), "--shard", "1", "--reopen")
    assert reopened.returncode == 0, reopened.stderr
    assert [(t["shard_id"], t.get("granted", False)) for t in json.loads(reopened.stdout)["tasks"]] == [
        ("shard-00001", False)]
    doc = status(run_dir)
    assert doc["budget"]["failed_attempts"] == 0 and [s["attempts"] for s in doc["shards"]] == [2, 2]
    cancel(run_dir)  # the second attempts would sleep a minute: the run ends here
    settle(run_dir)


@pytest.mark.slow
def test_reopening_a_cancelled_shard_retries_it_at_once_without_an_observation_first(workspace):
    """tau-retry acts on the state tau-status shows: the cancelled attempt's process is gone though no
    observe | reconcile has run since, and --reopen retries the shard there and then (it said 'the attempt reports
    it is running' and submitted nothing)."""
    run_dir = init_run(workspace, plan_doc=sleeping(60, records=20, shards=2))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    wait_for(lambda: clients_started(run_dir) == ["shard-00000", "shard-00001"], what="both clients started")
    cancel(run_dir, "--shard", "1")
    wait_for(lambda: not alive({json.loads((run_dir / "submissions/submission-0001/local/task-00001.json")
                                           .read_bytes())["pid"]}), timeout=30, what="shard 1's task ending")
    assert status(run_dir)["shards"][1]["state"] == "cancelled"  # what tau-status shows
    reopened = tau("tau-retry", str(run_dir), "--shard", "1", "--reopen")
    assert reopened.returncode == 0, reopened.stderr
    out = json.loads(reopened.stdout)
    assert [t["shard_id"] for t in out["tasks"]] == ["shard-00001"] and out["reason"] is None, out
    cancel(run_dir)
    settle(run_dir)
