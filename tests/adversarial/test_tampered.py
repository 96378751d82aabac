"""Tampered run directories x every command that reads them.

A complete run (every shard won, reconciled, not collected) is copied for each case, one of its records, folders
or dataset files is tampered with (truncated, emptied, of the wrong kind, with a wrong digest, swapped for a
symlink, a hard link, a FIFO or a file of another user, its mode loosened, a manifest path with `..` or absolute),
and each command runs on it in this process. Promises checked on every case:
- no command misbehaves: exit 0, or a documented code with one JSON error object and no traceback; none hangs;
- nothing outside the run is written: the files that symlinks and hard links point to, and the run's workspace
  (but for the destination tau-collect was given), are byte-for-byte as they were;
- nothing tampered is laundered: tau-collect never publishes a dataset, and tau-winner never reports a valid
  chain, from a run whose winner chain (winner, result, manifest, dataset file) was tampered with.
What refusing means differs by command, and REFUSES says it for each: the records a command must refuse to act on
when their bytes or their trust changed (every command: run.json and plan.json, the run's identity; tau-winner: the
chain's records; tau-collect: the whole chain, its dataset files too), and, for a command that only reads (status,
logs, observe), that the run is left exactly as it was, whatever it answered.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from harness import invoke, misbehaviour

from helpers import complete_run, module_workspace, plan, snapshot
from taulib import jsonio

ATTEMPT = "shards/shard-00000/attempts/attempt-0001"
RECORDS = ["run.json", "plan.json", "schema.json", "index/sealed-0000.json", "shards/shard-00000/winner.json",
           f"{ATTEMPT}/attempt.json", f"{ATTEMPT}/result.json", f"{ATTEMPT}/manifest.json", f"{ATTEMPT}/readiness.json",
           "submissions/submission-0001/plan.json", "submissions/submission-0001/status.json"]
DATA = f"{ATTEMPT}/dataset/part-00000.parquet"
FOLDERS = ["shards/shard-00000", f"{ATTEMPT}", f"{ATTEMPT}/dataset", "shards", "locks", "submissions"]
CHAIN = {"shards/shard-00000/winner.json", f"{ATTEMPT}/result.json", f"{ATTEMPT}/manifest.json", DATA,
         f"{ATTEMPT}/dataset"}
FOREIGN_UID = 65534  # nobody


class Hang(BaseException):
    """A command took too long: it waits on something it should have refused (a FIFO)."""


def _alarm(signum, frame):
    raise Hang()


def truncate(path: Path, outside: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def empty(path: Path, outside: Path) -> None:
    path.write_bytes(b"")


def wrong_kind(path: Path, outside: Path) -> None:
    doc = json.loads(path.read_text())
    doc["kind"] = "tau.winner" if doc.get("kind") != "tau.winner" else "tau.shard"
    path.write_bytes(jsonio.canonical(doc))


def wrong_digest(path: Path, outside: Path) -> None:
    text = path.read_text()
    doc = json.loads(text)

    def flip(node):
        if isinstance(node, dict):
            return {k: ("0" * 64 if k in ("sha256", "plan_sha256", "schema_digest", "result_sha256")
                        and isinstance(v, str) else flip(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [flip(v) for v in node]
        return node

    changed = flip(doc)
    if changed == doc:  # nothing to flip: change a number instead
        changed = dict(doc, revision=doc.get("revision", 1) + 7) if "revision" in doc else dict(doc, schema_version=9)
    path.write_bytes(jsonio.canonical(changed))


def flip_byte(path: Path, outside: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def symlink(path: Path, outside: Path) -> None:
    target = outside / f"{path.name}.target"
    shutil.move(str(path), target)
    path.symlink_to(target)


def hard_link(path: Path, outside: Path) -> None:
    target = outside / f"{path.name}.linked"
    shutil.copy2(path, target)
    path.unlink()
    os.link(target, path)


def fifo(path: Path, outside: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    os.mkfifo(path, 0o600)


def foreign(path: Path, outside: Path) -> None:
    os.chown(path, FOREIGN_UID, FOREIGN_UID, follow_symlinks=False)


def loosened(path: Path, outside: Path) -> None:
    os.chmod(path, 0o777 if path.is_dir() else 0o666)


def manifest_escape_up(path: Path, outside: Path) -> None:
    doc = json.loads(path.read_text())
    doc["files"][0]["path"] = "../../../../../../outside.parquet"
    path.write_bytes(jsonio.canonical(doc))


def manifest_absolute(path: Path, outside: Path) -> None:
    doc = json.loads(path.read_text())
    doc["files"][0]["path"] = str(outside / "absolute.parquet")
    doc["dataset"] = str(outside)
    path.write_bytes(jsonio.canonical(doc))


# tampers that change what a record or file says, or whom it may be trusted from; a hard link to an identical copy
# and a loosened mode on a dataset file change neither (records hard-linked elsewhere are accepted, tau-run(5))
CHANGES_BYTES_OR_TRUST = {truncate, empty, wrong_kind, wrong_digest, flip_byte, symlink, fifo, foreign,
                          manifest_escape_up, manifest_absolute}
FILE_TAMPERS = [truncate, empty, wrong_kind, wrong_digest, symlink, hard_link, fifo, foreign, loosened]
CASES = ([(rel, t) for rel in RECORDS for t in FILE_TAMPERS]
         + [(DATA, t) for t in (truncate, empty, flip_byte, symlink, hard_link, fifo, foreign, loosened)]
         + [(rel, t) for rel in FOLDERS for t in (symlink, fifo, foreign, loosened)]
         + [(f"{ATTEMPT}/manifest.json", t) for t in (manifest_escape_up, manifest_absolute)])

IDENTITY = {"run.json", "plan.json"}
# command -> whether it must refuse (a documented non-zero code) when `rel` was tampered with by `tamper`
REFUSES = {
    # an existing winner is re-validated from its records (tau-winner(1)); its dataset files are hashed again by
    # tau-collect as it reads them
    "tau-winner": lambda rel, tamper: tamper in CHANGES_BYTES_OR_TRUST and rel in IDENTITY | (CHAIN & set(RECORDS)),
    "tau-collect": lambda rel, tamper: tamper in CHANGES_BYTES_OR_TRUST and rel in IDENTITY | CHAIN,
}
READ_ONLY = {"tau-status", "tau-logs", "tau-observe"}  # never write into the run, refusing or not


def must_refuse(command: str, rel: str, tamper) -> bool:
    rule = REFUSES.get(command, lambda rel, tamper: tamper in CHANGES_BYTES_OR_TRUST and rel in IDENTITY)
    return rule(rel, tamper)


COMMANDS = {  # command -> argv after the run directory, and stdin
    "tau-status": ([], None),
    "tau-observe": ([], None),
    "tau-reconcile": ([], "observations"),
    "tau-winner": ([], None),
    "tau-retry": ([], None),
    "tau-submit": ([], None),
    "tau-collect": (["--destination", "{dest}"], None),
    "tau-logs": (["shard-00000"], None),
    "tau-cancel": (["--shard", "shard-00001"], None),
    "tau-init": ([], "request"),  # the request the run was made from: tau-init reads the run to compare
}
REQUEST = {"records": 20, "shards": 2}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    ws = module_workspace(tmp_path_factory, "tampered")
    return complete_run(ws, **REQUEST)


def outside_state(outside: Path) -> dict:
    return {p.name: (p.stat().st_mode, p.stat().st_uid, p.read_bytes() if p.is_file() else None)
            for p in sorted(outside.iterdir())} if outside.exists() else {}


@pytest.mark.parametrize("rel, tamper", [  # giving a file away (chown) takes root
    pytest.param(rel, t, id=f"{t.__name__}:{rel}", marks=[pytest.mark.root] if t is foreign else [])
    for rel, t in CASES])
def test_every_command_on_a_tampered_run_refuses_cleanly_writes_nothing_outside_and_launders_nothing(
        pristine, tmp_path, rel, tamper, tally):
    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    base = ws / "run"
    shutil.copytree(pristine, base, symlinks=True)
    request = json.dumps(plan(**REQUEST)).encode()
    observations = jsonio.canonical({
        "kind": "tau.observations", "schema_version": 1, "run_id": "run", "observed_at": jsonio.now_rfc3339(),
        "executor": "local", "sources": {"queue": "observed", "accounting": "observed", "reason": None},
        "attempts": []})
    pristine_copy = tmp_path / "pristine"
    shutil.copytree(base, pristine_copy, symlinks=True)
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for command, (args, stdin) in COMMANDS.items():
            run_dir = base
            if run_dir.exists():
                shutil.rmtree(run_dir) if not run_dir.is_symlink() else run_dir.unlink()
            shutil.copytree(pristine_copy, run_dir, symlinks=True)
            for p in outside.iterdir():
                p.unlink() if not p.is_dir() or p.is_symlink() else shutil.rmtree(p)
            tamper(run_dir / rel, outside)
            before_outside = outside_state(outside)
            before_ws = sorted(os.listdir(ws))
            dest = ws / "data"
            argv = [str(run_dir)] + [a.format(dest=dest) for a in args]
            data = {"observations": observations, "request": request, None: b""}[stdin]
            before_run = snapshot(run_dir) if command in READ_ONLY else None
            signal.alarm(20)
            try:
                outcome = invoke(command, argv, data)
            except Hang:
                tally.case(f"{command} {tamper.__name__}:{rel}", "hangs (more than 20 s)")
                continue
            finally:
                signal.alarm(0)
            problem = None if outcome.code == 0 or (outcome.code == 1 and outcome.out) else misbehaviour(outcome)
            if problem is None and outcome.code == 0 and must_refuse(command, rel, tamper):
                problem = f"{command} went on (exit 0) with a tampered {rel}, which it must refuse"
            if problem is None and before_run is not None and snapshot(run_dir) != before_run:
                problem = f"{command}, which only reads, changed the run"
            if problem is None and outside_state(outside) != before_outside:
                problem = "a file outside the run changed"
            if problem is None and sorted(os.listdir(ws)) != sorted(set(before_ws) | ({"data"} if outcome.code == 0
                                                                                       and command == "tau-collect"
                                                                                       else set())):
                problem = f"the workspace changed: {sorted(os.listdir(ws))}"
            tally.case(f"{command} {tamper.__name__}:{rel} -> {outcome.code}", problem)
            if (ws / "data").exists():
                shutil.rmtree(ws / "data")
    finally:
        signal.signal(signal.SIGALRM, previous)
    tally.check(len(COMMANDS))


# -- a live shard's attempts folder that contradicts the run's own records ------------------------------------------

LIVE = "shards/shard-00001/attempts"


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Path:
    """A settled run whose shard-00001 failed its first attempt and waits for a retry (no winner: live)."""
    from helpers import init_run, settle, tau

    ws = module_workspace(tmp_path_factory, "tampered-live")
    run_dir = init_run(ws, records=20, shards=2, fail_first=("shard-00001",))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    doc = settle(run_dir)
    assert doc["retryable"] == ["shard-00001"], doc
    return run_dir


def _junk_folder(run_dir: Path) -> tuple[str, int]:
    (run_dir / LIVE / "attempt-abc").mkdir(mode=0o700)
    return (f"{LIVE}/attempt-abc is not an attempt of shard-00001: an attempts folder holds only attempt-NNNN "
            "folders, numbered 1..n; tau never makes any other name there, so the run was edited by hand or by another "
            "tool"), 65


def _renumbered(run_dir: Path) -> tuple[str, int]:
    (run_dir / LIVE / "attempt-0001").rename(run_dir / LIVE / "attempt-0002")
    return (f"{LIVE}/attempt-0002/attempt.json is the record of attempt-0001, not of attempt-0002, whose folder "
            "holds it; the run was edited by hand or by another tool"), 73


def _padded(run_dir: Path) -> tuple[str, int]:
    (run_dir / LIVE / "attempt-0001").rename(run_dir / LIVE / "attempt-00001")
    return (f"{LIVE}/attempt-00001 is not an attempt of shard-00001: an attempts folder holds only attempt-NNNN "
            "folders, numbered 1..n; tau never makes any other name there, so the run was edited by hand or by another "
            "tool"), 65


def _gap(run_dir: Path) -> tuple[str, int]:
    """A format-1 style gap: a second folder beyond the first one missing (attempt-0003 beside attempt-0001)."""
    (run_dir / LIVE / "attempt-0003").mkdir(mode=0o700)
    return (f"{LIVE}/attempt-0002: the attempts of shard-00001 are not numbered 1..n (attempt-0003 where attempt-0002 "
            "should be); the run was edited by hand or by another tool"), 73


@pytest.mark.parametrize("tamper", [_junk_folder, _renumbered, _padded, _gap], ids=lambda t: t.__name__[1:])
@pytest.mark.parametrize("command, args, stdin", [
    ("tau-observe", [], None), ("tau-reconcile", [], "observations"), ("tau-retry", [], None),
    ("tau-status", [], None)])
def test_a_live_shards_attempts_folder_that_contradicts_the_run_is_refused_naming_the_path(
        live, tmp_path, tamper, command, args, stdin):
    run_dir = tmp_path / "run"
    shutil.copytree(live, run_dir, symlinks=True)
    message, code = tamper(run_dir)
    if tamper is _gap:
        message = message.replace(f"{LIVE}/attempt-0002:", f"{LIVE}/attempt-0003:")
    observations = jsonio.canonical({
        "kind": "tau.observations", "schema_version": 1, "run_id": "run", "observed_at": jsonio.now_rfc3339(),
        "executor": "local", "sources": {"queue": "observed", "accounting": "observed", "reason": None},
        "attempts": []})
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and "locks" not in p.parts}
    outcome = invoke(command, [str(run_dir), *args], observations if stdin else b"")
    assert misbehaviour(outcome) is None, misbehaviour(outcome)
    assert outcome.code == code, outcome.err
    error = json.loads(outcome.err)
    assert error["message"] == f"{command}: {run_dir}/{message}", error["message"]
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and "locks" not in p.parts}
    assert after == before


# -- the readiness of a running attempt with services -----------------------------------------------------------------

def _truncated(doc: dict, path: Path) -> None:
    data = jsonio.canonical(doc)
    path.write_bytes(data[: len(data) // 2])


def _more_backends(doc: dict, path: Path) -> None:
    deployment = doc["deployments"][0]
    deployment["expected_backends"] += 1
    deployment["backends"].append(dict(deployment["backends"][0], backend=3))
    path.write_bytes(jsonio.canonical(doc))


@pytest.mark.parametrize("tamper, status_code, message", [
    (_truncated, 65, "is not valid JSON"),
    (_more_backends, 0, "the deployments and their expected backends never change"),
])
def test_a_tampered_readiness_of_a_running_attempt_with_services_is_refused_and_no_service_survives(
        workspace, tamper, status_code, message):
    from services_fixtures import attempt_dir, backend_pids, record, running, services_plan

    from helpers import init_run, settle, tau, wait_for

    pids = workspace / "pids"
    run_dir = init_run(workspace, plan_doc=services_plan(pids, client=("--sleep", "30")))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    doc = wait_for(lambda: (r := record(run_dir, "readiness.json")) and r["client"] == "running" and r,
                   what="the client running")
    started = backend_pids(run_dir, pids)
    path = attempt_dir(run_dir) / "readiness.json"
    tamper(doc, path)
    shown = tau("tau-status", str(run_dir))
    assert shown.returncode == status_code, shown.stderr
    if status_code:
        assert json.loads(shown.stderr)["message"].startswith(f"tau-status: {path} is not valid JSON")
    # the allocation's next heartbeat reads it, refuses it and ends, stopping its services
    wait_for(lambda: not running(started), timeout=30, what="every backend gone")
    log = run_dir / "submissions" / "submission-0001" / "local" / "task-00000.log"
    wait_for(lambda: message in log.read_text(), timeout=10, what="the allocation's error in its log")
    if tamper is _more_backends:
        assert json.loads(path.read_text())["deployments"][0]["expected_backends"] == 3  # never written over
    final = settle(run_dir)  # the attempt's scheduler evidence says it failed: its readiness is not read again
    assert final["shards"][0]["state"] == "failed" and final["retryable"] == ["shard-00000"]
