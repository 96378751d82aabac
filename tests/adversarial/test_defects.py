"""One regression test per defect found under faults and hostile input (each failed on the code before it), so
that none comes back. The suite's generated cases are in the other modules of tests/adversarial/."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from helpers import (BIN, PYTHON, ROOT, complete_run, copy_run, env_for_tests, error_of, init_run, module_workspace,
                     plan, settle, snapshot, tau)

from taulib import jsonio

SHARD_FILE = "shards/shard-00001/attempts/attempt-0001"


def observation(observed_at: str | None = None, state: str = "failed", shard: str = "shard-00001",
                task_index: int = 1) -> dict:
    return {"kind": "tau.observations", "schema_version": 1, "run_id": "run",
            "observed_at": observed_at or jsonio.now_rfc3339(), "executor": "local",
            "sources": {"queue": "observed", "accounting": "observed", "reason": None},
            "attempts": [{"shard_id": shard, "attempt_id": "attempt-0001",
                          "scheduler": {"executor": "local", "job_id": "submission-0001", "task_index": task_index},
                          "queue": {"state": "running", "raw": "RUNNING", "reason": None} if state == "running"
                          else None,
                          "accounting": None if state == "running" else
                          {"state": state, "raw": state.upper(), "exit_code": 3, "reason": "exited with status 3"}}]}


def at(seconds_from_now: float) -> str:
    return jsonio.format_time(time.time() + seconds_from_now)


def refused_unchanged(run_dir: Path, proc: subprocess.CompletedProcess, before: dict, code: int, words: str) -> dict:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    error = error_of(proc)
    assert words in error["message"], error
    assert snapshot(run_dir) == before
    return error


@pytest.fixture
def run_copy(settled, tmp_path) -> Path:
    return copy_run(settled, tmp_path / "copy")


@pytest.fixture(scope="module")
def complete(tmp_path_factory) -> Path:
    ws = module_workspace(tmp_path_factory, "complete")
    return complete_run(ws, records=40, shards=2)


# -- a fast-clocked observer -------------------------------------------------------------------------------------

def test_a_document_dated_an_hour_ahead_is_refused_whole_before_anything_is_written(run_copy):
    before = snapshot(run_copy)
    proc = tau("tau-reconcile", str(run_copy), input=json.dumps(observation(at(3600), "running")))
    error = refused_unchanged(run_copy, proc, before, 65, "ahead of this machine's clock")
    assert "tau-reconcile refuses a document from the future" in error["message"]
    # a minute of skew is tolerated
    ok = tau("tau-reconcile", str(run_copy), input=json.dumps(observation(at(30))))
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("when", ["2999-01-01T00:00:00.000000Z", "9999-12-31T23:59:59.000000Z"])
def test_a_document_from_the_far_future_never_wedges_the_run(run_copy, when):
    before = snapshot(run_copy)
    proc = tau("tau-reconcile", str(run_copy), input=json.dumps(observation(when, "running")))
    refused_unchanged(run_copy, proc, before, 65, "ahead of this machine's clock")
    now = tau("tau-reconcile", str(run_copy), input=json.dumps(observation()))
    assert now.returncode == 0
    assert json.loads(now.stdout)["retryable"] == ["shard-00001"]


def test_persisted_evidence_dated_ahead_is_clamped_and_later_evidence_applies_at_once(run_copy):
    """A reconciler whose clock ran an hour fast wrote "running" evidence; a correct observer's FAILED applies."""
    from taulib.rundir.records import RunDir

    rel = f"{SHARD_FILE}/observation.json"
    future = jsonio.format_time(time.time() + 3600)
    with RunDir(str(run_copy)) as run_dir:
        current = run_dir.read(rel, "tau.observation")
        attempt_rel = f"{SHARD_FILE}/attempt.json"
        attempt = run_dir.read(attempt_rel, "tau.attempt")
        record = {"kind": "tau.observation", "schema_version": 1, "run_id": "run", "shard_id": "shard-00001",
                  "attempt_id": "attempt-0001", "revision": 1 if current is None else current["revision"] + 1,
                  "state": "running", "source": "queue", "terminal": False, "observed_at": future,
                  "changed_at": future, "deadline": None, "exit_code": None, "reason": None, "classification": None}
        if current is not None:
            record = {**current, **{k: record[k] for k in ("revision", "state", "source", "terminal", "observed_at",
                                                           "changed_at", "exit_code", "reason", "classification")},
                      "deadline": None}
        run_dir.replace(rel, record)
        if attempt["state"] != "running":  # make the attempt unfinished again, as it was while it ran
            run_dir.replace(attempt_rel, {**attempt, "state": "running", "revision": attempt["revision"] + 1,
                                          "terminal": None})
    proc = tau("tau-reconcile", str(run_copy), input=json.dumps(observation()))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [c["to"] for c in doc["changes"]] == ["failed"], doc["changes"]
    shard = next(s for s in doc["shards"] if s["id"] == "shard-00001")
    assert shard["state"] == "failed", shard
    assert jsonio.parse_time(shard["evidence"]["observation"]["changed_at"]) <= time.time() + 1


# -- impossible and hostile values --------------------------------------------------------------------------------

@pytest.mark.parametrize("when", [f"{day}T{clock}.000000Z" for day, clock in (
    ("2026-13-01", "00:00:00"), ("0000-01-01", "00:00:00"), ("2026-02-30", "00:00:00"), ("2026-01-01", "25:61:61"),
    ("2026-04-31", "12:00:00"), ("2026-01-01", "23:59:60"))])
def test_an_impossible_date_is_refused_with_65_naming_it(run_copy, when):
    before = snapshot(run_copy)
    proc = tau("tau-reconcile", str(run_copy), input=json.dumps(observation(when)))
    error = refused_unchanged(run_copy, proc, before, 65, "observed_at")
    assert when in error["message"] or "not a" in error["message"], error


def nested(doc: dict, path: tuple[str, ...], levels: int) -> str:
    """`doc` as JSON text with the value at `path` wrapped in `levels` arrays (json.dumps itself cannot go this
    deep)."""
    marker = "@@deep@@"
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = marker
    return json.dumps(doc).replace(json.dumps(marker), "[" * levels + '"local"' + "]" * levels)


def test_json_nested_a_thousand_deep_is_bad_input_for_tau_init_and_tau_reconcile(workspace, run_copy):
    proc = tau("tau-init", str(workspace / "deep"), input=nested(plan(), ("scheduler", "profile"), 1000))
    assert proc.returncode == 65, proc.stderr
    assert "nested too deeply" in error_of(proc)["message"]
    assert not (workspace / "deep").exists()
    before = snapshot(run_copy)
    proc = tau("tau-reconcile", str(run_copy), input=nested(observation(), ("executor",), 1000))
    refused_unchanged(run_copy, proc, before, 65, "nested too deeply")


def test_shard_size_cannot_bypass_the_shard_limit(workspace):
    doc = plan()
    del doc["shards"]
    doc.update(records=10**15, shard_size=1)
    proc = tau("tau-init", str(workspace / "huge"), input=json.dumps(doc))
    assert proc.returncode == 65, proc.stderr
    assert "1,000,000" in error_of(proc)["message"] or "1000000" in error_of(proc)["message"]
    assert not (workspace / "huge").exists()


@pytest.mark.parametrize("where", ["command", "env", "allowed_roots"])
def test_nul_in_argv_env_or_an_allowed_root_is_refused_before_anything_is_written(workspace, where):
    doc = plan()
    if where == "command":
        doc["command"] = doc["command"] + ["bad\u0000arg"]
    elif where == "env":
        doc["env"] = {"GOOD": "bad\u0000value"}
    else:
        doc["collection"] = {"allowed_roots": ["/tmp/a\u0000b"]}
    proc = tau("tau-init", str(workspace / "nul"), input=json.dumps(doc))
    assert proc.returncode == 65, proc.stderr
    assert error_of(proc)["code"] == 65
    assert not (workspace / "nul").exists()


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["submissions/submission-x", "collections/collection-x"])
# a malformed name in a shard's attempts folder is refused instead (tau-run(5) "Identifiers"): test_tampered.py,
# test_a_live_shards_attempts_folder_that_contradicts_the_run_is_refused_naming_the_path
def test_a_folder_with_a_malformed_name_is_ignored_by_every_command(run_copy, workspace, folder):
    (run_copy / folder).mkdir(mode=0o700, parents=True)
    obs = tau("tau-observe", str(run_copy))
    assert obs.returncode == 0, obs.stderr
    rec = tau("tau-reconcile", str(run_copy), input=obs.stdout)
    assert rec.returncode == 0, rec.stderr
    for command, args in (("tau-winner", ("--shard", "shard-00000")), ("tau-status", ())):
        proc = tau(command, str(run_copy), *args)
        assert proc.returncode == 0, (command, proc.stderr)
    proc = tau("tau-collect", str(run_copy), "--destination", str(run_copy.parent / "data"))
    assert proc.returncode == 1 and "have no winner" in error_of(proc)["message"], proc.stderr
    retry = tau("tau-retry", str(run_copy))
    assert retry.returncode == 0, retry.stderr
    assert json.loads(retry.stdout)["submission_id"] == "submission-0002"
    assert settle(run_copy)["state"] == "succeeded"
    proc = tau("tau-collect", str(run_copy), "--destination", str(run_copy.parent / "data"))
    assert proc.returncode == 0, proc.stderr
    assert (run_copy / folder).is_dir()  # not tau's to remove


@pytest.mark.parametrize("command", ["tau-reconcile", "tau-retry", "tau-winner", "tau-collect", "tau-cancel"])
def test_a_symlinked_lock_file_is_refused_with_77_by_every_command(complete, tmp_path, command):
    run_copy = copy_run(complete, tmp_path / "c")
    outside = tmp_path / "outside.lock"
    outside.write_text("")
    lock = run_copy / "locks" / "run.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(outside)
    args = {"tau-reconcile": (), "tau-retry": (), "tau-winner": ("--shard", "shard-00000"),
            "tau-collect": ("--destination", str(run_copy.parent / "data")), "tau-cancel": ()}[command]
    stdin = json.dumps(dict(observation(), attempts=[])) if command == "tau-reconcile" else None
    before = snapshot(run_copy)
    proc = tau(command, str(run_copy), *args, input=stdin)
    refused_unchanged(run_copy, proc, before, 77, "symlink")
    assert outside.read_text() == ""


def test_tau_reconcile_documents_65_for_an_unknown_shard_and_exits_with_it(run_copy):
    before = snapshot(run_copy)
    proc = tau("tau-reconcile", str(run_copy), input=json.dumps(observation(shard="shard-00099", task_index=99)))
    refused_unchanged(run_copy, proc, before, 65, "shard-00099")
    page = (ROOT / "man" / "tau-reconcile.1").read_text()
    section = page[page.index(".SH EXIT STATUS"):page.index(".SH EXAMPLES")]
    assert "names a shard or an attempt" in section.split("66 when")[0]


# -- output keys, pipes and signals ------------------------------------------------------------------------------

def test_tau_retry_with_nothing_to_submit_prints_every_documented_key(tmp_path, workspace):
    run_dir = complete_run(workspace, records=20, shards=2)
    proc = tau("tau-retry", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {"run_id", "submission_id", "purpose", "job_id", "job_name", "state", "created", "adopted", "tasks",
            "skipped", "stopped"} <= set(doc), doc
    assert (doc["submission_id"], doc["job_id"], doc["job_name"], doc["state"], doc["created"], doc["adopted"]) == (
        None, None, None, None, False, False)


def test_the_call_that_finishes_a_crashed_submission_reports_it_as_adopted(workspace):
    run_dir = init_run(workspace, records=20, shards=2)
    crashed = tau("tau-submit", str(run_dir), env={"TAU_FAILPOINTS": "tau-submit:submit.prepared=crash"})
    assert crashed.returncode == -9
    again = tau("tau-submit", str(run_dir))
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert (doc["submission_id"], doc["adopted"], doc["state"]) == ("submission-0001", True, "submitted"), doc
    assert settle(run_dir)["state"] == "succeeded"


def test_large_output_cut_by_head_exits_141_quietly(workspace):
    run_dir = init_run(workspace, records=4000, shards=2000)
    script = f"{BIN}/tau-status {run_dir} | head -c 100 >/dev/null; echo ${{PIPESTATUS[0]}}"
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env_for_tests(), timeout=120)
    assert proc.stdout.strip() == "141", proc
    assert proc.stderr == ""


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_is_named_in_the_error_object_and_its_exit_code(workspace, signum, code):
    run_dir = init_run(workspace, records=20, shards=2)
    # started with the signal's default action, whatever this suite inherited: under nohup(1) SIGHUP is ignored,
    # and a command that finds a stop signal ignored leaves it so (tau-status then rightly keeps watching)
    proc = subprocess.Popen([str(BIN / "tau-status"), str(run_dir), "-o", "table", "--watch", "--interval", "0.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for_tests(),
                            preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL))
    try:
        assert proc.stdout.readline()  # it runs
    finally:
        proc.send_signal(signum)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # it did not stop: the test fails, and leaves nothing running
            proc.kill()
            proc.communicate()
            raise
    assert proc.returncode == code, err
    error = json.loads(err.strip().splitlines()[-1])
    name = signal.Signals(signum).name
    assert error == {"error": "interrupted", "code": code, "command": "tau-status",
                     "message": f"tau-status: interrupted by {name}", "details": {"signal": name}}


# -- the status file beside the run -------------------------------------------------------------------------------

def test_a_stop_signal_ignored_when_a_command_starts_stays_ignored_as_nohup_asks():
    code = ("import signal; from taulib.cli import common; common._catch_stop_signals(); "
            "print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, signal.getsignal(signal.SIGTERM) is "
            "common._stopped)")
    proc = subprocess.run([PYTHON, "-c", code], env=env_for_tests(), capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert (proc.returncode, proc.stdout) == (0, "True True\n"), proc.stderr  # SIGHUP stays ignored; SIGTERM unwinds


def test_overlapping_reconciles_keep_the_status_file_whole_private_and_current(run_copy):
    target = run_copy.parent / "run.status.json"
    obs = tau("tau-observe", str(run_copy)).stdout
    seen = {"reads": 0, "bad": []}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                data = target.read_bytes()
            except FileNotFoundError:
                continue
            seen["reads"] += 1
            try:
                doc = json.loads(data)
                assert doc["kind"] == "tau.status"
            except (ValueError, KeyError, AssertionError):
                seen["bad"].append(data[:80])
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        procs = [subprocess.Popen([str(BIN / "tau-reconcile"), str(run_copy), "--status-file", str(target)],
                                  stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, env=env_for_tests()) for _ in range(12)]
        for p in procs:
            p.stdin.write(obs)
            p.stdin.close()
        codes = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    finally:
        stop.set()
        sampler.join(timeout=10)
    assert all(code == 0 for code, _ in codes), codes
    assert seen["bad"] == [] and seen["reads"] > 0, seen
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(os.listdir(run_copy.parent)) == ["run", "run.status.json"]  # no temp file left
    assert json.loads(target.read_text())["retryable"] == ["shard-00001"]


def test_a_killed_status_file_writer_leaves_debris_the_next_one_removes(run_copy):
    target = run_copy.parent / "run.status.json"
    obs = tau("tau-observe", str(run_copy)).stdout
    crashed = tau("tau-reconcile", str(run_copy), "--status-file", str(target), input=obs,
                  env={"TAU_FAILPOINTS": "store.replace.temp_synced=crash"})
    assert crashed.returncode == -9
    debris = [n for n in os.listdir(run_copy.parent) if n.startswith(".run.status.json.tau-")]
    assert len(debris) == 1 and not target.exists(), os.listdir(run_copy.parent)
    again = tau("tau-reconcile", str(run_copy), "--status-file", str(target), input=obs)
    assert again.returncode == 0, again.stderr
    assert sorted(os.listdir(run_copy.parent)) == ["run", "run.status.json"]


def test_a_crashed_publish_in_the_runs_own_folder_is_tidied_by_the_next_reconcile(run_copy):
    # cancel.json and schema.json are written once, so no later write into the run's folder would remove the temp
    # file a crash between link and unlink leaves there (a tau-attempt fixing the schema, here a tau-cancel)
    crashed = tau("tau-cancel", str(run_copy), env={"TAU_FAILPOINTS": "tau-cancel:store.publish.linked=crash"})
    assert crashed.returncode == -9, crashed.stderr
    temps = [n for n in os.listdir(run_copy) if n.startswith(".tau.") and n.endswith(".tmp")]
    assert len(temps) == 1 and (run_copy / temps[0]).stat().st_nlink == 2, os.listdir(run_copy)
    orphan = run_copy / ".tau.0123456789abcdef.tmp"
    orphan.write_bytes(b"{}")
    orphan.chmod(0o600)
    record = (run_copy / "cancel.json").read_bytes()
    obs = tau("tau-observe", str(run_copy)).stdout
    held = subprocess.Popen([PYTHON, "-c", HOLD_ROOT, str(run_copy)], stdout=subprocess.PIPE, text=True)
    try:
        assert held.stdout.readline() == "held\n"
        busy = tau("tau-reconcile", str(run_copy), input=obs)
        assert busy.returncode == 0, busy.stderr  # a writer may be mid-publish: its temp files are left alone
        assert len([n for n in os.listdir(run_copy) if n.endswith(".tmp")]) == 2
    finally:
        held.kill()
        held.wait()
    done = tau("tau-reconcile", str(run_copy), input=obs)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "cancelled"
    assert [n for n in os.listdir(run_copy) if n.endswith(".tmp")] == []
    assert (run_copy / "cancel.json").read_bytes() == record and (run_copy / "cancel.json").stat().st_nlink == 1


HOLD_ROOT = """
import sys, time
from taulib.rundir import locks
from taulib.rundir.records import RunDir
with RunDir(sys.argv[1]) as rd, locks.hold(rd, "root"):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("where, code, words", [
    ("run/x.json", 2, "inside the run directory"), ("nowhere/x.json", 66, "does not exist"),
    ("folder", 77, "is a folder"), ("x" * 240, 2, "too long")])
def test_a_status_file_that_cannot_be_written_is_refused_before_anything_is_applied(run_copy, where, code, words):
    (run_copy.parent / "folder").mkdir()
    before = snapshot(run_copy)
    proc = tau("tau-reconcile", str(run_copy), "--status-file", str(run_copy.parent / where),
               input=json.dumps(observation()))
    refused_unchanged(run_copy, proc, before, code, words)


# -- collection destinations --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, code, words", [
    ("d" * 228, 2, "its stage beside it needs 28 more"), ("d" * 255, 2, "227 bytes or fewer"),
    ("d" * 256, 2, "227 bytes or fewer")])
def test_a_destination_name_too_long_for_its_stage_is_refused_and_the_journal_stays_usable(
        complete, tmp_path, name, code, words):
    run_dir = copy_run(complete, tmp_path / "c")
    proc = tau("tau-collect", str(run_dir), "--destination", str(run_dir.parent / name))
    assert proc.returncode == code, proc.stderr
    assert words in error_of(proc)["message"]
    assert not (run_dir / "collections").exists() or os.listdir(run_dir / "collections") == []
    good = tau("tau-collect", str(run_dir), "--destination", str(run_dir.parent / ("d" * 227)))
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["state"] == "succeeded"


def test_a_destination_below_a_regular_file_or_too_long_is_refused_and_nothing_is_made(complete, tmp_path):
    run_dir = copy_run(complete, tmp_path / "c")
    (run_dir.parent / "file").write_text("x")
    before = sorted(os.listdir(run_dir.parent))
    proc = tau("tau-collect", str(run_dir), "--destination", str(run_dir.parent / "file" / "sub" / "data"))
    assert proc.returncode == 73, proc.stderr
    assert "is not a folder" in error_of(proc)["message"]
    deep = run_dir.parent / "/".join(["p" * 200] * 21) / "data"
    proc = tau("tau-collect", str(run_dir), "--destination", str(deep))
    assert proc.returncode == 2, proc.stderr
    assert "too long" in error_of(proc)["message"]
    assert sorted(os.listdir(run_dir.parent)) == before  # not one folder made


def test_a_collection_that_fails_part_way_is_retired_and_another_destination_works(complete, tmp_path):
    run_dir = copy_run(complete, tmp_path / "c")
    proc = tau("tau-collect", str(run_dir), "--destination", str(run_dir.parent / "a"),
               env={"TAU_FAILPOINTS": "collect.staged=error"})
    assert proc.returncode == 74, proc.stderr
    status = json.loads((run_dir / "collections/collection-0001/status.json").read_text())
    assert status["state"] == "failed" and "collect.staged" in status["reason"], status
    assert sorted(os.listdir(run_dir.parent)) == ["run"]  # no dataset, no stage
    good = tau("tau-collect", str(run_dir), "--destination", str(run_dir.parent / "b"))
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["collection_id"] == "collection-0002"


@pytest.mark.parametrize("kind", ["fifo", "symlink", "folder", "sparse"])
def test_a_hostile_collection_result_in_a_published_destination_is_never_trusted_or_read_whole(
        complete, tmp_path, kind):
    run_dir = copy_run(complete, tmp_path / "c")
    dest = run_dir.parent / "data"
    first = tau("tau-collect", str(run_dir), "--destination", str(dest))
    assert first.returncode == 0, first.stderr
    result = dest / "_tau_collection.json"
    result.unlink()
    if kind == "fifo":
        os.mkfifo(result)
    elif kind == "symlink":
        result.symlink_to(tmp_path / "elsewhere.json")
    elif kind == "folder":
        result.mkdir()
    else:
        with open(result, "wb") as fh:
            fh.truncate(4 << 30)
    started = time.monotonic()
    again = tau("tau-collect", str(run_dir), "--destination", str(dest), timeout=60)
    assert time.monotonic() - started < 30
    assert again.returncode == 73, again.stderr
    assert "already exists; tau never overwrites a dataset" in error_of(again)["message"]


# -- bundles -------------------------------------------------------------------------------------------------------

def _sealed(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    (out / "a.txt").write_text("alpha\n")
    proc = tau("tau-bundle-seal", str(out), "--generation", "g1")
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("victim", ["g1.json", "g1.complete"])
@pytest.mark.parametrize("command", ["tau-bundle-verify", "tau-bundle-seal"])
def test_a_fifo_in_place_of_a_bundle_record_is_refused_not_waited_on(tmp_path, victim, command):
    out = _sealed(tmp_path)
    path = out / ".tau" / "bundles" / victim
    path.unlink()
    os.mkfifo(path)
    started = time.monotonic()
    proc = tau(command, str(out), "--generation", "g1", timeout=60)
    assert time.monotonic() - started < 30
    assert proc.returncode == 77, proc.stderr
    assert "not a regular file" in error_of(proc)["message"]


@pytest.mark.parametrize("victim", [".tau", ".tau/bundles", ".tau/bundles/g1.json"])
def test_a_symlink_in_a_bundles_acknowledgement_is_refused_with_77(tmp_path, victim):
    out = _sealed(tmp_path)
    real = out / victim
    moved = tmp_path / "moved"
    real.rename(moved)
    real.symlink_to(moved)
    proc = tau("tau-bundle-verify", str(out), "--generation", "g1")
    assert proc.returncode == 77, proc.stderr
    assert "symlink" in error_of(proc)["message"]


# -- a client's output linked to a file outside the run -------------------------------------------------------------

def test_a_hard_link_to_an_outside_file_in_a_candidate_is_refused_and_the_outside_file_untouched(workspace):
    outside = workspace / "precious.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": list(range(10))}), outside)
    os.chmod(outside, 0o644)
    linker = workspace / "linker.py"
    linker.write_text(f"import os\nos.link({str(outside)!r}, os.path.join(os.environ['TAU_OUTPUT_DIR'], "
                      "'part-0.parquet'))\n")
    run_dir = init_run(workspace, plan_doc=plan(records=10, shards=1, command=[PYTHON, str(linker)]))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    doc = settle(run_dir)
    shard = doc["shards"][0]
    assert shard["state"] == "failed" and "hard link" in shard["reason"], shard
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644


# -- crashed tau-init, filesystems without hard links -----------------------------------------------------------------

@pytest.mark.parametrize("failpoint", ["store.publish.temp_written", "store.publish.temp_synced",
                                       "store.publish.linked"])
def test_tau_init_killed_at_a_publish_step_finishes_when_run_again(workspace, failpoint):
    doc = json.dumps(plan(records=20, shards=2))
    crashed = tau("tau-init", str(workspace / "run"), input=doc, env={"TAU_FAILPOINTS": f"{failpoint}=crash"})
    assert crashed.returncode == -9
    again = tau("tau-init", str(workspace / "run"), input=doc)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["created"] is True
    temps = [str(p) for p in (workspace / "run").rglob(".tau.*.tmp")]
    assert temps == []


@pytest.mark.root
def test_a_run_on_a_filesystem_without_hard_links_inits_runs_wins_and_collects(nolink_workspace):
    run_dir = complete_run(nolink_workspace, records=40, shards=2)
    dest = nolink_workspace / "data"
    proc = tau("tau-collect", str(run_dir), "--destination", str(dest))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["records"] == 40
    assert not [p for p in nolink_workspace.rglob("*") if p.name.startswith(".tau.") or "tau-reserved" in p.name]
    with pytest.raises(OSError):
        os.link(dest / "_tau_collection.json", nolink_workspace / "probe")  # the filesystem really has no links


# -- paths that worked but no test exercised ------------------------------------------------------------------------

RESUMING_CLIENT = r"""
import os, sys, pyarrow as pa, pyarrow.parquet as pq
out, start, end = os.environ["TAU_OUTPUT_DIR"], int(os.environ["TAU_RECORD_START"]), int(os.environ["TAU_RECORD_END"])
middle = (start + end) // 2
first = os.path.join(out, "part-00000.parquet")
if not os.path.exists(first):  # the first attempt writes half its records, then fails
    pq.write_table(pa.table({"id": list(range(start, middle))}), first)
    sys.exit(3)
assert os.environ["TAU_ATTEMPT_ORDINAL"] == "2", "the kept half is seen by the next attempt only"
pq.write_table(pa.table({"id": list(range(middle, end))}), os.path.join(out, "part-00001.parquet"))
"""


@pytest.mark.slow
def test_resume_always_keeps_the_shards_dataset_across_attempts_and_the_winner_holds_both_halves(workspace):
    client = workspace / "resuming.py"
    client.write_text(RESUMING_CLIENT)
    run_dir = init_run(workspace, plan_doc=plan(records=40, shards=2, command=[PYTHON, str(client)],
                                                resume="always"))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    first = settle(run_dir)
    assert first["retryable"] == ["shard-00000", "shard-00001"], first
    for sid in ("shard-00000", "shard-00001"):
        assert os.listdir(run_dir / "shards" / sid / "dataset") == ["part-00000.parquet"]  # kept, not removed
        assert not (run_dir / "shards" / sid / "attempts/attempt-0001/dataset").exists()
    assert tau("tau-retry", str(run_dir)).returncode == 0
    assert settle(run_dir)["state"] == "succeeded"
    manifest = json.loads((run_dir / "shards/shard-00001/attempts/attempt-0002/manifest.json").read_text())
    assert manifest["dataset"] == "shards/shard-00001/dataset"
    assert [(f["path"], f["rows"]) for f in manifest["files"]] == [("part-00000.parquet", 10),
                                                                   ("part-00001.parquet", 10)]
    dest = workspace / "data"
    proc = tau("tau-collect", str(run_dir), "--destination", str(dest))
    assert proc.returncode == 0, proc.stderr
    import pyarrow.parquet as pq

    assert sorted(pq.read_table(dest, columns=["id"]).column("id").to_pylist()) == list(range(40))
