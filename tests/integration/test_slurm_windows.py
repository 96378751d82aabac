"""Runs larger than a user may queue, on the real test cluster at Slurm's default limits (MaxArraySize=1001,
MaxJobCount=10000, associations and their limits enforced), with the user's MaxSubmitJobs set through sacctmgr:
tau-submit submits the windows that fit and defers the rest, the cron line drains them, shards above the largest
array index run as array tasks numbered from 0, and crashes or lost replies between windows converge to one job per
window and one attempt per shard."""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import init_run, tau
from slurm import cancel_workspace_jobs, jobs_named, observe_reconcile, run_cmd, wait_until

pytestmark = pytest.mark.slurm

CLIENT = """#!/bin/sh
# the cheapest client that can win: one Parquet row made beforehand, copied (no interpreter of its own to start)
if [ "$TAU_SHARD_ID" = "$FAIL_SHARD" ] && [ "$TAU_ATTEMPT_ORDINAL" = 1 ]; then
  echo "failing $TAU_SHARD_ID once"; exit 3
fi
exec cp "$TEMPLATE" "$TAU_OUTPUT_DIR/part-00000.parquet"
"""


@pytest.fixture
def cheap_client(workspace: Path) -> dict:
    """A shell client and its one-row Parquet template, in the workspace."""
    template = workspace / "one.parquet"
    pq.write_table(pa.table({"id": [0]}), template)
    client = workspace / "client.sh"
    client.write_text(CLIENT)
    client.chmod(0o700)
    return {"command": [str(client)], "env": {"TEMPLATE": str(template), "FAIL_SHARD": "none"}}


def windowed_run(workspace: Path, client: dict, shards: int, name: str = "run", **env: str) -> Path:
    return init_run(workspace, name, plan_doc={
        "records": shards, "shards": shards, "command": client["command"], "env": {**client["env"], **env},
        "scheduler": {"profile": "slurm", "slurm": {"partition": "debug", "time": "5:00"}},
        "output": {"format": "parquet", "rows_per_partition": 100_000},
        "windows": {"accounting_lag_seconds": 30, "preemption_seconds": 60, "submission_visibility_seconds": 30}})


@contextmanager
def max_submit_jobs(limit: int):
    """root's association's MaxSubmitJobs, set through sacctmgr for the test and put back after it."""
    run_cmd("sacctmgr", "-i", "modify", "user", "where", "name=root", "set", f"MaxSubmitJobs={limit}")
    try:
        yield
    finally:
        run_cmd("sacctmgr", "-i", "modify", "user", "where", "name=root", "set", "MaxSubmitJobs=-1")


def queued() -> int:
    """root's array tasks in squeue now (one line per task: --array)."""
    proc = run_cmd("squeue", "--noheader", "--array", "--user=0", "--format=%i")
    return sum(1 for line in proc.stdout.splitlines() if line.strip())


class Sampler:
    """The queue sampled every second while the run drains: the most tasks it ever held."""

    def __init__(self) -> None:
        self.most = 0
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.most = max(self.most, queued())
            self.samples += 1
            self.stop.wait(1.0)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def cron(run_dir: Path) -> dict:
    """The cron line: observe | reconcile, then tau-submit and tau-retry; every call must succeed."""
    status = observe_reconcile(run_dir)
    for command in ("tau-submit", "tau-retry"):
        proc = tau(command, str(run_dir))
        assert proc.returncode == 0, f"{command} exited {proc.returncode}: {proc.stderr}"
    return status


def plans(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "submissions").glob("submission-*/plan.json"))]


@pytest.mark.slow  # 1,200 tasks on the 2-CPU test node: about 8 minutes
def test_a_run_larger_than_the_user_may_queue_drains_through_the_cron_line_and_every_shard_wins(
        cluster, workspace, cheap_client):
    run_dir = windowed_run(workspace, cheap_client, 1200, FAIL_SHARD="shard-01100")
    try:
        with max_submit_jobs(250), Sampler() as sampler:
            first = tau("tau-submit", str(run_dir))
            assert first.returncode == 0, first.stderr
            doc = json.loads(first.stdout)
            assert len(doc["tasks"]) == 250 and doc["deferred"]["shards"] == 950, doc["deferred"]
            assert doc["deferred"]["holding"].startswith("MaxSubmitJobs=250 of user root's association")
            status = observe_reconcile(run_dir)
            assert status["deferred"]["shards"] == 950
            waiting = next(s for s in status["shards"] if s["id"] == "shard-01199")
            assert waiting["state"] == "pending" and "deferred until the queue has room (MaxSubmitJobs=250" \
                in waiting["reason"]
            deadline = time.monotonic() + 1200
            while status["state"] != "succeeded":
                assert time.monotonic() < deadline, f"the run did not drain: {status['counts']}"
                time.sleep(2)
                status = cron(run_dir)
        assert sampler.samples > 10 and 0 < sampler.most <= 250, (sampler.most, sampler.samples)
        assert status["counts"]["succeeded"] == 1200 and status["deferred"] is None
        late = next(s for s in status["shards"] if s["id"] == "shard-01100")
        assert (late["attempts"], late["winner"]) == (2, "attempt-0002")
        indices = [r.get("task", r["first"]) + r["count"] - 1 for p in plans(run_dir) for r in p["task_ranges"]]
        assert max(indices) <= 1000  # never an array index sbatch would refuse
        assert any(r["first"] >= 1001 and "task" in r for p in plans(run_dir) for r in p["task_ranges"])
        assert all(p["capacity"]["max_index"] == 1000 for p in plans(run_dir))
        collected = tau("tau-collect", str(run_dir), "--destination", str(workspace / "dataset"), "--wait",
                        timeout=600)
        assert collected.returncode == 0, collected.stderr
        assert json.loads(collected.stdout)["records"] == 1200
        assert pq.read_table(workspace / "dataset").num_rows == 1200
    finally:
        cancel_workspace_jobs(workspace)


def windows_of(run_dir: Path) -> list[tuple[str, str, list[int]]]:
    """(submission id, job name, shard indices) of every submission, in order."""
    out = []
    for plan in plans(run_dir):
        shards = [r["first"] + k for r in plan["task_ranges"] for k in range(r["count"])]
        out.append((plan["submission_id"], plan["job_name"], shards))
    return out


def one_attempt_each(run_dir: Path, shards: int) -> None:
    """Every shard has exactly attempt-0001, given by exactly one bound submission."""
    from taulib.rundir import layout, state
    from taulib.rundir.run import Run

    with Run(str(run_dir)) as run:
        submitted = state.Submitted(run)
        for index in range(shards):
            given = submitted.ordinals(index)
            assert list(given) == [1], (layout.shard_id(index), given)


@pytest.mark.parametrize("armed", ["tau-submit:submit.submitted=crash@1", "tau-submit:submit.sbatch_returned=crash@2"])
def test_a_crash_between_windows_or_a_lost_reply_on_a_later_window_converges_to_one_job_per_window(
        cluster, workspace, cheap_client, armed):
    """1,050 shards are two windows (MaxArraySize=1001): SIGKILL after the first window is bound, or right after
    sbatch answered for the second (its reply lost), then tau-submit again."""
    run_dir = windowed_run(workspace, cheap_client, 1050)
    try:
        crashed = tau("tau-submit", str(run_dir), env={**os.environ, "TAU_FAILPOINTS": armed})
        assert crashed.returncode == -9, crashed.stderr
        again = tau("tau-submit", str(run_dir))
        assert again.returncode == 0, again.stderr
        doc = json.loads(again.stdout)
        assert doc["deferred"] == {"shards": 0, "holding": None, "unread": []}
        if "sbatch_returned" in armed:
            assert doc["adopted"] is True and doc["submission_id"] == "submission-0002"
        windows = windows_of(run_dir)
        assert [(sub, shards[0], shards[-1], len(shards)) for sub, _, shards in windows] == [
            ("submission-0001", 0, 1000, 1001), ("submission-0002", 1001, 1049, 49)]
        for _, name, _ in windows:
            queue, acct = jobs_named(name)
            assert len(queue | acct) == 1, (name, queue, acct)
        second = json.loads((run_dir / "submissions" / "submission-0002" / "plan.json").read_text())
        assert second["task_ranges"] == [{"first": 1001, "count": 49, "ordinal": 1, "task": 0}]
        one_attempt_each(run_dir, 1050)
        third = tau("tau-submit", str(run_dir))
        assert third.returncode == 0 and json.loads(third.stdout)["created"] is False
        assert len(windows_of(run_dir)) == 2
    finally:
        cancel_workspace_jobs(workspace)


def test_limits_that_cannot_be_read_are_named_in_the_submission_and_never_guessed(cluster, workspace, cheap_client):
    folder = workspace / "bin"
    folder.mkdir()
    sacctmgr = folder / "sacctmgr"
    sacctmgr.write_text("#!/bin/sh\necho 'sacctmgr: error: Access/permission denied' >&2\nexit 1\n")
    sacctmgr.chmod(0o700)
    run_dir = windowed_run(workspace, cheap_client, 4)
    try:
        env = {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}
        proc = tau("tau-submit", str(run_dir), env=env)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert len(doc["tasks"]) == 4 and doc["deferred"]["shards"] == 0
        capacity = plans(run_dir)[0]["capacity"]
        assert (capacity["max_index"], capacity["room"]) == (1000, None)
        assert capacity["unread"] == ["association and QOS limits (sacctmgr show user failed: sacctmgr: error: "
                                      "Access/permission denied)"]
        wait_until(lambda: observe_reconcile(run_dir)["state"] == "succeeded", 180, "the run succeeded", pause=2)
    finally:
        cancel_workspace_jobs(workspace)


def test_sbatchs_refusal_for_a_submit_limit_defers_the_window_instead_of_failing(cluster, workspace, cheap_client):
    """A limit filled between tau's reading and sbatch (another process submitted meanwhile): sbatch refuses with
    Slurm's own words, the window is retired, its shards wait, and the call exits 0."""
    folder = workspace / "bin"
    folder.mkdir()
    scontrol = folder / "scontrol"  # the cluster's limits read as if nothing held the user back
    scontrol.write_text("#!/bin/sh\nprintf 'MaxArraySize = 1001\\nMaxJobCount = 10000\\nAccountingStorageEnforce = "
                        "none\\n'\n")
    scontrol.chmod(0o700)
    run_dir = windowed_run(workspace, cheap_client, 4)
    try:
        with max_submit_jobs(2):
            env = {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}
            proc = tau("tau-submit", str(run_dir), env=env)
            assert proc.returncode == 0, proc.stderr
            doc = json.loads(proc.stdout)
            assert (doc["submission_id"], doc["tasks"], doc["deferred"]["shards"]) == (None, [], 4)
            assert doc["deferred"]["holding"].startswith("sbatch refused the job for a submit limit: ")
            status = json.loads((run_dir / "submissions" / "submission-0001" / "status.json").read_text())
            assert status["state"] == "failed" and "submit limit" in status["reason"]
        proc = tau("tau-submit", str(run_dir))  # the limit lifted: the next call submits them
        assert proc.returncode == 0 and len(json.loads(proc.stdout)["tasks"]) == 4, proc.stderr
        wait_until(lambda: observe_reconcile(run_dir)["state"] == "succeeded", 180, "the run succeeded", pause=2)
    finally:
        cancel_workspace_jobs(workspace)
