"""Conventions every tau command keeps: --help with an example, --version, usage errors, unknown runs, busy
locks, one JSON error and never a traceback, and a quiet exit when the reader of stdout goes away."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from helpers import (BIN, COMMANDS, complete_run, env_for_tests, error_of, hold_lock, init_run, module_workspace, plan,
                     snapshot, tau)

from taulib import jsonio


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """A complete run (one shard failed once and was retried), collected once to `collected`; tests only read it."""
    ws = module_workspace(tmp_path_factory, "conventions")
    run_dir = complete_run(ws, fail_first=("shard-00001",))
    proc = tau("tau-collect", str(run_dir), "--destination", str(ws / "collected"))
    assert proc.returncode == 0, proc.stderr
    return run_dir


ALLOCATION = {"TAU_LOCAL_JOB_ID": "submission-0001", "TAU_LOCAL_TASK_ID": "0"}


def observations_for(run_id: str) -> str:
    return json.dumps({"kind": "tau.observations", "schema_version": 1, "run_id": run_id,
                       "observed_at": jsonio.now_rfc3339(), "executor": "local",
                       "sources": {"queue": "observed", "accounting": "observed", "reason": None}, "attempts": []})


def invocation(command: str, run_dir: Path) -> tuple[list[str], str | None, dict]:
    """Arguments, stdin and environment that take `command` as far as its locks on the run `run_dir`."""
    workspace = run_dir.parent
    if command == "tau-init":
        return [str(run_dir)], json.dumps(plan()), {}
    if command == "tau-attempt":
        return ["run", str(run_dir), "--submission", "submission-0001"], None, ALLOCATION
    if command == "tau-reconcile":
        return [str(run_dir)], observations_for(run_dir.name), {}
    if command == "tau-collect":
        return [str(run_dir), "--destination", str(workspace / "new-dataset")], None, {}
    return [str(run_dir)], None, {}


# -- help, version, usage -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", COMMANDS)
def test_help_exits_0_and_shows_an_example(command):
    proc = tau(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Example:" in proc.stdout
    example = proc.stdout.split("Example:", 1)[1]
    assert command in example
    assert proc.stderr == ""


def test_the_help_of_tau_attempt_run_shows_an_example():
    proc = tau("tau-attempt", "run", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Example:" in proc.stdout and "tau-attempt run" in proc.stdout.split("Example:", 1)[1]


@pytest.mark.parametrize("command", COMMANDS)
def test_version_prints_the_command_name_and_version(command):
    proc = tau(command, "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{command} 0.1.0\n"
    assert proc.stderr == ""


def test_the_front_command_prints_its_version_and_runs_a_subcommand():
    proc = tau("tau", "--version")
    assert (proc.returncode, proc.stdout) == (0, "tau 0.1.0\n")
    proc = tau("tau", "observe", "--version")
    assert (proc.returncode, proc.stdout) == (0, "tau-observe 0.1.0\n")


def test_the_front_command_refuses_an_unknown_subcommand_with_exit_2():
    proc = tau("tau", "frobnicate")
    assert proc.returncode == 2
    err = error_of(proc)
    assert (err["code"], err["command"], err["error"]) == (2, "tau", "usage")
    assert "'frobnicate' is not a tau command" in err["message"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_option_exits_2_with_one_json_error(command):
    proc = tau(command, "--no-such-option", input="")
    assert proc.returncode == 2
    err = error_of(proc)
    assert err == {"code": 2, "command": command, "error": "usage",
                   "message": f"{command}: No such option '--no-such-option'."}
    assert proc.stdout == ""


# -- unknown run directories --------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_run_directory_exits_66_and_names_it(command, workspace):
    missing = workspace / "missing"
    if command == "tau-init":
        missing = missing / "run"  # tau-init creates the run, but not its parent
    args, stdin, env = invocation(command, missing)
    before = snapshot(workspace)
    proc = tau(command, *args, input=stdin, env=env)
    assert proc.returncode == 66, proc.stderr
    err = error_of(proc)
    assert (err["code"], err["command"], err["error"]) == (66, command, "not_found")
    assert err["message"].startswith(f"{command}: ")
    assert repr(str(missing)) in err["message"] and "does not exist" in err["message"]
    assert proc.stdout == ""
    assert snapshot(workspace) == before


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "tau-init"])
def test_a_folder_without_run_json_is_not_a_run_and_exits_66(command, workspace):
    folder = workspace / "run"
    folder.mkdir(mode=0o700)
    args, stdin, env = invocation(command, folder)
    proc = tau(command, *args, input=stdin, env=env)
    assert proc.returncode == 66, proc.stderr
    err = error_of(proc)
    assert err["message"] == f"{command}: {str(folder)!r} is not a tau run (no run.json); create it with tau-init"
    assert sorted(os.listdir(folder)) == []


# -- busy locks ---------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_held_run_lock_ends_every_command_in_exit_75_after_the_timeout_and_changes_nothing(workspace, done):
    # tau-attempt and tau-collect need a run with a submission and winners; the others a freshly created run.
    # The eight commands wait for the lock at the same time, to keep the test as short as one timeout.
    fresh = init_run(workspace)
    runs = {command: done if command in ("tau-attempt", "tau-collect") else fresh for command in COMMANDS}
    with hold_lock(fresh), hold_lock(done):
        before = {path: snapshot(path) for path in (fresh, done)}
        started = time.monotonic()
        procs = {}
        for command in COMMANDS:
            args, stdin, env = invocation(command, runs[command])
            procs[command] = subprocess.Popen([str(BIN / command), *args], stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                              env=env_for_tests(dict(env, TAU_LOCK_TIMEOUT="1")))
            procs[command].stdin.write(stdin or "")
            procs[command].stdin.close()
        results = {}
        for command, proc in procs.items():
            out, err = proc.stdout.read(), proc.stderr.read()
            results[command] = subprocess.CompletedProcess(proc.args, proc.wait(timeout=60), out, err)
            results[command].elapsed = time.monotonic() - started
        after = {path: snapshot(path) for path in (fresh, done)}
    for command, proc in results.items():
        assert proc.returncode == 75, (command, proc.stderr)
        err = error_of(proc)
        assert (err["code"], err["command"], err["error"]) == (75, command, "busy")
        assert err["message"] == (f"{command}: {str(runs[command])!r} is busy: another tau process holds "
                                  "locks/run.lock (waited 1s); try again")
        assert proc.elapsed >= 0.9, command
        assert proc.stdout == "", command
    assert after == before
    assert not (done.parent / "new-dataset").exists()


# -- tau-attempt outside an allocation ----------------------------------------------------------------------------

def test_tau_attempt_run_outside_an_allocation_exits_77_and_writes_nothing(done):
    env = env_for_tests()
    for name in [k for k in env if k.startswith(("TAU_LOCAL_", "SLURM_"))]:
        del env[name]
    before = snapshot(done)
    proc = subprocess.run([str(BIN / "tau-attempt"), "run", str(done), "--submission", "submission-0001"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 77
    err = error_of(proc)
    assert (err["code"], err["error"]) == (77, "refused")
    assert err["message"] == ("tau-attempt: not inside an allocation: neither the local executor's nor Slurm's job "
                              "variables are set; tau-attempt run is started by the executor, not by hand")
    assert proc.stdout == ""
    assert snapshot(done) == before


# -- closed pipes -------------------------------------------------------------------------------------------------

def successful_invocation(command: str, run_dir: Path) -> tuple[list[str], str | None]:
    """A call that succeeds on the complete run `done`, writes nothing, and prints a JSON document."""
    if command == "tau-init":
        return [str(run_dir)], json.dumps(plan(fail_first=("shard-00001",)))
    if command == "tau-reconcile":
        return [str(run_dir)], observations_for(run_dir.name)
    if command == "tau-collect":
        return [str(run_dir), "--destination", str(run_dir.parent / "collected")], None
    return [str(run_dir)], None


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "tau-attempt"])
def test_a_closed_stdout_pipe_ends_the_command_quietly(command, done):
    args, stdin = successful_invocation(command, done)
    proc = tau(command, *args, input=stdin)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("{")
    before = snapshot(done)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes a byte
    try:
        closed = subprocess.run([str(BIN / command), *args], input=stdin, stdout=write_end, stderr=subprocess.PIPE,
                                text=True, env=env_for_tests(), timeout=60)
    finally:
        os.close(write_end)
    assert closed.stderr == ""
    assert closed.returncode == 141  # like a C tool killed by SIGPIPE: not 1, which means "a check said no"
    assert snapshot(done) == before


def test_help_into_a_closed_pipe_prints_no_error():
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([str(BIN / "tau-attempt"), "--help"], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, env=env_for_tests(), timeout=60)
    finally:
        os.close(write_end)
    assert proc.stderr == ""
    assert proc.returncode != 0


def test_tau_observe_piped_into_head_exits_quietly(done):
    script = f'set -o pipefail; "{BIN}/tau-observe" "{done}" | head -c 1'
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env_for_tests(), timeout=60)
    assert proc.stdout == "{"
    assert proc.stderr == ""
    assert proc.returncode in (0, 141)


# -- no tracebacks ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", COMMANDS)
def test_garbage_arguments_never_show_a_traceback(command, workspace):
    for args, stdin in ((["run", "--submission"], "\x00\xff"), (["--output", "yaml", str(workspace)], "[1, 2")):
        proc = tau(command, *args, input=stdin)
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr
        err = error_of(proc)
        assert err["command"] == command and err["message"].startswith(command + ": ")


# -- shard names --------------------------------------------------------------------------------------------------

def test_every_option_or_argument_that_takes_a_shard_id_accepts_a_shard_number():
    import importlib

    import click

    from taulib.cli import common, registry

    def params(cmd: click.Command):
        yield from cmd.params
        for sub in getattr(cmd, "commands", {}).values():
            yield from params(sub)

    taking: dict[str, list[str]] = {}
    for entry in registry.COMMANDS:
        cmd = importlib.import_module(entry.module).cli
        for param in params(cmd):
            if param.metavar == "SHARD_ID" or param.name in ("shard", "shards"):
                taking.setdefault(entry.program, []).append(param.name or "")
                assert param.type is common.SHARD, f"{entry.program} {param.name}: type=common.SHARD"
    assert {"tau-logs", "tau-winner", "tau-bundle-fetch", "tau-cancel", "tau-retry", "tau-submit"} <= set(taking)


@pytest.mark.parametrize("command, args", [("tau-winner", ["--shard"]), ("tau-retry", ["--shard"]),
                                           ("tau-cancel", ["--shard"]), ("tau-submit", ["--shard"])])
def test_a_shard_of_5000_digits_is_not_found_never_an_internal_error(tmp_path, command, args):
    run_dir = init_run(tmp_path)
    proc = tau(command, str(run_dir), *args, f"shard-{'9' * 5000}")
    assert proc.returncode == 66, proc.stderr
    assert error_of(proc)["message"].startswith(f"{command}: run 'run' has no shard 'shard-999")
