"""A run's program and environment are fixed at tau-init: the pre-flight, and the same environment for every
attempt, first or retry, whoever submits it from wherever (from `/`, from a cron-like `env -i`)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from helpers import BIN, PYTHON, env_for_tests, error_of, settle, tau

PROBE = Path(__file__).resolve().parent / "clients" / "probe.py"


def plan(command: list[str], **extra) -> dict:
    doc = {"records": 20, "shards": 2, "command": command, "scheduler": {"profile": "local"},
           "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}
    doc.update(extra)
    return doc


def init_in(folder: Path, name: str, doc: dict, env: dict | None = None) -> subprocess.CompletedProcess:
    """tau-init FOLDER/NAME run from FOLDER (where a relative program is resolved)."""
    return subprocess.run([str(BIN / "tau-init"), name], input=json.dumps(doc), capture_output=True, text=True,
                          cwd=folder, env=env if env is not None else env_for_tests())


def client_dir(workspace: Path) -> Path:
    """A folder with the probe client in it, as ./probe.py, whose shebang is this test's interpreter."""
    folder = workspace / "proj"
    folder.mkdir(mode=0o700)
    target = folder / "probe.py"
    target.write_text(f"#!{PYTHON}\n" + PROBE.read_text().split("\n", 1)[1])
    target.chmod(0o700)
    return folder


def seen(folder: Path, shard: str, attempt: str) -> dict:
    return json.loads((folder / f"env-{shard}-{attempt}.json").read_text())


# -- the pre-flight ----------------------------------------------------------------------------------------------

def test_a_relative_program_is_resolved_once_against_the_folder_tau_init_runs_in(workspace):
    folder = client_dir(workspace)
    proc = init_in(folder, "run", plan(["./probe.py"]))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["program"] == str(folder / "probe.py")
    record = json.loads((folder / "run" / "run.json").read_text())
    assert record["environment"] == {"program": str(folder / "probe.py"), "cwd": str(folder),
                                     "path": env_for_tests()["PATH"]}


def test_a_bare_program_name_is_looked_up_in_path(workspace):
    proc = init_in(workspace, "run", plan(["true"]))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["program"] == shutil.which("true", path=env_for_tests()["PATH"])


@pytest.mark.parametrize("program, code, message", [
    ("./missing.py", 66, "the client program '{ws}/missing.py' does not exist"),
    ("no-such-program-anywhere", 66, "the client program 'no-such-program-anywhere' is not on PATH"),
    ("./plain.txt", 65, "the client program '{ws}/plain.txt' is not executable"),
    ("./folder", 65, "the client program '{ws}/folder' is not a regular file"),
])
def test_a_program_that_is_missing_or_not_executable_is_refused_and_no_run_is_left(workspace, program, code,
                                                                                     message):
    (workspace / "plain.txt").write_text("not a program")
    (workspace / "folder").mkdir()
    proc = init_in(workspace, "run", plan([program]))
    assert proc.returncode == code, proc.stderr
    assert error_of(proc)["message"].startswith("tau-init: " + message.format(ws=workspace))
    assert not (workspace / "run").exists()


@pytest.mark.parametrize("extra, message", [
    ({"env": {"FOO": "1"}, "inherit_env": ["FOO"]}, "both sets and inherits 'FOO'"),
    ({"env": {"PATH": "/bin"}}, "names 'PATH', which tau sets itself"),
    ({"inherit_env": ["TAU_RUN_ID"]}, "names 'TAU_RUN_ID', which tau sets itself"),
])
def test_a_variable_the_plan_both_sets_and_inherits_or_that_tau_sets_is_refused(workspace, extra, message):
    proc = init_in(workspace, "run", plan(["true"], **extra))
    assert proc.returncode == 65, proc.stderr
    assert message in error_of(proc)["message"]
    assert not (workspace / "run").exists()


# -- one environment per run -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_every_attempt_sees_exactly_the_runs_environment_from_a_shell_and_from_cron(workspace):
    folder = client_dir(workspace)
    doc = plan(["./probe.py", "--fail", "--report", "."], env={"FOO": "x"}, inherit_env=["SECRET_TOKEN"],
               retry={"max_attempts": 5})
    assert init_in(folder, "run", doc).returncode == 0
    run_dir = folder / "run"
    shell = env_for_tests({"SECRET_TOKEN": "hunter2", "NOISE": "from the shell", "FOO": "overridden?"})
    proc = subprocess.run([str(BIN / "tau-submit"), str(run_dir)], capture_output=True, text=True, cwd="/",
                          env=shell)
    assert proc.returncode == 0, proc.stderr
    assert settle(run_dir)["counts"]["failed"] == 2
    cron = {"PATH": "/usr/bin:/bin", "SECRET_TOKEN": "hunter2", "TAU_LOCK_TIMEOUT": "10"}
    proc = subprocess.run([str(BIN / "tau-retry"), str(run_dir)], capture_output=True, text=True, cwd="/", env=cron)
    assert proc.returncode == 0, proc.stderr
    settle(run_dir)
    first, retry = seen(folder, "shard-00000", "attempt-0001"), seen(folder, "shard-00000", "attempt-0002")
    tau_own = {k for k in first["env"] if k.startswith("TAU_")}
    assert tau_own == {"TAU_RUN_DIR", "TAU_RUN_ID", "TAU_SHARD_ID", "TAU_SHARD_INDEX", "TAU_ATTEMPT_ID",
                       "TAU_ATTEMPT_ORDINAL", "TAU_RECORD_START", "TAU_RECORD_END", "TAU_OUTPUT_DIR",
                       "TAU_OUTPUT_FORMAT", "TAU_PROGRESS_FILE"}
    theirs = {k: v for k, v in first["env"].items() if k not in tau_own and k != "LC_CTYPE"}  # python's own
    assert theirs == {"PATH": env_for_tests()["PATH"], "FOO": "x", "SECRET_TOKEN": "hunter2"}
    again = {k: v for k, v in retry["env"].items() if k not in tau_own and k != "LC_CTYPE"}
    assert again == theirs
    assert first["cwd"] == retry["cwd"] == str(folder)
    assert first["argv0"] == retry["argv0"] == str(folder / "probe.py")
    for dirpath, _, names in os.walk(run_dir):  # inherited by name: the secret is in no record
        for name in names:
            assert b"hunter2" not in (Path(dirpath) / name).read_bytes(), os.path.join(dirpath, name)


def test_a_submission_from_an_environment_without_an_inherited_variable_is_refused(workspace):
    folder = client_dir(workspace)
    assert init_in(folder, "run", plan(["./probe.py"], inherit_env=["SECRET_TOKEN", "OTHER"])).returncode == 0
    run_dir = folder / "run"
    proc = tau("tau-submit", str(run_dir), env={"SECRET_TOKEN": "x"})
    assert proc.returncode == 65, proc.stderr
    assert error_of(proc)["message"] == (
        "tau-submit: the plan inherits OTHER from the environment of the process that submits, and this one lacks "
        "it; set it (export NAME=...) and submit again")
    assert not (run_dir / "submissions").exists()
    assert not list(run_dir.glob("shards/*/attempts"))


def test_an_allocation_without_the_working_folder_fails_its_attempt_saying_why(workspace):
    folder = client_dir(workspace)
    assert init_in(folder, "run", plan([str(folder / "probe.py")])).returncode == 0
    run_dir = workspace / "moved"
    shutil.move(str(folder / "run"), str(run_dir))
    shutil.rmtree(folder)  # the folder tau-init ran in is gone
    assert tau("tau-submit", str(run_dir)).returncode == 0
    doc = settle(run_dir)
    assert doc["counts"]["failed"] == 2
    assert "the run's working folder" in doc["shards"][0]["reason"] and "no longer exists" in doc["shards"][0]["reason"]
    assert stat.S_ISREG((run_dir / "shards/shard-00000/attempts/attempt-0001/result.json").stat().st_mode)
