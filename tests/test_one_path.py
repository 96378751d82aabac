"""Each thing a command does is done by one library function, which the command, tau-drive's cycle and the Python
API all call: observe and reconcile (under the run lock, shared, as tau-observe holds it: a cycle waits for the lock
or reports it busy, and never asks the executor without it), the collection a drive makes once the run is finished
(tau-drive --collect and `Run.drive(collect=...)` record the same collection), an attempt's output (tau-logs and
`Run.logs` print the same bytes), and what tau-collect -o table shows (`collect.summary`).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import taulib.api as tau
from helpers import BIN, PYTHON, CLIENT, complete_run, copy_run, env_for_tests, error_of, hold_lock, init_run, \
    plan, quiesce, snapshot
from helpers import tau as command
from taulib.collect import summary
from taulib.lifecycle import drive, logs, observe
from taulib.rundir import layout
from taulib.rundir.run import Run

BUSY = "{where!r} is busy: another tau process holds locks/run.lock (waited {waited}); try again"


@pytest.fixture(scope="module")
def won(tmp_path_factory) -> Path:
    """A local run of 4 shards that all won, shard-00001 on its second attempt (its first failed, as asked)."""
    ws = tmp_path_factory.mktemp("one-path") / "ws"
    ws.mkdir(mode=0o700)
    return complete_run(ws, "won", fail_first=("shard-00001",))


@pytest.fixture(scope="module")
def short(tmp_path_factory) -> Path:
    """A local run driven until it finished without succeeding: shard-00003 fails every attempt, and has one."""
    ws = tmp_path_factory.mktemp("one-path-short") / "ws"
    ws.mkdir(mode=0o700)
    script = ("import os,sys; s=os.environ['TAU_SHARD_ID']; sys.exit(3) if s == 'shard-00003' else "
              f"os.execv(sys.executable, [sys.executable, {CLIENT!r}, '--rows-per-file', '10'])")
    run_dir = init_run(ws, "short", plan_doc=plan(command=[PYTHON, "-c", script], retry={"max_attempts": 1}))
    proc = command("tau-drive", str(run_dir), "--interval", "0.3")
    assert proc.returncode == 1, proc.stderr
    quiesce(run_dir)
    return run_dir


def copied(run_dir: Path, parent: Path) -> Path:
    """A copy of the run (its records only), in a workspace of its own."""
    parent.parent.mkdir(mode=0o700, exist_ok=True)
    return copy_run(run_dir, parent)


def lock_state(run_dir: Path, name: str) -> str:
    """How locks/NAME.lock is held now, asked through a descriptor of its own (flock(2) sets one open file against
    another, in this process too): "free", "shared" (a shared lock is granted, an exclusive one refused) or
    "exclusive"."""
    try:
        fd = os.open(run_dir / "locks" / f"{name}.lock", os.O_RDONLY)
    except FileNotFoundError:  # never taken yet
        return "free"
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return "free"
        except BlockingIOError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return "shared"
        except BlockingIOError:
            return "exclusive"
    finally:
        os.close(fd)  # lets go of what it was granted


def records(run_dir: Path) -> dict:
    """The run directory byte for byte, but its lock files (a command that waited for a lock created its file)."""
    return {path: entry for path, entry in snapshot(run_dir).items() if not path.startswith("locks")}


# -- observe and reconcile: one function, under the run lock -----------------------------------------------------

@pytest.mark.slow
def test_tau_observe_a_drive_cycle_and_the_api_ask_the_executor_only_while_they_hold_the_run_lock_shared(
        won, tmp_path, monkeypatch):
    run_dir = copied(won, tmp_path / "ws" / "copy")
    seen: list[tuple[str, str]] = []
    real = observe.observe

    def spy(run: Run) -> dict:
        seen.append((lock_state(run_dir, "run"), lock_state(run_dir, "drive")))
        return real(run)

    monkeypatch.setattr(observe, "observe", spy)
    with Run(str(run_dir)) as run:
        observe.observed(run)  # tau-observe RUN
        assert seen.pop() == ("shared", "free")
        result = drive.once(run)
        assert seen.pop() == ("shared", "exclusive")  # the cycle holds drive.lock throughout, the run lock per step
    assert result["state"] == "succeeded" and result["cycles"] == 1
    assert tau.open(run_dir).reconcile().succeeded
    assert seen == [("shared", "free")]
    assert (lock_state(run_dir, "run"), lock_state(run_dir, "drive")) == ("free", "free")


@pytest.mark.slow
def test_a_drive_cycle_meeting_the_run_lock_held_exclusively_is_busy_75_before_it_asks_the_executor(
        won, tmp_path, monkeypatch):
    run_dir = copied(won, tmp_path / "ws" / "copy")
    asked: list[str] = []
    real = observe.observe
    monkeypatch.setattr(observe, "observe", lambda run: asked.append(run.run_id) or real(run))
    monkeypatch.setenv("TAU_LOCK_TIMEOUT", "0.5")
    before = records(run_dir)
    with hold_lock(run_dir), Run(str(run_dir)) as run, pytest.raises(tau.Busy) as err:
        drive.cycle(run)
    assert err.value.code == 75
    assert err.value.message == BUSY.format(where=str(run_dir), waited="0.5s")
    assert asked == [], "the executor was asked without the run lock"
    assert records(run_dir) == before


@pytest.mark.slow
def test_tau_drive_meeting_the_run_lock_held_exclusively_exits_75_with_tau_observes_message_and_changes_nothing(
        won, tmp_path):
    run_dir = copied(won, tmp_path / "ws" / "copy")
    before = records(run_dir)
    with hold_lock(run_dir):
        procs = {name: command(name, str(run_dir), *args, env={"TAU_LOCK_TIMEOUT": "1"})
                 for name, args in (("tau-drive", ["--once"]), ("tau-observe", []))}
    for name, proc in procs.items():
        assert proc.returncode == 75, (name, proc.stderr)
        err = error_of(proc)
        assert (err["code"], err["command"], err["error"]) == (75, name, "busy")
        assert err["message"] == f"{name}: " + BUSY.format(where=str(run_dir), waited="1s")
        assert proc.stdout == ""
    assert records(run_dir) == before


@pytest.mark.slow
def test_tau_drive_waits_for_the_run_lock_held_exclusively_and_drives_once_it_is_let_go(won, tmp_path):
    run_dir = copied(won, tmp_path / "ws" / "copy")
    with hold_lock(run_dir):
        proc = subprocess.Popen([str(BIN / "tau-drive"), str(run_dir), "--once"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env_for_tests({"TAU_LOCK_TIMEOUT": "60"}))
        time.sleep(1.5)
        assert proc.poll() is None, "tau-drive did not wait for the run lock"
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert (result["state"], result["cycles"], result["served_by_another"]) == ("succeeded", 1, False)


# -- tau-drive --collect and Run.drive(collect=...) -----------------------------------------------------------------

def comparable(collection: dict, destination: Path) -> dict:
    """A collection's document with its destination named by a placeholder (the one field that tells two copies of
    a run apart)."""
    assert collection["destination"] == str(destination)
    return dict(collection, destination="DEST")


@pytest.mark.slow
@pytest.mark.parametrize("source, allow_missing", [("won", False), ("short", True)], ids=["whole", "partial"])
def test_the_apis_drive_with_collect_records_the_collection_tau_drive_collect_records(
        request, source, allow_missing, tmp_path):
    original = request.getfixturevalue(source)
    by_command, by_api = copied(original, tmp_path / "a" / "ws"), copied(original, tmp_path / "b" / "ws")
    extra = ["--allow-missing"] if allow_missing else []
    proc = command("tau-drive", str(by_command), "--once", "--collect", str(by_command.parent / "out"), *extra)
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)["collection"]
    result = tau.open(by_api).drive(once=True, collect=by_api.parent / "out", allow_missing=allow_missing)
    assert isinstance(result.collection, tau.Collection) and result.raw["collection"] is result.collection.raw
    assert comparable(result.collection.raw, by_api.parent / "out") == comparable(printed, by_command.parent / "out")
    assert printed["created"] is True and printed["complete"] is not allow_missing
    names = sorted(os.listdir(by_command.parent / "out"))
    assert sorted(os.listdir(by_api.parent / "out")) == names
    for name in names:  # the same dataset: its files byte for byte, its manifest but for when and where
        made = [(folder.parent / "out" / name).read_bytes() for folder in (by_command, by_api)]
        if name == "_tau_collection.json":
            made = [dict(json.loads(m), completed_at=None, plan_sha256=None) for m in made]  # the plan names DEST
        assert made[0] == made[1], name
    assert sorted(os.listdir(by_api / "collections")) == sorted(os.listdir(by_command / "collections"))
    again = tau.open(by_api).drive(once=True, collect=by_api.parent / "out", allow_missing=allow_missing)
    assert again.collection is not None and again.collection.created is False  # reported, not redone


@pytest.mark.slow
def test_a_run_that_did_not_succeed_is_not_collected_without_allow_missing_by_either(short, tmp_path):
    by_command, by_api = copied(short, tmp_path / "a" / "ws"), copied(short, tmp_path / "b" / "ws")
    proc = command("tau-drive", str(by_command), "--once", "--collect", str(by_command.parent / "out"))
    assert proc.returncode == 0 and json.loads(proc.stdout)["collection"] is None
    result = tau.open(by_api).drive(once=True, collect=by_api.parent / "out")
    assert result.collection is None and result.raw["collection"] is None and result.finished is not None
    assert not (by_command.parent / "out").exists() and not (by_api.parent / "out").exists()


@pytest.mark.slow
def test_the_apis_allow_missing_without_collect_is_a_usage_error_2_and_changes_nothing(short):
    before = snapshot(short)
    with pytest.raises(tau.UsageError) as err:
        tau.open(short).drive(once=True, allow_missing=True)
    assert err.value.code == 2
    assert err.value.message == "allow_missing says how collect collects: give collect=DESTINATION too"
    assert snapshot(short) == before


# -- tau-logs and Run.logs --------------------------------------------------------------------------------------

def printed_bytes(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "tau-logs"), *args], capture_output=True, env=env_for_tests(), timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("shard, attempt", [("1", "attempt-0001"), ("1", None), ("shard-00002", None)])
def test_tau_logs_and_the_apis_logs_are_the_same_bytes_for_the_same_attempt(won, shard, attempt):
    proc = printed_bytes(str(won), shard, *(["--attempt", attempt] if attempt else []))
    assert proc.returncode == 0 and proc.stderr == b""
    assert proc.stdout and tau.open(won).logs(shard, attempt).encode() == proc.stdout
    as_json = printed_bytes(str(won), shard, *(["--attempt", attempt] if attempt else []), "-o", "json")
    with Run(str(won)) as run:
        shown = logs.render(run, layout.canonical_shard_id(shard), attempt)
    assert json.loads(as_json.stdout) == shown.document() and shown.text() == proc.stdout


@pytest.mark.slow
def test_an_attempt_the_shard_does_not_have_is_66_with_the_same_message_from_tau_logs_and_the_api(won):
    proc = command("tau-logs", str(won), "1", "--attempt", "attempt-0009")
    assert proc.returncode == 66
    assert error_of(proc)["message"] == "tau-logs: shard-00001 has no attempt 'attempt-0009'"
    with pytest.raises(tau.NotFound) as err:
        tau.open(won).logs(1, "attempt-0009")
    assert (err.value.code, err.value.message) == (66, "shard-00001 has no attempt 'attempt-0009'")


# -- tau-collect -o table ---------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("source, allow_missing", [("won", False), ("short", True)], ids=["whole", "partial"])
def test_tau_collects_table_is_the_librarys_summary_of_its_result(request, source, allow_missing, tmp_path):
    run_dir = copied(request.getfixturevalue(source), tmp_path / "ws" / "copy")
    args = [str(run_dir), "--destination", str(run_dir.parent / "out"), *(["--allow-missing"] if allow_missing
                                                                            else [])]
    made = command("tau-collect", *args)
    assert made.returncode == 0, made.stderr
    result = json.loads(made.stdout)
    shown = command("tau-collect", *args, "-o", "table")  # asked again: reported, the same collection
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == summary.text(result)
    assert summary.rows(result) == [[f["path"], f["rows"], f["size"], f["sha256"]] for f in result["files"]]
    assert ("partial: 1 shard(s) without a winner left out\nmissing: shard-00003 (exhausted: "
            in shown.stdout) is allow_missing


def test_the_summary_of_a_collection_whose_job_has_not_finished_is_the_sentence_that_says_so():
    assert summary.text({"state": "running", "collection_id": "collection-0002", "job_id": "4711"}) == (
        "collection collection-0002: running as Slurm job 4711; run tau-collect again (or with --wait) to follow it")


@pytest.mark.parametrize("source", ["won", "short"])
def test_a_shards_state_comes_from_one_decision_fed_by_one_read_of_each_of_its_records(request, source, monkeypatch):
    """Every shard's view reads each of its records at most once and is decided by one call of
    `rules.shard.decide`, whose state and reason are what tau-status prints for an unsealed shard."""
    from taulib.rundir import state
    from taulib.rundir.records import RunDir

    run_dir = request.getfixturevalue(source)
    printed = {s["id"]: (s["state"], s["reason"]) for s in json.loads(
        command("tau-status", str(run_dir)).stdout)["shards"]}
    reads: list[str] = []
    decisions: list[object] = []
    real_read, real_decide = RunDir.read_bytes, state.decide
    monkeypatch.setattr(RunDir, "read_bytes", lambda self, rel, *a, **k: (reads.append(rel),
                                                                          real_read(self, rel, *a, **k))[1])
    monkeypatch.setattr(state, "decide", lambda *a: (decisions.append(a), real_decide(*a))[1])
    with Run(str(run_dir)) as run:
        submitted = state.Submitted(run)
        for sid in run.shard_ids():
            reads.clear()
            decisions.clear()
            view = state.shard_view(run, sid, submitted=submitted)
            again = sorted(rel for rel in set(reads) if reads.count(rel) > 1)
            assert not again, f"{sid}: read more than once: {again}"
            assert len(decisions) == 1 and decisions[0][0] is view.facts
            assert (view.decision.state, view.decision.reason) == printed[sid]
    assert any(state == "exhausted" for state, _ in printed.values()) == (source == "short")
