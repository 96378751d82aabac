"""taulib.collect.job with an executor that collects in jobs of its own (a fake `CollectionJobs`, in this process),
and the Slurm executor's word on how each task of a collection job ended: a task out of memory or time is rerun
asking for more, as retry.escalate allows, with its grown request journaled; at the cap (or with nothing that grows)
the collection fails with OUT_OF_MEMORY or TIMEOUT, its stage removed, the caller told; any other end keeps the same
request (tau-collect(1) "Tasks"). tests/integration/test_slurm_collect_memory.py runs this on the real cluster."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import complete_run, copy_run, module_workspace
from taulib.collect import collection, job
from taulib.errors import CheckFailed
from taulib.executors import CollectionJobs, TaskEnd
from taulib.executors.local.executor import Local
from taulib.executors.slurm.executor import ENGINE
from taulib.rundir.run import Run

GROW = {"mem": 4, "max_mem": "1G", "time": 2, "max_time": "1:00:00"}
PLAN_ASKS = {"mem": "64M", "time": "15:00"}
OOM = TaskEnd("out_of_memory", "FAILED", "slurmstepd: error: StepId=7_0.batch exceeded memory limit (..), being killed")


class Jobs(CollectionJobs):
    """Jobs that never run: each is out of the queue at once, ended as the test says (`ends`, by job id)."""

    engine = ENGINE

    def __init__(self) -> None:
        self.submitted: list[tuple[str, list[int], dict | None]] = []
        self.asked_of_accounting: list[dict] = []
        self.ends: dict[str, dict[int, TaskEnd] | None] = {}

    def request(self, plan):
        return dict(PLAN_ASKS)

    def submit(self, run, plan, job_name, task_indices, rerun=0, request=None):
        self.submitted.append((job_name, list(task_indices), request))
        return str(4000 + len(self.submitted))

    def find(self, job_name, created):
        return {}

    def queued(self, job_id):
        return False

    def accounted(self, run, collection_id, job_id, request):
        self.asked_of_accounting.append(dict(request))
        return self.ends.get(job_id)

    def identity(self, environ):
        return None

    def task(self, environ):
        return None

    def cpus(self, environ):
        return None


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """A complete local run of 40 records in 2 shards whose retries grow memory x4 up to 1G and time x2 up to 1 h."""
    return complete_run(module_workspace(tmp_path_factory, "collect-job"), records=40, shards=2,
                        scheduler={"profile": "local", "local": {"max_parallel": 2, "mem": "1G",
                                                                 "time_limit": "30:00"}},
                        retry={"escalate": GROW}, output={"format": "parquet", "rows_per_partition": 10})


@pytest.fixture
def jobs(monkeypatch) -> Jobs:
    fake = Jobs()
    monkeypatch.setattr(Local, "collection_jobs", lambda self: fake)
    return fake


def collect(run_dir: Path, dest: Path, tasks: int = 2) -> dict:
    with Run(str(run_dir)) as run:
        return collection.collect(run, str(dest), task_count=tasks)


def status_of(run_dir: Path, collection_id: str = "collection-0001") -> dict:
    return json.loads((run_dir / "collections" / collection_id / "status.json").read_text())


def stages(run_dir: Path) -> list[str]:
    return [n for n in os.listdir(run_dir.parent) if ".tau-stage-" in n]


def test_a_task_out_of_memory_is_rerun_asking_for_more_until_the_cap_then_the_collection_fails_out_of_memory(
        done, tmp_path, jobs):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    first = collect(run_dir, dest)
    assert (first["state"], first["job_id"]) == ("submitted", "4001")
    assert jobs.submitted[-1][1:] == ([0, 1], None)  # the plan's request
    # task 0 killed for memory, task 1 cancelled: both rerun, in one array asking for the grown memory
    jobs.ends["4001"] = {0: OOM, 1: TaskEnd("cancelled", "CANCELLED by 0")}
    rerun = collect(run_dir, dest)
    assert (rerun["collection_id"], rerun["state"], rerun["job_id"]) == ("collection-0001", "submitted", "4002")
    assert jobs.submitted[-1] == (jobs.submitted[0][0] + "r1", [0, 1], {"mem": "256M", "time": "15:00"})
    status = status_of(run_dir)
    assert (status["rerun"], status["resources"], status["job_id"]) == (1, {"mem": "256M", "time": "15:00"}, "4002")
    assert status["ended"] == [{"job_id": "4001", "resources": PLAN_ASKS, "tasks": [
        {"task": 0, "state": "out_of_memory", "accounting": "FAILED", "resources": {"mem": "256M", "time": "15:00"}},
        {"task": 1, "state": "cancelled", "accounting": "CANCELLED by 0", "resources": PLAN_ASKS}]}]
    assert len(stages(run_dir)) == 1 and not dest.exists()
    # out of memory again at 256M: 1G, the cap
    jobs.ends["4002"] = {0: OOM, 1: OOM}
    assert collect(run_dir, dest)["job_id"] == "4003"
    assert jobs.asked_of_accounting[-1] == {"mem": "256M", "time": "15:00"}  # read against what it asked
    assert jobs.submitted[-1][2] == {"mem": "1G", "time": "15:00"}
    # out of memory at the cap: a rerun would ask the same, so the collection fails, and the caller is told
    jobs.ends["4003"] = {0: TaskEnd("preempted", "PREEMPTED"), 1: OOM}
    with pytest.raises(CheckFailed) as failed:
        collect(run_dir, dest)
    reason = ("its Slurm job 4003 ended without publishing the dataset: task 1 of 2 ran out of memory "
              "(OUT_OF_MEMORY) asking for 1G, the cap (retry.escalate.max_mem): a rerun would ask the same and be "
              "killed the same; collect from a new run (tau-init --from) whose plan asks for more")
    assert failed.value.message == f"collection collection-0001 failed: {reason}"
    assert failed.value.details == {"collection_id": "collection-0001", "cause": "OUT_OF_MEMORY"}
    status = status_of(run_dir)
    assert (status["state"], status["reason"], status["cause"], status["rerun"]) == ("failed", reason,
                                                                                     "OUT_OF_MEMORY", 2)
    assert [e["job_id"] for e in status["ended"]] == ["4001", "4002", "4003"]
    assert len(jobs.submitted) == 3  # never the same 1G again
    assert not stages(run_dir) and not dest.exists()
    # the next tau-collect makes a new collection, asking for the plan's request
    again = collect(run_dir, dest)
    assert (again["collection_id"], again["state"], again["job_id"]) == ("collection-0002", "submitted", "4004")
    assert jobs.submitted[-1][2] is None and "resources" not in status_of(run_dir, "collection-0002")


def test_a_task_out_of_time_is_rerun_with_its_time_grown_and_fails_with_timeout_at_the_cap(done, tmp_path, jobs):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    collect(run_dir, dest, tasks=1)
    jobs.ends["4001"] = {0: TaskEnd("timed_out", "TIMEOUT")}
    collect(run_dir, dest, tasks=1)
    assert jobs.submitted[-1][1:] == ([0], {"mem": "64M", "time": "00:30:00"})
    jobs.ends["4002"] = {0: TaskEnd("timed_out", "TIMEOUT")}
    collect(run_dir, dest, tasks=1)
    assert jobs.submitted[-1][2] == {"mem": "64M", "time": "01:00:00"}
    jobs.ends["4003"] = {0: TaskEnd("timed_out", "TIMEOUT")}
    with pytest.raises(CheckFailed, match=r"task 0 of 1 ran out of time \(TIMEOUT\) asking for 01:00:00, the cap "
                                          r"\(retry.escalate.max_time\)"):
        collect(run_dir, dest, tasks=1)
    assert status_of(run_dir)["cause"] == "TIMEOUT"
    assert not stages(run_dir)


def test_killed_cancelled_and_preempted_tasks_keep_the_same_request_and_after_three_reruns_a_new_collection_starts(
        done, tmp_path, jobs):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    collect(run_dir, dest)
    for number, ends in enumerate(({0: TaskEnd("cancelled", "CANCELLED by 0"), 1: TaskEnd("preempted", "PREEMPTED")},
                                   {0: TaskEnd("node_failed", "NODE_FAIL"), 1: TaskEnd("failed", "FAILED")},
                                   {0: TaskEnd("cancelled", "CANCELLED")}, {1: TaskEnd("failed", "FAILED")}), 1):
        jobs.ends[str(4000 + number)] = {**{0: TaskEnd("failed", "FAILED"), 1: TaskEnd("failed", "FAILED")}, **ends}
        result = collect(run_dir, dest)
    assert [request for _, _, request in jobs.submitted[:4]] == [None] * 4  # the plan's, every time
    assert "resources" not in status_of(run_dir)
    # the fourth job ended unfinished: this call fails it (as today) and plans the next collection at once
    assert (result["collection_id"], result["state"]) == ("collection-0002", "submitted")
    status = status_of(run_dir)
    assert status["state"] == "failed" and "cause" not in status
    assert status["reason"] == ("its Slurm job 4004 ended without publishing the dataset: tasks 0, 1 of 2 never "
                                "finished, in 4 jobs (the last ended failed 2)")


def test_accounting_lag_is_waited_for_task_by_task_before_anything_is_decided(done, tmp_path, jobs):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    collect(run_dir, dest)
    jobs.ends["4001"] = {1: OOM}  # task 0 not in accounting yet: it may have run out of memory too
    again = collect(run_dir, dest)
    assert (again["state"], again["job_id"], len(jobs.submitted)) == ("submitted", "4001", 1)
    jobs.ends["4001"] = None
    assert collect(run_dir, dest)["job_id"] == "4001"
    assert status_of(run_dir)["state"] == "submitted"


def test_wait_reports_a_failed_collection_with_its_reason_and_cause(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    with Run(str(run_dir)) as run:
        from taulib.rundir.journal import COLLECTIONS, Journal

        book = Journal(run, COLLECTIONS)
        plan = {"kind": "tau.collection-plan", "schema_version": 1, "run_id": run.run_id,
                "collection_id": "collection-0001", "plan_sha256": run.plan_sha256,
                "created_at": "2026-12-07T10:00:00.000000Z", "destination": str(run_dir.parent / "data"),
                "format": "parquet", "rows_per_partition": 10, "records": 40, "schema_digest": "0" * 64,
                "shards": [], "tasks": 1}
        status = book.open(plan, result_sha256=None)
        book.retire(status, "its Slurm job 7 ended without publishing the dataset: task 0 of 1 ran out of memory "
                            "(OUT_OF_MEMORY) asking for 64M", cause="OUT_OF_MEMORY")
        with pytest.raises(CheckFailed) as failed:
            job.wait(Jobs(), book, "collection-0001", lambda: None)
    assert failed.value.message == ("collection collection-0001 failed: its Slurm job 7 ended without publishing the "
                                    "dataset: task 0 of 1 ran out of memory (OUT_OF_MEMORY) asking for 64M")
    assert failed.value.details["cause"] == "OUT_OF_MEMORY" and failed.value.code == 1


# -- the Slurm executor's word on a collection job's tasks (one sacct call, each task's output where it was killed) --

# sacct's rows of a collection array job, as the test cluster printed them (its memory enforcement is
# OverMemoryKill, without cgroups: a memory kill is FAILED in sacct, and only slurmstepd's line names it)
SACCT = """7|7|tau-run-0a1b2c3d-c0001|FAILED|0:9|2026-12-07T13:58:29|2026-12-07T13:58:29|2026-12-07T13:59:00
7_0|8|tau-run-0a1b2c3d-c0001|FAILED|0:9|2026-12-07T13:58:29|2026-12-07T13:58:29|2026-12-07T13:59:00
7_1|9|tau-run-0a1b2c3d-c0001|FAILED|0:9|2026-12-07T13:58:29|2026-12-07T13:58:29|2026-12-07T13:59:00
7_2|10|tau-run-0a1b2c3d-c0001|OUT_OF_MEMORY|0:125|2026-12-07T13:58:29|2026-12-07T13:58:29|2026-12-07T13:59:00
7_3|11|tau-run-0a1b2c3d-c0001|TIMEOUT|0:0|2026-12-07T13:58:29|2026-12-07T13:58:29|2026-12-07T14:08:29
7_4|12|tau-run-0a1b2c3d-c0001|CANCELLED by 0|0:15|2026-12-07T13:58:29|2026-12-07T13:58:29|2026-12-07T13:59:00
7_5|13|tau-run-0a1b2c3d-c0001|COMPLETED|0:0|2026-12-07T13:58:29|2026-12-07T13:58:29|2026-12-07T13:59:00
7_6|14|tau-run-0a1b2c3d-c0001|RUNNING|0:0|2026-12-07T13:58:29|2026-12-07T13:58:29|Unknown
7_[7-8]|7|tau-run-0a1b2c3d-c0001|CANCELLED by 0|0:0|2026-12-07T13:58:29|None|2026-12-07T13:59:00
7_9|15|tau-run-0a1b2c3d-c0001|SOMETHING_NEW|0:0|2026-12-07T13:58:29|2026-12-07T13:58:29|2026-12-07T13:59:00
"""
KILLED_AT_64M = (b"{\"progress\": 1}\nslurmstepd-localhost: error: StepId=8.batch exceeded memory limit "
                 b"(86880256 > 67108864), being killed\nslurmstepd-localhost: error: Exceeded job memory limit\n")


def test_the_slurm_executor_reads_each_tasks_end_naming_a_memory_kill_from_slurmstepds_line(done, tmp_path,
                                                                                          monkeypatch):
    from taulib.executors.slurm import commands, parse
    from taulib.executors.slurm.executor import SlurmCollectionJobs

    run_dir = copy_run(done, tmp_path / "ws")
    folder = run_dir / "collections" / "collection-0001"
    folder.mkdir(mode=0o700, parents=True)
    (folder / "slurm-7_0.out").write_bytes(KILLED_AT_64M)
    (folder / "slurm-7_1.out").write_bytes(b"Traceback (most recent call last):\nMemoryError\n")
    (folder / "slurm-7_4.out").write_bytes(KILLED_AT_64M)  # a cancelled task's line is believed too
    asked: list[list[str]] = []
    monkeypatch.setattr(commands, "sacct", lambda ids, arrays: asked.append(ids) or parse.sacct(SACCT, arrays))
    slurm = SlurmCollectionJobs()
    with Run(str(run_dir)) as run:
        ends = slurm.accounted(run, "collection-0001", "7", {"mem": "64M", "time": None})
        other = slurm.accounted(run, "collection-0001", "7", {"mem": "128M", "time": None})
        unsized = slurm.accounted(run, "collection-0001", "7", {"mem": None, "time": None})
        monkeypatch.setattr(commands, "sacct", lambda ids, arrays: [])
        assert slurm.accounted(run, "collection-0001", "8", {"mem": None, "time": None}) is None
    assert asked[0] == ["7"]
    assert ends[0].state == "out_of_memory" and ends[0].word == "FAILED"
    assert ends[0].evidence.startswith("slurmstepd-localhost: error: StepId=8.batch exceeded memory limit")
    assert ends[1] == TaskEnd("failed", "FAILED")  # its own words are no kill of Slurm's
    assert ends[2] == TaskEnd("out_of_memory", "OUT_OF_MEMORY")  # a cluster that enforces memory with cgroups
    assert ends[3] == TaskEnd("timed_out", "TIMEOUT")
    assert ends[4].state == "out_of_memory" and ends[4].word == "CANCELLED by 0"
    assert ends[5] == TaskEnd("completed", "COMPLETED")
    assert ends[7] == ends[8] == TaskEnd("cancelled", "CANCELLED by 0")  # cancelled before they started
    assert 6 not in ends and 9 not in ends  # still running, and a state tau does not know: no final word yet
    assert other[0] == TaskEnd("failed", "FAILED")  # the line names another limit than the one it asked for
    assert unsized[0].state == "out_of_memory"
    assert slurm.request({"scheduler": {"slurm": {"mem": "4G", "collect_time": "20:00", "time": "5:00"}}}) == {
        "mem": "4G", "time": "20:00"}
