"""tau-attempt run: the in-allocation side. An allocation writes nothing until it proves it is the persisted
attempt's scheduler identity; a late, duplicate or foreign allocation exits 77 and writes nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import BIN, CLIENT, PYTHON, env_for_tests, error_of, hold_lock, init_run, settle, snapshot, tau



def allocation(run_dir: Path, submission: str = "submission-0001", **env: str) -> subprocess.CompletedProcess:
    """Run `tau-attempt run` as an allocation with exactly the scheduler variables given."""
    full = env_for_tests()
    for name in [k for k in full if k.startswith(("TAU_LOCAL_", "SLURM_"))]:
        del full[name]
    full.update(env)
    return subprocess.run([str(BIN / "tau-attempt"), "run", str(run_dir), "--submission", submission],
                          capture_output=True, text=True, env=full, timeout=60)


# (case id, submission, scheduler variables, exit code, message after "tau-attempt: ")
REFUSED = [
    ("finished-attempt", "submission-0001", {"TAU_LOCAL_JOB_ID": "submission-0001", "TAU_LOCAL_TASK_ID": "1"}, 77,
     "shard-00001/attempt-0001 is already failed; a duplicate allocation writes nothing"),
    ("sealed-shard", "submission-0001", {"TAU_LOCAL_JOB_ID": "submission-0001", "TAU_LOCAL_TASK_ID": "0"}, 77,
     "shard-00000 already has a winner; this allocation writes nothing"),
    ("foreign-job-id", "submission-0001", {"TAU_LOCAL_JOB_ID": "submission-0007", "TAU_LOCAL_TASK_ID": "1"}, 77,
     "allocation submission-0007_1 does not match the persisted scheduler identity of shard-00001/attempt-0001; a "
     "late or duplicate allocation writes nothing"),
    ("task-not-in-submission", "submission-0001", {"TAU_LOCAL_JOB_ID": "submission-0001", "TAU_LOCAL_TASK_ID": "7"},
     77, "submission 'submission-0001' has no task 7"),
    ("unknown-submission", "submission-0042", {"TAU_LOCAL_JOB_ID": "submission-0042", "TAU_LOCAL_TASK_ID": "1"},
     66, "run 'run' has no submission 'submission-0042'"),
    ("task-id-not-a-number", "submission-0001", {"TAU_LOCAL_JOB_ID": "submission-0001", "TAU_LOCAL_TASK_ID": "one"},
     77, "TAU_LOCAL_TASK_ID is not a task index; tau-attempt runs only inside an allocation"),
    ("slurm-job-not-an-array", "submission-0001", {"SLURM_JOB_ID": "4242"}, 77,
     "this Slurm job is not an array task (SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID unset)"),
    ("slurm-task-of-a-local-run", "submission-0001",
     {"SLURM_JOB_ID": "4243", "SLURM_ARRAY_JOB_ID": "4242", "SLURM_ARRAY_TASK_ID": "1"}, 77,
     "allocation 4242_1 does not match the persisted scheduler identity of shard-00001/attempt-0001; a late or "
     "duplicate allocation writes nothing"),
]


@pytest.mark.parametrize("submission,env,code,message", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_an_allocation_that_is_not_the_persisted_attempt_writes_nothing(settled, submission, env, code, message):
    before = snapshot(settled)
    proc = allocation(settled, submission, **env)
    assert proc.returncode == code, proc.stderr
    err = error_of(proc)
    assert (err["code"], err["command"]) == (code, "tau-attempt")
    assert err["message"] == "tau-attempt: " + message
    assert proc.stdout == ""
    assert snapshot(settled) == before


@pytest.mark.slow
def test_a_late_allocation_of_a_retried_shard_is_stale_and_writes_nothing(workspace):
    run_dir = init_run(workspace, records=10, shards=1,
                       command=[PYTHON, CLIENT, "--fail-first", "shard-00000", "--sleep", "1"])
    assert tau("tau-submit", str(run_dir)).returncode == 0
    assert settle(run_dir)["retryable"] == ["shard-00000"]
    assert tau("tau-retry", str(run_dir)).returncode == 0  # attempt-0002 now sleeps before it writes its result
    first = run_dir / "shards/shard-00000/attempts/attempt-0001"
    before = snapshot(first)
    proc = allocation(run_dir, TAU_LOCAL_JOB_ID="submission-0001", TAU_LOCAL_TASK_ID="0")
    assert proc.returncode == 77, proc.stderr
    assert error_of(proc)["message"] == "tau-attempt: shard-00000/attempt-0001 is stale: a newer attempt exists"
    assert snapshot(first) == before
    final = settle(run_dir)
    assert final["state"] == "succeeded" and final["shards"][0]["winner"] == "attempt-0002"


def test_the_allocation_started_by_the_executor_records_result_manifest_and_winner(settled):
    attempt = settled / "shards/shard-00002/attempts/attempt-0001"
    record = json.loads((attempt / "attempt.json").read_text())
    assert (record["state"], record["terminal"]["classification"]) == ("succeeded", "succeeded")
    result = json.loads((attempt / "result.json").read_text())
    assert (result["outcome"], result["exit_code"], result["actual_records"]) == ("complete", 0, 20)
    assert json.loads((attempt / "readiness.json").read_text())["state"] == "stopped"
    manifest = json.loads((attempt / "manifest.json").read_text())
    assert sum(f["rows"] for f in manifest["files"]) == 20
    assert json.loads((settled / "shards/shard-00002/winner.json").read_text())["attempt_id"] == "attempt-0001"
    failed = settled / "shards/shard-00001/attempts/attempt-0001"
    assert json.loads((failed / "result.json").read_text())["error"] == "the client exited with status 3"
    assert not (failed / "manifest.json").exists()
    assert not (settled / "shards/shard-00001/winner.json").exists()


# -- stop signals: a scheduler signals the allocation's processes one by one -------------------------------------

STOPPED = "stopped by signal 15; the scheduler's evidence decides the attempt"
SLOW_TO_STOP = """import signal, time
signal.signal(signal.SIGTERM, lambda *a: None)  # a client that cleans up for longer than the scheduler waits
time.sleep(60)
"""


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text() if entry.isdigit() else ""
        except OSError:
            continue
        if stat and int(stat.rpartition(")")[2].split()[1]) == pid:
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def _running_client(run_dir: Path, marker: str, timeout: float = 30) -> tuple[int, int]:
    """(tau-attempt pid, client pid) of the local run's task 0, once its client (argv naming marker) runs."""
    record = run_dir / "submissions/submission-0001/local/task-00000.json"
    deadline = time.monotonic() + timeout
    while True:
        if record.exists():
            pid = json.loads(record.read_text())["pid"]
            for child in _children(pid):
                try:
                    if marker in Path(f"/proc/{child}/cmdline").read_text():
                        time.sleep(0.3)  # the client is past its start-up
                        return pid, child
                except OSError:
                    pass
        assert time.monotonic() < deadline, "the client of task 0 did not start"
        time.sleep(0.05)


def _ended(run_dir: Path, timeout: float = 30) -> dict:
    """The local task record of task 0 once its tau-attempt has ended."""
    record = run_dir / "submissions/submission-0001/local/task-00000.json"
    deadline = time.monotonic() + timeout
    while True:
        task = json.loads(record.read_text())
        if task["state"] == "finished":
            return task
        assert time.monotonic() < deadline, f"tau-attempt did not end: {task}"
        time.sleep(0.05)


def _attempt_file(run_dir: Path, name: str) -> Path:
    return run_dir / "shards/shard-00000/attempts/attempt-0001" / name


def _readiness(run_dir: Path) -> dict:
    return json.loads(_attempt_file(run_dir, "readiness.json").read_text())


def test_a_stop_signal_that_kills_the_client_before_it_reaches_the_attempt_is_still_recorded_as_the_stop(
        workspace):
    # Slurm signals the client (the deepest process) first: the attempt sees it die of SIGTERM, then gets its own
    run_dir = init_run(workspace, records=10, shards=1, command=[PYTHON, CLIENT, "--sleep", "60"])
    assert tau("tau-submit", str(run_dir)).returncode == 0
    attempt, client = _running_client(run_dir, CLIENT)
    os.kill(client, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while _alive(client):  # gone from /proc only once the attempt has reaped it
        assert time.monotonic() < deadline, "the attempt did not reap its client"
        time.sleep(0.01)
    time.sleep(0.2)
    os.kill(attempt, signal.SIGTERM)
    task = _ended(run_dir)
    assert (task["exit_code"], task["signal"]) == (None, 15), task
    assert (_readiness(run_dir)["state"], _readiness(run_dir)["message"]) == ("stopped", STOPPED)
    assert not _attempt_file(run_dir, "result.json").exists()
    assert json.loads(_attempt_file(run_dir, "attempt.json").read_text())["state"] == "running"


def test_a_stop_is_recorded_at_once_while_the_client_is_still_ending_and_the_attempt_ends_by_the_signal(workspace):
    client_py = workspace / "slow_to_stop.py"
    client_py.write_text(SLOW_TO_STOP)
    run_dir = init_run(workspace, records=10, shards=1, command=[PYTHON, str(client_py)])
    assert tau("tau-submit", str(run_dir)).returncode == 0
    attempt, client = _running_client(run_dir, str(client_py))
    os.kill(attempt, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while _readiness(run_dir)["state"] != "stopped":
        assert time.monotonic() < deadline, _readiness(run_dir)
        time.sleep(0.05)
    assert _readiness(run_dir)["message"] == STOPPED
    assert _alive(client) and _alive(attempt)  # the client keeps its time to end; the attempt waits for it
    os.kill(client, signal.SIGKILL)  # what the scheduler does after its grace (KillWait)
    task = _ended(run_dir)
    assert (task["exit_code"], task["signal"]) == (None, 15), task
    assert not _attempt_file(run_dir, "result.json").exists()


@pytest.mark.slow
def test_a_client_killed_by_sigterm_while_the_attempt_gets_no_stop_signal_fails_after_a_short_grace(workspace):
    run_dir = init_run(workspace, records=10, shards=1, command=[PYTHON, CLIENT, "--sleep", "60"])
    assert tau("tau-submit", str(run_dir)).returncode == 0
    attempt, client = _running_client(run_dir, CLIENT)
    os.kill(client, signal.SIGTERM)
    task = _ended(run_dir)
    assert (task["exit_code"], task["signal"]) == (1, None), task
    result = json.loads(_attempt_file(run_dir, "result.json").read_text())
    assert (result["signal"], result["error"]) == (15, "the client was killed by signal 15"), result
    record = json.loads(_attempt_file(run_dir, "attempt.json").read_text())
    assert (record["state"], record["terminal"]["classification"]) == ("failed", "cancelled"), record
    assert _readiness(run_dir)["state"] == "failed"


@pytest.mark.slow
def test_the_stop_record_waits_for_its_locks_only_briefly_and_the_attempt_still_ends_by_the_signal(workspace):
    run_dir = init_run(workspace, records=10, shards=1, command=[PYTHON, CLIENT, "--sleep", "60"])
    assert tau("tau-submit", str(run_dir)).returncode == 0
    attempt, client = _running_client(run_dir, CLIENT)
    with hold_lock(run_dir, "shard-00000"):
        started = time.monotonic()
        os.kill(attempt, signal.SIGTERM)
        task = _ended(run_dir)
        took = time.monotonic() - started
    assert (task["exit_code"], task["signal"]) == (None, 15), task
    assert took < 6, f"tau-attempt took {took:.1f}s to end (the test's lock timeout is 10 s)"
    assert _readiness(run_dir)["state"] == "running"  # given up, not killed half-way: the evidence decides
    assert not _attempt_file(run_dir, "result.json").exists()


def test_a_stop_signal_ends_tau_attempt_by_that_signal_wherever_it_lands_never_by_an_exit_status(tmp_path):
    """A scheduler judges an allocation by how it ended: killed by SIGTERM is a stop (the local executor's
    accounting: cancelled), exit status 143 a failure. A signal that lands before the allocation's own handlers are
    installed (while the interpreter imports, while click parses) must end it the same way."""
    env = env_for_tests({"TAU_LOCAL_JOB_ID": "submission-0001", "TAU_LOCAL_TASK_ID": "0"})
    seen = set()
    for delay in (0.0, 0.03, 0.06, 0.09, 0.12, 0.15, 0.18, 0.21, 0.24, 0.27):
        proc = subprocess.Popen([str(BIN / "tau-attempt"), "run", str(tmp_path / "none"), "--submission",
                                 "submission-0001"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode in (-signal.SIGTERM, 66), (delay, proc.returncode, err)  # stopped, or done first
        seen.add(proc.returncode)
    assert -signal.SIGTERM in seen
