"""Requests that grow on retry and what each attempt cost, on the real test cluster (memory a consumable resource,
enforced without cgroups by OverMemoryKill; Slurm's own time limits): a shard killed for memory is retried with
twice the memory and wins, a timed-out one with more time, a plain failure with the same request, each retry
window asking the same of every task; every finished attempt's figures match sacct's own for its task."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from helpers import init_run, tau
from slurm import cancel_workspace_jobs, run_cmd, settled, shard, wait_for

pytestmark = pytest.mark.slurm

PYTHON_CLIENT = """\
import os, sys, time
sid, ordinal = os.environ["TAU_SHARD_ID"], int(os.environ["TAU_ATTEMPT_ORDINAL"])
if sid == "shard-00000":  # needs 300 MiB on every attempt: more than the plan's 256M with tau-attempt beside it
    held = bytearray(300 << 20)
    for i in range(0, len(held), 4096):
        held[i] = 1
    time.sleep(4)
if sid == "shard-00001" and ordinal == 1:  # runs past the plan's minute the first time
    time.sleep(600)
if sid == "shard-00002" and ordinal == 1:
    sys.exit(3)
import pyarrow as pa, pyarrow.parquet as pq
pq.write_table(pa.table({"id": [int(sid[-5:])]}), os.path.join(os.environ["TAU_OUTPUT_DIR"], "part-00000.parquet"))
"""


@pytest.fixture
def resource_run(cluster, workspace: Path):
    client = workspace / "client.py"
    client.write_text(PYTHON_CLIENT)
    run = init_run(workspace, plan_doc={
        "records": 4, "shards": 4, "command": [sys.executable, str(client)],
        "scheduler": {"profile": "slurm", "slurm": {"partition": "debug", "time": "1:00", "mem": "256M",
                                                     "extra": ["--acctg-freq=task=1"]}},
        "retry": {"max_attempts": 3, "escalate": {"mem": 2, "time": 3, "max_mem": "1G", "max_time": "10:00"}},
        "windows": {"accounting_lag_seconds": 60, "preemption_seconds": 60, "submission_visibility_seconds": 30}})
    yield run
    cancel_workspace_jobs(workspace)


def job_script(run: Path, submission: str) -> str:
    return (run / "submissions" / submission / "job.sh").read_text()


def sacct_figures(job: str, task: int) -> dict:
    """sacct's own figures for one array task, asked and read here independently of tau."""
    rows = run_cmd("sacct", "--noheader", "--parsable2", "--jobs", f"{job}_{task}",
                   "--format=JobID,State,Elapsed,TotalCPU,MaxRSS,AllocCPUS,ReqMem").stdout.splitlines()
    fields = {line.split("|")[0]: line.split("|") for line in rows}
    alloc, batch = fields[f"{job}_{task}"], fields[f"{job}_{task}.batch"]

    def seconds(text: str) -> float:
        days, _, clock = text.rpartition("-")
        parts = [float(p) for p in clock.split(":")]
        while len(parts) < 3:
            parts.insert(0, 0.0)
        return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]

    units = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    rss = re.fullmatch(r"([0-9.]+)([KMG]?)", batch[4])  # empty when the step ended before its first sample
    mem = re.fullmatch(r"([0-9]+)([KMG])", alloc[6])
    return {"state": alloc[1], "elapsed_seconds": seconds(alloc[2]), "cpu_seconds": seconds(alloc[3]),
            "max_rss_bytes": None if rss is None else round(float(rss[1]) * units.get(rss[2], 1)),
            "cpus": int(alloc[5]),
            "mem_requested_bytes": int(mem[1]) * units[mem[2]]}


def test_memory_and_time_grow_on_retry_and_every_attempts_cost_matches_sacct(resource_run):
    run = resource_run
    assert tau("tau-submit", str(run)).returncode == 0
    assert "#SBATCH --mem=256M" in job_script(run, "submission-0001")
    assert "#SBATCH --time=1:00" in job_script(run, "submission-0001")
    # shard 0 is killed for memory, shard 1 at its time limit (Slurm checks limits every 30 s), shard 2 exits 3
    status = wait_for(lambda s: all(shard(s, f"shard-0000{i}")["state"] == "failed" for i in range(3))
                      and shard(s, "shard-00003")["state"] == "succeeded"
                      and s["efficiency"]["measured"] == 4, run, timeout=240, pause=3)
    assert "TIMEOUT" in shard(status, "shard-00001")["reason"]
    killed = shard(status, "shard-00000")["usage"]
    assert killed["measured"] and killed["state"] == "FAILED"  # OverMemoryKill: not OUT_OF_MEMORY without cgroups
    assert killed["max_rss_bytes"] > killed["mem_requested_bytes"] == 256 << 20

    retried = tau("tau-retry", str(run))
    assert retried.returncode == 0, retried.stderr
    result = json.loads(retried.stdout)
    windows = {w["tasks"][0]["shard_id"]: w for w in result["windows"]}
    assert sorted(windows) == ["shard-00000", "shard-00001", "shard-00002"] and len(result["windows"]) == 3
    grown = {sid: job_script(run, w["submission_id"]) for sid, w in windows.items()}
    assert "#SBATCH --mem=512M" in grown["shard-00000"] and "#SBATCH --time=1:00" in grown["shard-00000"]
    assert "#SBATCH --mem=256M" in grown["shard-00001"] and "#SBATCH --time=00:03:00" in grown["shard-00001"]
    assert "#SBATCH --mem=256M" in grown["shard-00002"] and "#SBATCH --time=1:00" in grown["shard-00002"]

    status = wait_for(lambda s: settled(s) and s["efficiency"]["unmeasured"] == 0, run, timeout=240, pause=3)
    assert status["state"] == "succeeded", status["counts"]
    assert status["efficiency"]["measured"] == 7 and status["efficiency"]["unmeasured"] == 0

    # every attempt's figures are sacct's own for its task
    for sub in sorted(p.name for p in (run / "submissions").iterdir() if p.name.startswith("submission-")):
        record = json.loads((run / "submissions" / sub / "usage.json").read_bytes())
        job = json.loads((run / "submissions" / sub / "status.json").read_bytes())["job_id"]
        assert record["complete"] is True and record["job_id"] == job
        for task in record["tasks"]:
            theirs = sacct_figures(job, task["task_index"])
            assert task["source"] == "sacct" and task["state"] == theirs["state"]
            assert task["elapsed_seconds"] == theirs["elapsed_seconds"]
            assert task["cpu_seconds"] == pytest.approx(theirs["cpu_seconds"], abs=0.001)
            assert task["max_rss_bytes"] == (None if theirs["max_rss_bytes"] is None
                                             else pytest.approx(theirs["max_rss_bytes"], rel=0.001))
            assert (task["cpus"], task["mem_requested_bytes"]) == (theirs["cpus"], theirs["mem_requested_bytes"])
    won = shard(status, "shard-00000")["usage"]
    assert won["state"] == "COMPLETED" and won["mem_requested_bytes"] == 512 << 20
    assert 300 << 20 < won["max_rss_bytes"] < 512 << 20 and 0.5 < won["memory_efficiency"] < 1
    table = tau("tau-status", str(run), "-o", "table")
    assert table.returncode == 0, table.stderr
    assert "efficiency: 7 attempts measured; " in table.stdout
    assert "  slowest: shard-00001 attempt-0001 " in table.stdout
