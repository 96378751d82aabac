"""The processes tau starts run tau's own modules, never a folder named `taulib` in the working directory of the
command that started them: a local supervisor, its tasks and a collection's worker processes inherit that working
directory, and `python -m` would put it first on the module path (processes.module_argv runs them with -P)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from helpers import BIN, env_for_tests, init_run, plan, wait_for

from taulib import processes


def planted(folder: Path) -> Path:
    """A folder holding a `taulib` package that leaves a marker file when imported (and then fails); the marker."""
    marker = folder / "imported"
    (folder / "taulib").mkdir(parents=True)
    (folder / "taulib" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nraise SystemExit('a taulib from the working directory ran')\n")
    return marker


def run_in(cwd: Path, command: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / command), *args], cwd=cwd, input=input, capture_output=True, text=True,
                          env=env_for_tests(None), timeout=180)


def test_a_module_of_tau_is_started_with_the_working_directory_off_its_path(tmp_path):
    argv = processes.module_argv("taulib.cli.attempt", "run", "RUN")
    assert argv[1:] == ["-P", "-m", "taulib.cli.attempt", "run", "RUN"]
    marker = planted(tmp_path / "here")
    probe = subprocess.run(processes.module_argv("taulib.errors"), cwd=tmp_path / "here", capture_output=True,
                           text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert not marker.exists()
    hijacked = subprocess.run(argv[:1] + ["-m", "taulib.errors"], cwd=tmp_path / "here", capture_output=True,
                              text=True, timeout=60)  # without -P: what the planted folder would have done
    assert hijacked.returncode == 1 and "a taulib from the working directory ran" in hijacked.stderr
    assert marker.exists()


def test_a_run_submitted_and_collected_in_tasks_from_a_folder_holding_a_taulib_never_runs_it(workspace):
    run_dir = init_run(workspace, plan_doc=plan(records=40, shards=2))
    here = workspace / "here"
    marker = planted(here)
    submitted = run_in(here, "tau-submit", str(run_dir))
    assert submitted.returncode == 0, submitted.stderr

    def settled():
        observed = run_in(here, "tau-observe", str(run_dir))
        doc = json.loads(run_in(here, "tau-reconcile", str(run_dir), input=observed.stdout).stdout)
        return doc["state"] == "succeeded" and doc

    wait_for(settled, timeout=120, what="the run's success")
    collected = run_in(here, "tau-collect", str(run_dir), "--destination", str(workspace / "data"), "--tasks", "2")
    assert collected.returncode == 0, collected.stderr
    assert json.loads(collected.stdout)["complete"] is True
    assert not marker.exists(), "a process tau started imported the working directory's taulib"
