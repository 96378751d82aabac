"""The crash matrix of the writer's protocols: every `store.*` failpoint, armed in a real child process.

A crash is a real SIGKILL sent by the failpoint; afterwards a fresh process must see the old state or the new one
(exact bytes, never a partial record), and the next write into that folder must leave no temp debris.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from helpers import PYTHON, ROOT
from taulib import failpoints, jsonio
from taulib.rundir.records import RunDir

REPEATS = 5
FOLDER = "shards/shard-00000/attempts/attempt-0001"
TARGET = {"publish": f"{FOLDER}/result-like.json", "replace": f"{FOLDER}/readiness.json",
          "mkdir": FOLDER}
# steps before the new state is on disk, and steps at or after it (every store failpoint is one or the other)
BEFORE_COMMIT = {"store.publish.temp_written", "store.publish.temp_synced", "store.replace.temp_written",
                 "store.replace.temp_synced"}
COMMITTED = {"store.publish.linked", "store.publish.temp_removed", "store.publish.renamed", "store.replace.renamed",
             "store.mkdir.created"}
# steps reached only where hard links are missing: crashed on a real FUSE filesystem without them
NO_LINKS = {"store.publish.renamed"}
# steps at which a crash leaves a temp file behind for the next writer to clean up
LEAVES_TEMP = {"store.publish.temp_written", "store.publish.temp_synced", "store.publish.linked",
               "store.replace.temp_written", "store.replace.temp_synced"}
STORE_NAMES = [name for name in failpoints.NAMES if name.startswith("store.")]
# those on the FUSE filesystem take root (to mount it); the rest run anywhere
STORE_PARAMS = [pytest.param(name, marks=pytest.mark.root) if name in NO_LINKS else name for name in STORE_NAMES]

CHILD = r"""
import json, sys, time
from taulib.errors import TauError
from taulib.rundir.records import RunDir

run, op, rel, payload = sys.argv[1:5]
started = time.monotonic()
with RunDir(run) as run_dir:
    try:
        if op == "publish":
            run_dir.publish(rel, json.loads(payload))
        elif op == "replace":
            run_dir.replace(rel, json.loads(payload))
        else:
            run_dir.make_folders(rel)
    except TauError as exc:
        print(json.dumps({"error": type(exc).__name__, "code": exc.code, "message": exc.message}))
        sys.exit(exc.code)
print(json.dumps({"ok": True, "elapsed": time.monotonic() - started}))
"""


def readiness(revision: int) -> dict:
    return {"kind": "tau.readiness", "schema_version": 1, "run_id": "run", "shard_id": "shard-00000",
            "attempt_id": "attempt-0001", "revision": revision, "state": "running", "restarts": revision - 1,
            "message": f"revision {revision}", "updated_at": "2026-01-02T03:04:05.000006Z"}


def shard(end: int = 20) -> dict:
    return {"kind": "tau.shard", "schema_version": 1, "run_id": "run", "shard_id": "shard-00000", "index": 0,
            "record_start": 0, "record_end": end}


def protocol_of(name: str) -> str:
    protocol = name.split(".")[1]
    assert protocol in TARGET, f"failpoint {name!r} belongs to a store protocol this matrix does not know"
    return protocol


def prepare(run_path: Path, protocol: str) -> tuple[bytes | None, bytes | None, dict | None]:
    """Set up the old state; return (old bytes, new bytes, the record the child writes)."""
    run_path.mkdir(mode=0o700)
    with RunDir(str(run_path)) as run_dir:
        if protocol == "publish":
            run_dir.make_folders(FOLDER)
            return None, jsonio.canonical(shard()), shard()
        if protocol == "replace":
            run_dir.replace(TARGET["replace"], readiness(1))
            return jsonio.canonical(readiness(1)), jsonio.canonical(readiness(2)), readiness(2)
        run_dir.make_folders(FOLDER.rpartition("/")[0])  # mkdir creates one folder: the attempt's
    return None, None, None


def child(run_path: Path, protocol: str, record: dict | None, armed: str | None,
          extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("TAU_FAILPOINTS", None)
    if armed:
        env["TAU_FAILPOINTS"] = armed
    env.update(extra_env or {})
    return subprocess.run([PYTHON, "-c", CHILD, str(run_path), protocol, TARGET[protocol], json.dumps(record)],
                          capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=60)


def temps(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith(".tau.")) if folder.is_dir() else []


def state_of(run_path: Path, protocol: str) -> bytes | None:
    """What a fresh RunDir sees: the record's bytes (validated, canonical), or for mkdir a marker."""
    with RunDir(str(run_path)) as run_dir:
        if protocol == "mkdir":
            if not run_dir.has_folder(FOLDER):
                return None
            assert (run_path / FOLDER).stat().st_mode & 0o777 == 0o700
            return b"folder"
        data = run_dir.read_bytes(TARGET[protocol])
        if data is not None:
            run_dir.read(TARGET[protocol])  # never partial: it parses, validates and is canonical
        return data


def next_write_into_folder(run_path: Path) -> None:
    with RunDir(str(run_path)) as run_dir:
        run_dir.publish(f"{FOLDER}/other.json", shard(99))


def workspace_for(name: str, request) -> Path:
    return request.getfixturevalue("nolink_workspace" if name in NO_LINKS else "workspace")


@pytest.mark.parametrize("name", STORE_PARAMS)
def test_a_crash_at_each_store_step_leaves_the_old_or_the_new_state_and_debris_the_next_write_removes(
        request, name):
    workspace = workspace_for(name, request)
    protocol = protocol_of(name)
    for repeat in range(REPEATS):
        run_path = workspace / f"run-{repeat}"
        old, new, record = prepare(run_path, protocol)
        if protocol == "mkdir":
            new = b"folder"

        proc = child(run_path, protocol, record, f"{name}=crash")
        assert proc.returncode == -9, (proc.returncode, proc.stdout, proc.stderr)
        assert proc.stdout == ""

        seen = state_of(run_path, protocol)
        assert seen in (old, new)
        assert seen == (new if name in COMMITTED else old), name
        folder = run_path / FOLDER
        assert len(temps(folder)) == (1 if name in LEAVES_TEMP else 0), temps(folder)

        next_write_into_folder(run_path)
        assert temps(folder) == []
        assert state_of(run_path, protocol) == seen

        # and the interrupted operation, run again, converges on the new state
        again = child(run_path, protocol, record, None)
        if protocol == "replace" and seen == new:
            assert again.returncode == 73
            assert "revision must be 3, not 2" in json.loads(again.stdout)["message"]
        else:
            assert again.returncode == 0, again.stdout + again.stderr
        assert state_of(run_path, protocol) == new
        assert temps(folder) == []


@pytest.mark.parametrize("name", STORE_PARAMS)
def test_a_failpoint_armed_with_error_raises_failpoint_error_and_commits_nothing_before_its_step(request, name):
    workspace = workspace_for(name, request)
    protocol = protocol_of(name)
    run_path = workspace / "run"
    old, new, record = prepare(run_path, protocol)
    if protocol == "mkdir":
        new = b"folder"

    proc = child(run_path, protocol, record, f"{name}=error")

    assert proc.returncode == 74
    error = json.loads(proc.stdout)
    assert error == {"error": "FailpointError", "code": 74, "message": f"failpoint {name!r} injected an error"}
    assert state_of(run_path, protocol) == (new if name in COMMITTED else old)
    assert temps(run_path / FOLDER) == []


def test_a_failpoint_armed_with_delay_delays_that_step(workspace):
    run_path = workspace / "run"
    _, new, record = prepare(run_path, "publish")
    proc = child(run_path, "publish", record, "store.publish.temp_synced=delay:0.2")
    assert proc.returncode == 0, proc.stderr
    assert 0.2 <= json.loads(proc.stdout)["elapsed"] < 10
    assert state_of(run_path, "publish") == new


def test_failpoints_armed_for_other_steps_do_not_fire(workspace):
    run_path = workspace / "run"
    _, new, record = prepare(run_path, "publish")
    proc = child(run_path, "publish", record, "store.replace.temp_synced=crash; store.mkdir.created=error")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"] is True
    assert state_of(run_path, "publish") == new


def test_once_crash_crashes_the_first_process_only(workspace, tmp_path):
    run_path = workspace / "run"
    old, new, record = prepare(run_path, "replace")
    marker = tmp_path / "crashed-once"
    armed = "store.replace.temp_synced=once-crash"
    env = {"TAU_FAILPOINT_ONCE": str(marker)}
    first = child(run_path, "replace", record, armed, env)
    second = child(run_path, "replace", record, armed, env)
    assert first.returncode == -9
    assert marker.exists()
    assert second.returncode == 0, second.stderr
    assert state_of(run_path, "replace") == new
    assert temps(run_path / FOLDER) == []


def test_every_failpoint_name_is_hit_in_the_source_and_every_hit_is_listed():
    source = "\n".join(p.read_text() for p in sorted((ROOT / "taulib").rglob("*.py")))
    literal = set(re.findall(r'failpoints\.hit\("([^"]+)"\)', source))
    steps = set(re.findall(r'failpoints\.hit\(f"\{protocol\}\.([a-z_]+)"\)', source))
    protocols = set(re.findall(r'\bwrite_temp\([^()]*"(store\.[a-z]+)"[,)]', source))
    assert steps and protocols, "the store's f-string failpoints moved; update this test"
    other_hits = re.findall(r'failpoints\.hit\((?!"|f"\{protocol\}\.)', source)
    assert other_hits == [], "a failpoint name built in another way cannot be checked against NAMES"
    used = literal | {f"{protocol}.{step}" for protocol in protocols for step in steps}
    assert sorted(set(failpoints.NAMES) - used) == [], "listed in NAMES but never hit"
    assert sorted(used - set(failpoints.NAMES)) == [], "hit in taulib but missing from NAMES"
    assert len(set(failpoints.NAMES)) == len(failpoints.NAMES)


def test_the_crash_matrix_classifies_every_store_failpoint():
    assert set(STORE_NAMES) == COMMITTED | BEFORE_COMMIT
    assert not COMMITTED & BEFORE_COMMIT
    assert {protocol_of(name) for name in STORE_NAMES} == set(TARGET)


def test_crash_at_n_crashes_the_nth_time_the_process_reaches_the_step():
    code = ("from taulib import failpoints\n"
            "for n in range(1, 4):\n"
            "    failpoints.hit('submit.submitted')\n"
            "    print('passed', n, flush=True)\n")
    env = dict(os.environ, TAU_FAILPOINTS="submit.submitted=crash@2")
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=60)
    assert (proc.returncode, proc.stdout) == (-9, "passed 1\n")
    env["TAU_FAILPOINTS"] = "submit.submitted=crash@5"
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "passed 1\npassed 2\npassed 3\n")


@pytest.mark.parametrize("armed", ["submit.sbatch_returned=crash", "tau:collect.sbatch_returned=crash"])
def test_a_renamed_failpoint_answers_to_its_old_name_too(armed):
    new = {"submit": "submit.handed_off", "collect": "collect.handed_off"}[armed.split(":")[-1].split(".")[0]]
    assert set(failpoints.ALIASES) <= set(failpoints.NAMES)
    assert not {old for olds in failpoints.ALIASES.values() for old in olds} & set(failpoints.NAMES)
    code = f"from taulib import failpoints\nfailpoints.hit('submit.prepared')\nprint('before', flush=True)\n" \
           f"failpoints.hit({new!r})\nprint('after', flush=True)\n"
    env = dict(os.environ, TAU_FAILPOINTS=armed)
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=60)
    assert (proc.returncode, proc.stdout) == (-9, "before\n")
    env["TAU_FAILPOINTS"] = armed.replace("sbatch_returned", "handed_off")  # its own name, as before
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=60)
    assert (proc.returncode, proc.stdout) == (-9, "before\n")
    env["TAU_FAILPOINTS"] = armed.replace("sbatch_returned", "attempts_published")  # another step: not this one
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "before\nafter\n"), armed
