"""Memory under the local executor, as Slurm's OverMemoryKill enforces it: `scheduler.local.mem` caps the sum of a
task's processes' resident memory, sampled every second; a task over it is killed and ends out of memory with the
evidence named; a retry asks for more (retry.escalate) and never for the request that was killed; a shard whose
next request the cap holds where it was killed is exhausted at once; a person's grant (tau-retry --mem) is
submitted as asked, recorded and shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import taulib.api
from taulib import processes
from helpers import BIN, env_for_tests, error_of, init_run, quiesce, settle, snapshot, status, tau

HOG = Path(__file__).parent / "clients" / "hog.py"
pytestmark = pytest.mark.slow


def hog_plan(mem: str, max_mem: str, max_attempts: int = 3, **extra) -> dict:
    """One shard whose client holds 100 MiB for 2.5 s (with tau-attempt and Python beside it: about 135 MiB)."""
    return {"records": 2, "shards": 1, "command": [sys.executable, str(HOG), "100", "2.5"],
            "scheduler": {"profile": "local", "local": {"mem": mem, "max_parallel": 1}},
            "retry": {"max_attempts": max_attempts, "escalate": {"mem": 2, "max_mem": max_mem}},
            "windows": {"accounting_lag_seconds": 20, "preemption_seconds": 5, "submission_visibility_seconds": 5},
            **extra}


def drive(run: Path, code: int = 0):
    """tau-drive in the foreground until the run is finished; its exit code must be `code`."""
    proc = tau("tau-drive", str(run), "--interval", "0.3", timeout=240)
    assert proc.returncode == code, proc.stderr
    return json.loads(proc.stdout) if code == 0 else error_of(proc)


def asked(run: Path) -> list[str | None]:
    """The memory each submission asked for, in order."""
    plans = sorted((run / "submissions").glob("submission-*/plan.json"))
    return [json.loads(p.read_bytes())["resources"]["mem"] for p in plans]


def attempt(run: Path, n: int) -> dict:
    return json.loads((run / f"shards/shard-00000/attempts/attempt-{n:04d}/attempt.json").read_bytes())


def tasks(run: Path) -> list[dict]:
    return [json.loads(p.read_bytes()) for p in sorted((run / "submissions").glob("submission-*/local/task-*.json"))]


def test_tau_drive_grows_memory_after_each_kill_and_the_shard_wins_within_its_budget(workspace):
    run = init_run(workspace, plan_doc=hog_plan("64M", "512M"))
    result = drive(run)
    assert result["finished"] == "succeeded" and result["state"] == "succeeded"
    assert asked(run) == ["64M", "128M", "256M"]  # never the same request twice after a kill
    quiesce(run)
    for n, limit in ((1, 64), (2, 128)):
        terminal = attempt(run, n)["terminal"]
        assert terminal["classification"] == "out_of_memory", terminal
        assert terminal["reason"].startswith("OUT_OF_MEMORY: its processes used ")
        assert f"over the {limit}.0 MiB it asked for; killed by the supervisor" in terminal["reason"]
    killed = tasks(run)[:2]
    assert [t["memory_killed"]["cause"] for t in killed] == ["limit", "limit"]
    assert all(t["signal"] == 9 and t["memory_killed"]["rss_bytes"] > t["memory_killed"]["limit_bytes"]
               for t in killed)
    assert not any(processes.alive(t["pid"], t["start_ticks"]) for t in tasks(run))  # by pid and start time
    doc = status(run)
    won = doc["shards"][0]
    assert won["winner"] == "attempt-0003" and won["usage"]["mem_requested_bytes"] == 256 << 20
    assert 100 << 20 < won["usage"]["max_rss_bytes"] < 256 << 20


def test_a_shard_killed_at_the_cap_is_exhausted_at_once_and_a_grant_of_more_memory_wins(workspace):
    run = init_run(workspace, plan_doc=hog_plan("64M", "128M", max_attempts=5))
    error = drive(run, code=1)  # finished without succeeding
    assert error["message"].startswith("tau-drive: run 'run' finished without succeeding: shard-00000 exhausted: "
                                       "OUT_OF_MEMORY: its processes used ")
    assert error["message"].endswith("ran out of memory asking for 128M, the cap (retry.escalate.max_mem): a retry "
                                     "would ask the same; tau-retry --shard S --mem SIZE grants more")
    assert asked(run) == ["64M", "128M"]  # not a third attempt at the cap, though the budget gives five
    doc = settle(run)
    shard = doc["shards"][0]
    assert shard["state"] == "exhausted" and shard["attempts"] == 2
    assert ("ran out of memory asking for 128M, the cap (retry.escalate.max_mem): a retry would ask the same; "
            "tau-retry --shard S --mem SIZE grants more") in shard["reason"]
    assert shard["next"]["action"] == "exhausted"
    plain = tau("tau-retry", str(run))
    assert plain.returncode == 0, plain.stderr
    said = json.loads(plain.stdout)
    assert said["submission_id"] is None and said["reason"] == (
        f"1 shard(s) were killed at the cap of retry.escalate (shard-00000): a retry would ask the same request "
        f"again; tau-retry {run} --shard S --mem SIZE (or --time LIMIT) grants more")

    before = snapshot(run)
    for args, code, words in ((["--mem", "256M"], 2, "name them with --shard"),
                              (["--shard", "0", "--mem", "4GB"], 2, "'4GB' is not a memory size like 4G"),
                              (["--shard", "0", "--mem", "0"], 2, "grants nothing"),
                              (["--shard", "0", "--time", "1h"], 2, "is not a time limit"),
                              (["--shard", "0", "--mem", "64T"], 65, "is more than this machine has")):
        bad = tau("tau-retry", str(run), *args)
        assert bad.returncode == code, (args, bad.stderr)
        assert words in error_of(bad)["message"], (args, bad.stderr)
    assert snapshot(run) == before  # a refused grant changes nothing

    api = taulib.api.Run(str(run))  # the API keeps the same rules: the same refusal, the same shard's next
    with pytest.raises(taulib.api.UsageError, match="'4GB' is not a memory size like 4G"):
        api.retry([0], mem="4GB")
    seen = api.status().shards[0]
    assert seen.next["action"] == "exhausted" and seen.request == {"mem": "128M", "time": None}
    assert snapshot(run) == before
    granted = tau("tau-retry", str(run), "--shard", "0", "--mem", "256M")
    assert granted.returncode == 0, granted.stderr
    out = json.loads(granted.stdout)
    assert out["granted_request"] == {"mem": "256M"} and [t["shard_id"] for t in out["tasks"]] == ["shard-00000"]
    plan = json.loads((run / "submissions" / out["submission_id"] / "plan.json").read_bytes())
    assert plan["resources"] == {"mem": "256M", "time": None} and plan["grant"] == {"mem": "256M"}
    assert status(run)["shards"][0]["request"] == {"mem": "256M", "time": None}
    doc = settle(run)
    assert doc["state"] == "succeeded" and doc["shards"][0]["winner"] == "attempt-0003"
    assert asked(run) == ["64M", "128M", "256M"]


@pytest.mark.root
def test_a_task_the_kernels_oom_killer_ends_is_out_of_memory_with_that_named(workspace):
    """A memory cgroup of 200 MiB around tau-submit (so around its supervisor and every task): the client asks 300
    MiB, the kernel's OOM killer takes it, and the task ends out of memory, though tau's own limit (1G) never
    fired."""
    cgroup = Path(f"/sys/fs/cgroup/memory/tau-test-{os.getpid()}")
    cgroup.mkdir()
    try:
        (cgroup / "memory.limit_in_bytes").write_text(str(200 << 20))
        plan = hog_plan("1G", "2G", max_attempts=1)
        plan["command"] = [sys.executable, str(HOG), "300", "5"]
        run = init_run(workspace, plan_doc=plan)
        proc = subprocess.run(["/bin/sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$0" "$1"',
                               str(BIN / "tau-submit"), str(run)], capture_output=True, text=True, timeout=60,
                              env=env_for_tests())
        assert proc.returncode == 0, proc.stderr
        doc = settle(run)
        assert "oom_kill 1" in (cgroup / "memory.oom_control").read_text().splitlines()[2:3][0]
        killed = tasks(run)[0]
        assert killed["memory_killed"]["cause"] == "oom_killer" and killed["exit_code"] != 0, killed
        assert attempt(run, 1)["terminal"]["reason"] == "the client was killed by signal 9"  # all it could see
        # the attempt ended itself, so its executor's accounting (the task's rusage and record) names the cause
        shard = doc["shards"][0]
        assert shard["usage"]["state"] == "OUT_OF_MEMORY", shard["usage"]
        assert shard["state"] == "exhausted" and shard["reason"].startswith("the client was killed by signal 9; ")
        assert "; out of memory: the executor's accounting says OUT_OF_MEMORY, peak " in shard["reason"], shard
        assert shard["next"]["request"]["mem"] == "2G"  # a retry granted would ask for more
    finally:
        for pid in (cgroup / "cgroup.procs").read_text().split():
            os.kill(int(pid), 9)
        cgroup.rmdir()
