"""tau-collect --tasks N under the local executor: N worker processes, the same bytes as one task, a killed worker
rerun alone by the next call (tau-collect(1) "Tasks")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import BIN, complete_run, copy_run, error_of, module_workspace, snapshot, tau


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """A complete run of 80 records in 4 shards. Copy it to collect."""
    return complete_run(module_workspace(tmp_path_factory, "collect-tasks"))


def collect(run_dir: Path, destination: Path, *options: str):
    return tau("tau-collect", str(run_dir), "--destination", str(destination), *options)


def tree_bytes(folder: Path) -> dict[str, bytes]:
    """Every data file of a dataset and its bytes (`_tau_collection.json` holds times and ids: compared apart)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != "_tau_collection.json"}


def result_files(folder: Path) -> list[dict]:
    return json.loads((folder / "_tau_collection.json").read_text())["files"]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_any_number_of_tasks_gives_the_bytes_of_one_task(done, tmp_path, fmt):
    run_dir = copy_run(done, tmp_path / "ws")
    datasets = {}
    for count in (1, 2, 3, 7, 100):  # 7 partitions of 12 rows: 100 tasks are 7, one per partition
        dest = run_dir.parent / f"data-{count}"
        proc = collect(run_dir, dest, "--format", fmt, "--rows-per-partition", "12", "--tasks", str(count))
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)
        assert (result["state"], result["records"], result["partitions"]) == ("succeeded", 80, 7), result
        plan = json.loads((run_dir / "collections" / result["collection_id"] / "plan.json").read_text())
        assert plan["tasks"] == min(count, 7), plan
        datasets[count] = (tree_bytes(dest), result_files(dest))
        folder = run_dir / "collections" / result["collection_id"]
        tasks = sorted(n for n in os.listdir(folder) if n.startswith("task-"))
        assert tasks == ([] if count == 1 else [f"task-{k:05d}.json" for k in range(min(count, 7))]), tasks
        assert not [n for n in os.listdir(run_dir.parent) if ".tau-stage-" in n]
    for count, got in datasets.items():
        assert got == datasets[1], f"--tasks {count} differs from --tasks 1"
    assert len(datasets[1][0]) == 7


def test_a_plan_default_of_tasks_is_used_and_tasks_on_the_command_line_override_it(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    run_dir = complete_run(ws, output={"tasks": 3, "rows_per_partition": 20})
    proc = collect(run_dir, ws / "a")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((run_dir / "collections/collection-0001/plan.json").read_text())["tasks"] == 3
    proc = collect(run_dir, ws / "b", "--tasks", "2")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((run_dir / "collections/collection-0002/plan.json").read_text())["tasks"] == 2
    assert tree_bytes(ws / "a") == tree_bytes(ws / "b")


@pytest.mark.parametrize("value", ["0", "1001", "-1", "two"])
def test_a_task_count_tau_cannot_run_exits_2_before_anything_is_written(done, tmp_path, value):
    run_dir = copy_run(done, tmp_path / "ws")
    before = snapshot(run_dir)
    proc = collect(run_dir, run_dir.parent / "data", "--tasks", value)
    assert proc.returncode == 2, proc.stderr
    assert "--tasks" in error_of(proc)["message"], proc.stderr
    assert snapshot(run_dir) == before
    assert sorted(os.listdir(run_dir.parent)) == ["run"]


def workers_of(pid: int) -> list[int]:
    """The worker processes (python -m taulib.collect.array) whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"taulib.collect.array" in cmdline:
            found.append(int(entry))
    return found


@pytest.mark.parametrize("round_", range(3))
def test_a_killed_worker_is_rerun_alone_by_the_next_call_and_the_bytes_are_those_of_one_task(done, tmp_path, round_):
    run_dir = copy_run(done, tmp_path / "ws")
    one = run_dir.parent / "one"
    assert collect(run_dir, one, "--rows-per-partition", "12").returncode == 0
    dest = run_dir.parent / "data"
    env = dict(os.environ, TAU_FAILPOINTS="tau-collect-task-2:collect.task_written=delay:30")
    proc = subprocess.Popen([str(BIN / "tau-collect"), str(run_dir), "--destination", str(dest),
                             "--rows-per-partition", "12", "--tasks", "4"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    folder = run_dir / "collections" / "collection-0002"
    deadline = time.monotonic() + 60
    while not all((folder / f"task-{k:05d}.json").exists() for k in (0, 1, 3)):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    victims = workers_of(proc.pid)
    assert len(victims) == 1, victims  # task 2's worker, held by its failpoint after writing
    os.kill(victims[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err
    assert json.loads(err.strip().splitlines()[-1])["message"] == (
        "tau-collect: task 2's worker process was killed by signal SIGKILL; the tasks that are done are kept: run "
        "tau-collect again to rerun the others"), err
    assert not dest.exists()
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "running", status
    kept = {k: (folder / f"task-{k:05d}.json").read_bytes() for k in (0, 1, 3)}
    again = collect(run_dir, dest, "--rows-per-partition", "12", "--tasks", "4")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["collection_id"] == "collection-0002"
    assert {k: (folder / f"task-{k:05d}.json").read_bytes() for k in (0, 1, 3)} == kept  # not rerun
    assert (folder / "task-00002.json").exists()
    assert tree_bytes(dest) == tree_bytes(one)
    assert result_files(dest) == result_files(one)
    assert not [n for n in os.listdir(run_dir.parent) if ".tau-stage-" in n]


def test_a_workers_error_retires_the_collection_leaving_nothing_and_the_next_call_starts_anew(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    proc = tau("tau-collect", str(run_dir), "--destination", str(dest), "--rows-per-partition", "12", "--tasks", "3",
               env={"TAU_FAILPOINTS": "tau-collect-task-1:collect.task_written=error"})
    assert proc.returncode == 74, proc.stderr
    assert error_of(proc)["message"].startswith(
        "tau-collect: task 1: failpoint 'collect.task_written' injected an error"), proc.stderr
    status = json.loads((run_dir / "collections/collection-0001/status.json").read_text())
    assert status["state"] == "failed" and "collect.task_written" in status["reason"], status
    assert not dest.exists() and not [n for n in os.listdir(run_dir.parent) if ".tau-stage-" in n]
    again = collect(run_dir, dest, "--rows-per-partition", "12", "--tasks", "3")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["collection_id"] == "collection-0002"
