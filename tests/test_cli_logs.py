"""tau-logs: a failed attempt's stderr, a named attempt, a live attempt followed to its end, an attempt without output
yet (said on stderr, or an earlier attempt's shown instead), and the errors."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from helpers import BIN, PYTHON, env_for_tests, error_of, init_run, settle, snapshot, tau
from helpers import quiesce, status, wait_for
from test_cli_run_environment import PROBE


def plan(*args: str, **extra) -> dict:
    doc = {"records": 20, "shards": 2, "command": [PYTHON, str(PROBE), *args],
           "scheduler": {"profile": "local", "local": {"max_parallel": 2}},
           "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}
    doc.update(extra)
    return doc


def test_a_failed_attempts_log_shows_its_stderr_then_the_allocations_output(workspace):
    run_dir = init_run(workspace, plan_doc=plan("--fail", "--say", "hello from the client"))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    settle(run_dir)
    proc = tau("tau-logs", str(run_dir), "shard-00001")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["hello from the client", "probe: failing shard-00001 attempt-0001, as asked"]
    assert lines[3] == f"==> {run_dir}/submissions/submission-0001/local/task-00001.log <=="
    assert json.loads(lines[4])["error"] == "the client exited with status 3"
    assert proc.stderr == ""


@pytest.mark.slow
def test_a_named_attempt_and_json_for_programs(workspace):
    run_dir = init_run(workspace, plan_doc=plan("--fail", retry={"max_attempts": 5}))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    settle(run_dir)
    assert tau("tau-retry", str(run_dir)).returncode == 0
    settle(run_dir)
    doc = json.loads(tau("tau-logs", str(run_dir), "shard-00000", "--attempt", "attempt-0001", "-o", "json").stdout)
    assert (doc["kind"], doc["attempt_id"], doc["state"]) == ("tau.logs", "attempt-0001", "failed")
    assert [e["source"] for e in doc["logs"]] == ["client", "allocation"]
    assert doc["logs"][0]["text"] == "probe: failing shard-00000 attempt-0001, as asked\n"
    assert doc["logs"][0]["path"] == f"{run_dir}/shards/shard-00000/attempts/attempt-0001/client.log"
    newest = tau("tau-logs", str(run_dir), "shard-00000").stdout
    assert newest.startswith("probe: failing shard-00000 attempt-0002, as asked\n")


@pytest.mark.slow
def test_follow_streams_a_live_attempt_and_ends_when_it_ends(workspace):
    run_dir = init_run(workspace, plan_doc=plan("--say", "started", "--sleep", "3", records=10, shards=1))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    wait_for(lambda: (run_dir / "shards/shard-00000/attempts/attempt-0001/client.log").exists(), what="a log")
    started = time.monotonic()
    proc = subprocess.Popen([str(BIN / "tau-logs"), str(run_dir), "shard-00000", "--follow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for_tests())
    first = proc.stdout.readline()
    assert first == "started\n"
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert time.monotonic() - started >= 2  # it waited for the attempt to end
    assert f"==> {run_dir}/submissions/submission-0001/local/task-00000.log <==" in out
    assert '"state":"succeeded"' in out


def test_an_unknown_shard_or_attempt_is_66_and_follow_with_json_is_2(settled):
    proc = tau("tau-logs", str(settled), "shard-00042")
    assert proc.returncode == 66 and error_of(proc)["message"] == "tau-logs: run 'run' has no shard 'shard-00042'"
    proc = tau("tau-logs", str(settled), "shard-00001", "--attempt", "attempt-0009")
    assert proc.returncode == 66 and error_of(proc)["message"] == "tau-logs: shard-00001 has no attempt 'attempt-0009'"
    proc = tau("tau-logs", str(settled), "shard-00001", "--follow", "-o", "json")
    assert proc.returncode == 2 and error_of(proc)["message"] == "tau-logs: --follow streams text: drop -o json"


@pytest.mark.parametrize("name", ["1", "001", "shard-1"])
def test_a_shard_named_by_its_number_prints_that_shards_log_and_names_it_by_its_id(settled, name):
    by_id = tau("tau-logs", str(settled), "shard-00001")
    proc = tau("tau-logs", str(settled), name)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == by_id.stdout and "failing shard-00001 on its first attempt" in proc.stdout
    doc = json.loads(tau("tau-logs", str(settled), name, "-o", "json").stdout)
    assert (doc["shard_id"], doc["attempt_id"]) == ("shard-00001", "attempt-0001")


@pytest.mark.parametrize(("args", "named"), [(["4"], "shard-00004"), (["--", "-1"], "-1"), (["seven"], "seven"),
                                             (["shard-x"], "shard-x")])
def test_a_number_past_the_run_a_negative_or_junk_is_66_and_changes_nothing(settled, args, named):
    before = snapshot(settled)
    proc = tau("tau-logs", str(settled), *args)
    assert proc.returncode == 66
    assert error_of(proc)["message"] == f"tau-logs: run 'run' has no shard '{named}'"
    assert proc.stdout == ""
    assert snapshot(settled) == before


QUEUEING = ("import os, sys, time; s = os.environ['TAU_SHARD_ID']; print(s, os.environ['TAU_ATTEMPT_ID'], 'here', "
            "flush=True); sys.exit(3) if s == 'shard-00001' else time.sleep(60)")


@pytest.mark.slow
def test_an_attempt_still_queued_is_said_to_have_no_output_yet_or_the_newest_with_output_is_shown(workspace):
    """One place for the whole run: shard-00001 fails at once; then shard-00000 or shard-00002 sleeps in the place
    while the other, and shard-00001's second attempt, wait in the queue."""
    run_dir = init_run(workspace, plan_doc={
        "records": 30, "shards": 3, "command": [PYTHON, "-c", QUEUEING], "retry": {"max_attempts": 3},
        "scheduler": {"profile": "local", "local": {"max_parallel": 1}},
        "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}})
    try:
        assert tau("tau-submit", str(run_dir), "--shard", "1").returncode == 0
        quiesce(run_dir)
        assert tau("tau-submit", str(run_dir)).returncode == 0
        client_log = "shards/{}/attempts/attempt-0001/client.log"
        running = wait_for(lambda: next((s for s in ("shard-00000", "shard-00002")
                                         if (run_dir / client_log.format(s)).exists()), None), what="a client")
        queued = ({"shard-00000", "shard-00002"} - {running}).pop()
        assert tau("tau-retry", str(run_dir)).returncode == 0  # shard-00001's attempt-0002 waits for the place
        status(run_dir)  # observe | reconcile: the queue's word on the waiting attempts is recorded
        assert not (run_dir / client_log.format(queued)).exists()

        proc = tau("tau-logs", str(run_dir), "1")
        assert (proc.returncode, proc.stdout) == (0, "")
        assert proc.stderr == "tau-logs: shard-00001 attempt-0002 has no output yet: it is pending (queued)\n"
        proc = tau("tau-logs", str(run_dir), queued)
        assert (proc.returncode, proc.stdout) == (0, "")
        assert proc.stderr == f"tau-logs: {queued} attempt-0001 has no output yet: it is pending (queued)\n"

        earlier = tau("tau-logs", str(run_dir), "1", "--attempt", "attempt-0001")
        assert earlier.stdout.startswith("shard-00001 attempt-0001 here\n") and earlier.stderr == ""
        proc = tau("tau-logs", str(run_dir), "1", "--latest-with-output")
        assert (proc.returncode, proc.stdout) == (0, earlier.stdout)
        assert proc.stderr == ("tau-logs: shard-00001 attempt-0002 has no output yet: it is pending (queued); "
                               "showing attempt-0001, the newest attempt with output\n")
        doc = json.loads(tau("tau-logs", str(run_dir), "1", "--latest-with-output", "-o", "json").stdout)
        assert (doc["attempt_id"], doc["state"]) == ("attempt-0001", "failed")
        proc = tau("tau-logs", str(run_dir), queued, "--latest-with-output")  # a first attempt: nothing earlier
        assert (proc.returncode, proc.stdout) == (0, "")
        assert proc.stderr == f"tau-logs: {queued} attempt-0001 has no output yet: it is pending (queued)\n"
        proc = tau("tau-logs", str(run_dir), running)  # it printed: no word on stderr
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"{running} attempt-0001 here\n", "")

        proc = tau("tau-logs", str(run_dir), "1", "--latest-with-output", "--attempt", "attempt-0001")
        assert proc.returncode == 2 and error_of(proc)["message"] == (
            "tau-logs: --attempt names the attempt to show: drop --latest-with-output")
        proc = tau("tau-logs", str(run_dir), "1", "--latest-with-output", "--follow")
        assert proc.returncode == 2 and error_of(proc)["message"] == (
            "tau-logs: --follow waits for the newest attempt's output: drop --latest-with-output")
    finally:
        tau("tau-cancel", str(run_dir))
