"""tau-collect --tasks N on the real Slurm test cluster: an array of N CPU tasks into one stage, published once, the
bytes of one task and of the local executor; a task killed by its PID, or scancelled alone, rerun for its own
partitions only, asking for the same request (tau-collect(1) "Tasks")."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from helpers import complete_run, tau
from slurm import data_bytes, finished_run, record, run_cmd, wait_until

pytestmark = pytest.mark.slurm


def test_four_tasks_give_the_bytes_of_one_task_and_of_the_local_executor_in_every_format(cluster, workspace,
                                                                                        tmp_path, extra_jobs):
    run_dir = finished_run(workspace, records=80, shards=4)
    local_ws = tmp_path / "local"
    local_ws.mkdir(mode=0o700)
    local = complete_run(local_ws, records=80, shards=4, output={"format": "parquet", "rows_per_partition": 25})
    for fmt in ("parquet", "csv", "jsonl"):
        got = {}
        for count in (4, 1):
            dest = workspace / f"data-{fmt}-{count}"
            proc = tau("tau-collect", str(run_dir), "--destination", str(dest), "--format", fmt,
                       "--rows-per-partition", "10", "--tasks", str(count), "--wait")
            assert proc.returncode == 0, proc.stderr
            result = json.loads(proc.stdout)
            assert (result["state"], result["records"], result["partitions"]) == ("succeeded", 80, 8), result
            folder = run_dir / "collections" / result["collection_id"]
            assert json.loads((folder / "plan.json").read_text())["tasks"] == count
            script = (folder / "job.sh").read_text()
            assert f"#SBATCH --array={'0-3' if count == 4 else '0'}\n" in script, script
            assert "#SBATCH --gres=none\n" in script
            tasks = sorted(n for n in os.listdir(folder) if n.startswith("task-"))
            assert tasks == [f"task-{k:05d}.json" for k in range(count)], tasks
            got[count] = data_bytes(dest)
        here = local_ws / f"data-{fmt}"
        proc = tau("tau-collect", str(local), "--destination", str(here), "--format", fmt,
                   "--rows-per-partition", "10", "--tasks", "3")
        assert proc.returncode == 0, proc.stderr
        assert got[4] == got[1] == data_bytes(here), fmt
        assert len(got[4]) == 8


def task_worker(job: str, task: int) -> int | None:
    """The PID of array task `task` of job `job`'s tau-collect worker, found by its environment."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"taulib.cli.collect" in argv and f"SLURM_ARRAY_JOB_ID={job}".encode() in environ \
                and f"SLURM_ARRAY_TASK_ID={task}".encode() in environ:
            return int(entry)
    return None


@pytest.mark.parametrize("how", ["sigkill", "scancel"])
def test_a_task_killed_midway_is_rerun_for_its_own_partitions_only_and_the_bytes_still_match(
        cluster, workspace, extra_jobs, how):
    run_dir = finished_run(workspace, records=80, shards=4)
    one = workspace / "one"
    proc = tau("tau-collect", str(run_dir), "--destination", str(one), "--rows-per-partition", "10", "--wait")
    assert proc.returncode == 0, proc.stderr
    dest = workspace / "data"
    # task 2 writes its files, then waits before recording them (sbatch exports tau-collect's environment)
    proc = tau("tau-collect", str(run_dir), "--destination", str(dest), "--rows-per-partition", "10",
               "--tasks", "4", env={"TAU_FAILPOINTS": "tau-collect-task-2:collect.task_written=delay:300"})
    assert proc.returncode == 0, proc.stderr
    first = json.loads(proc.stdout)
    assert first["state"] == "submitted", first
    job = first["job_id"]
    folder = run_dir / "collections" / "collection-0002"
    wait_until(lambda: all((folder / f"task-{k:05d}.json").exists() for k in (0, 1, 3)), 90,
               "tasks 0, 1 and 3 recorded", pause=0.3)
    pid = wait_until(lambda: task_worker(job, 2), 30, "task 2's worker", pause=0.3)
    stage = [n for n in os.listdir(workspace) if ".tau-stage-" in n]
    assert len(stage) == 1 and not dest.exists(), os.listdir(workspace)  # nothing visible before publication
    if how == "sigkill":
        os.kill(pid, signal.SIGKILL)
    else:
        run_cmd("scancel", f"{job}_2")
    kept = {k: (folder / f"task-{k:05d}.json").read_bytes() for k in (0, 1, 3)}
    proc = tau("tau-collect", str(run_dir), "--destination", str(dest), "--rows-per-partition", "10", "--wait")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["collection_id"], result["state"], result["records"]) == ("collection-0002", "succeeded", 80)
    status = record(run_dir, "collections/collection-0002/status.json")
    assert status["rerun"] == 1 and status["job_id"] != job, status
    assert "resources" not in status  # killed or cancelled, not out of memory: the same request again
    same = {"mem": None, "time": "10:00"}
    ended = ("failed", "FAILED") if how == "sigkill" else ("cancelled", f"CANCELLED by {os.getuid()}")
    assert status["ended"] == [{"job_id": job, "resources": same, "tasks": [
        {"task": 2, "state": ended[0], "accounting": ended[1], "resources": same}]}], status
    rerun = (folder / "job-r1.sh").read_text()
    assert "#SBATCH --array=2\n" in rerun, rerun  # task 2 alone
    assert {k: (folder / f"task-{k:05d}.json").read_bytes() for k in (0, 1, 3)} == kept
    assert record(run_dir, "collections/collection-0002/task-00002.json")["job_id"] == status["job_id"]
    assert data_bytes(dest) == data_bytes(one)
    assert not [n for n in os.listdir(workspace) if ".tau-stage-" in n]
