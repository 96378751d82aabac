"""tau-drive: one command that keeps a run moving until it is finished, in the foreground or a cycle at a time
from cron, telling a person once per change; concurrent drivers converge and submit nothing twice."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers import CLIENT, PYTHON, complete_run, env_for_tests, error_of, init_run, tau

pytestmark = pytest.mark.slow


def failing(*fail_first: str, always: tuple[str, ...] = (), **extra) -> dict:
    command = [PYTHON, CLIENT, "--rows-per-file", "10"]
    for sid in fail_first:
        command += ["--fail-first", sid]
    doc = {"records": 40, "shards": 4, "command": command,
           "scheduler": {"profile": "local", "local": {"max_parallel": 4}},
           "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}
    if always:  # these shards fail every attempt: a client that exits 3 for them, and runs the demo for the rest
        script = ("import os,sys; s=os.environ['TAU_SHARD_ID']; "
                  f"sys.exit(3) if s in {list(always)!r} else os.execv(sys.executable, [sys.executable, "
                  f"{CLIENT!r}, '--rows-per-file', '10'])")
        doc["command"] = [PYTHON, "-c", script]
    doc.update(extra)
    return doc


def notifier(folder: Path) -> str:
    """A --notify command that keeps every document it is given, named by its event, its shard and a count."""
    folder.mkdir(mode=0o700)
    return (f'n=$(ls {folder} | wc -l); cat > "{folder}/$TAU_DRIVE_EVENT-${{TAU_DRIVE_SHARD:-run}}-$n.json"')


def told(folder: Path) -> list[tuple[str, dict]]:
    return sorted((p.name.rsplit("-", 1)[0], json.loads(p.read_text())) for p in folder.iterdir())


def test_in_the_foreground_it_brings_a_run_with_failing_shards_to_success_and_collects_it(workspace):
    run_dir = init_run(workspace, plan_doc=failing("shard-00001", "shard-00002"))
    notes = workspace / "notes"
    proc = tau("tau-drive", str(run_dir), "--interval", "0.5", "--notify", notifier(notes),
               "--collect", str(workspace / "out"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["kind"], result["state"], result["finished"]) == ("tau.drive-result", "succeeded", "succeeded")
    assert result["status"]["counts"]["succeeded"] == 4 and result["cycles"] >= 2
    assert [(n["event"], n["exit_code"]) for n in result["notified"]] == [("done", 0)]
    assert result["collection"]["records"] == 40 and (workspace / "out").is_dir()
    assert result["collection"]["created"] is True  # this call made it (inline, under the local executor)
    [(name, doc)] = told(notes)
    assert name == "done-run" and doc["kind"] == "tau.status" and doc["state"] == "succeeded"
    assert sorted(p.name for p in (run_dir / "shards/shard-00001/attempts").iterdir()) == [
        "attempt-0001", "attempt-0002"]
    again = tau("tau-drive", str(run_dir), "--once", "--notify", notifier(workspace / "more"),
                "--collect", str(workspace / "out"))
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["notified"] == [] and second["actions"]["submitted"] == []
    assert second["collection"]["created"] is False  # the destination holds this collection: reported, not redone
    assert told(workspace / "more") == []


def test_from_cron_one_cycle_at_a_time_it_brings_a_run_to_its_budget_and_tells_each_change_once(workspace):
    run_dir = init_run(workspace, plan_doc=failing(always=("shard-00003",), retry={"max_attempts": 2}))
    notes = workspace / "notes"
    command = notifier(notes)
    for _ in range(60):
        proc = tau("tau-drive", str(run_dir), "--once", "--notify", command)
        assert proc.returncode == 0, proc.stderr  # --once exits 0 whatever the run's state
        result = json.loads(proc.stdout)
        if result["finished"]:
            break
    assert result["finished"].startswith("shard-00003 exhausted: ")
    assert result["state"] == "failed" and result["status"]["counts"] == dict(
        result["status"]["counts"], succeeded=3, exhausted=1)
    assert [name for name, _ in told(notes)] == ["exhausted-shard-00003", "stopped-run"]
    assert sorted(p.name for p in (run_dir / "shards/shard-00003/attempts").iterdir()) == [
        "attempt-0001", "attempt-0002"]
    def made() -> tuple[list[str], list[str]]:  # the attempts and submissions there are (their records may still
        # converge: the scheduler's last word on the failed attempt reaches its observation a cycle later)
        return (sorted(str(p.relative_to(run_dir)) for p in run_dir.glob("shards/*/attempts/*")),
                sorted(p.name for p in (run_dir / "submissions").glob("submission-*")))

    before = made()
    for _ in range(2):  # finished: more cycles tell nothing and submit nothing
        proc = tau("tau-drive", str(run_dir), "--once", "--notify", f"cat > {notes}/late-$$.json")
        assert proc.returncode == 0 and json.loads(proc.stdout)["notified"] == []
        assert json.loads(proc.stdout)["actions"]["submitted"] == []
    assert [name for name, _ in told(notes)] == ["exhausted-shard-00003", "stopped-run"]
    assert made() == before
    foreground = tau("tau-drive", str(run_dir), "--interval", "0.2")
    assert foreground.returncode == 1
    assert error_of(foreground)["message"].startswith("tau-drive: run 'run' finished without succeeding: "
                                                      "shard-00003 exhausted: ")
    assert json.loads(foreground.stdout)["state"] == "failed"  # the result first, then the error


def test_sixty_four_concurrent_drivers_and_epilog_passes_converge_and_submit_nothing_twice(workspace):
    run_dir = init_run(workspace, plan_doc=failing("shard-00000", "shard-00002", records=80, shards=8,
                                                   scheduler={"profile": "local", "local": {"max_parallel": 8}}))
    env = env_for_tests()
    for _wave in range(3):
        procs = [subprocess.Popen([str(Path(PYTHON).parent / "tau-drive"), str(run_dir), "--once"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(56)]
        procs += [subprocess.Popen(["sh", "-c", '"$0/tau-observe" "$1" | "$0/tau-reconcile" "$1" >/dev/null',
                                    str(Path(PYTHON).parent), str(run_dir)], env=env, stderr=subprocess.PIPE)
                  for _ in range(8)]
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err.decode()
    final = tau("tau-drive", str(run_dir), "--interval", "0.3")
    assert final.returncode == 0, final.stderr
    assert json.loads(final.stdout)["state"] == "succeeded"
    plans = [json.loads(p.read_text()) for p in sorted(run_dir.glob("submissions/submission-*/plan.json"))]
    given = [(t["shard_id"], t["attempt_id"]) for plan in plans for t in _tasks(plan)]
    assert len(given) == len(set(given)) == 10  # 8 first attempts, 2 retries: nothing twice
    for sid in ("shard-00000", "shard-00002"):
        assert sorted(p.name for p in (run_dir / "shards" / sid / "attempts").iterdir()) == [
            "attempt-0001", "attempt-0002"]
    cycles = json.loads((run_dir / "drive/state.json").read_text())["cycles"]
    assert cycles < 3 * 56  # callers a cycle already served ran none of their own


def _tasks(plan: dict) -> list[dict]:
    from taulib.rundir.journal import tasks

    return tasks(plan)


def test_a_run_stopped_by_its_budget_is_collected_partially_with_allow_missing_and_the_gap_recorded(workspace):
    run_dir = init_run(workspace, plan_doc=failing(always=("shard-00003",), retry={"max_attempts": 1}))
    proc = tau("tau-drive", str(run_dir), "--interval", "0.3", "--collect", str(workspace / "part"),
               "--allow-missing")
    assert proc.returncode == 1
    assert error_of(proc)["message"].startswith("tau-drive: run 'run' finished without succeeding: shard-00003 ")
    result = json.loads(proc.stdout)
    collection = result["collection"]
    assert collection["complete"] is False and collection["records"] == 30
    assert [(m["shard_id"], m["state"]) for m in collection["missing"]] == [("shard-00003", "exhausted")]
    manifest = json.loads((workspace / "part" / "_tau_collection.json").read_text())
    assert manifest["complete"] is False and manifest["missing"][0]["shard_id"] == "shard-00003"
    strict = tau("tau-drive", str(run_dir), "--once", "--collect", str(workspace / "whole"))
    assert strict.returncode == 0 and json.loads(strict.stdout)["collection"] is None  # not succeeded: not collected
    alone = tau("tau-drive", str(run_dir), "--once", "--allow-missing")
    assert alone.returncode == 2
    assert error_of(alone)["message"] == ("tau-drive: --allow-missing says how --collect collects: give --collect "
                                          "DESTINATION too")


# tau-drive in a process whose executor collects as Slurm does, in a job of its own (`CollectionJobs`): the job is
# `python THIS worker RUN COLLECTION JOB`, which runs what tau-collect --worker runs in a Slurm CPU job.
AS_A_JOB = """
import os, subprocess, sys

from taulib.executors import CollectionJobs, TaskEnd
from taulib.executors.local.executor import Local

WORKERS = {}


class Jobs(CollectionJobs):
    def request(self, plan):
        return {"mem": None, "time": None}

    def submit(self, run, plan, job_name, task_indices, rerun=0, request=None):
        job = str(4000 + rerun)
        WORKERS[job] = subprocess.Popen([sys.executable, __file__, "worker", run.path, plan["collection_id"], job])
        return job

    def find(self, job_name, created):
        return {}

    def queued(self, job_id):
        return job_id in WORKERS and WORKERS[job_id].poll() is None

    def accounted(self, run, collection_id, job_id, request):
        worker = WORKERS.get(job_id)
        if worker is None or worker.poll() is None:
            return None
        return {0: TaskEnd("completed", "COMPLETED") if worker.returncode == 0 else TaskEnd("failed", "FAILED")}

    def identity(self, environ):
        return environ.get("FAKE_JOB_ID")

    def task(self, environ):
        return None

    def cpus(self, environ):
        return None


Local.collection_jobs = lambda self: Jobs()
if sys.argv[1] == "worker":
    from taulib.collect import collection

    os.umask(0o077)
    collection.work(sys.argv[2], sys.argv[3], {"FAKE_JOB_ID": sys.argv[4]})
else:
    from taulib.cli import common, drive

    sys.exit(common.run_command("tau-drive", drive.cli, sys.argv[2:]))
"""


def test_the_collection_a_drive_makes_in_a_job_of_its_own_is_reported_created_and_the_next_drive_finds_it(
        workspace, tmp_path):
    run_dir = complete_run(workspace)
    script = tmp_path / "as_a_job.py"
    script.write_text(AS_A_JOB)
    drives = [subprocess.run([PYTHON, str(script), "drive", str(run_dir), "--once", "--collect",
                              str(workspace / "out")], capture_output=True, text=True, env=env_for_tests(),
                             timeout=120) for _ in range(2)]
    assert [proc.returncode for proc in drives] == [0, 0], [proc.stderr for proc in drives]
    first, again = (json.loads(proc.stdout)["collection"] for proc in drives)
    assert (first["collection_id"], first["state"], first["job_id"], first["records"]) == (
        "collection-0001", "succeeded", "4000", 80)
    assert first["created"] is True  # this drive made it: its job published the dataset while the drive waited
    assert (again["collection_id"], again["created"]) == ("collection-0001", False)  # found, not made again
