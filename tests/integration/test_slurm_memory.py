"""Retries that learn on the real test cluster (Slurm's defaults, memory a consumable resource enforced without
cgroups by `JobAcctGatherParams=OverMemoryKill`, sampled every 30 s): a shard that needs about 730 MiB at
`mem: 256M`, escalated x2 up to 2G, asks 256M, 512M, 1G and wins within a budget of 3, each memory kill named
out_of_memory with slurmstepd's words, whatever the sampling period and whoever drives it (tau-drive, or the cron
line); a 10-second job shows its memory as not measured, never as not requested."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import BIN, env_for_tests, error_of, init_run, tau
from slurm import cancel_workspace_jobs, observe_reconcile, shard

pytestmark = pytest.mark.slurm

HOG = Path(__file__).parent.parent / "clients" / "hog.py"


def memory_plan(extra: list[str], max_attempts: int = 3) -> dict:
    """One shard needing 730 MiB for 45 s (past a 30 s sample), a second that sleeps 10 s in almost none."""
    return {"records": 2, "shards": 2, "command": [sys.executable, str(HOG), "730", "45"],
            "env": {"HOG_SHARD": "shard-00000"},
            "scheduler": {"profile": "slurm", "slurm": {"partition": "debug", "time": "5:00", "mem": "256M",
                                                         "extra": extra}},
            "retry": {"max_attempts": max_attempts, "escalate": {"mem": 2, "max_mem": "2G"}},
            "windows": {"accounting_lag_seconds": 60, "preemption_seconds": 60, "submission_visibility_seconds": 30}}


def asked(run: Path, sid: str) -> list[str]:
    """The memory each submission of `sid` asked for, read from its job script, in order."""
    out = []
    for sub in sorted((run / "submissions").glob("submission-*")):
        plan = json.loads((sub / "plan.json").read_bytes())
        if any(r["first"] <= int(sid[-5:]) < r["first"] + r["count"] for r in plan["task_ranges"]):
            line = next(ln for ln in (sub / "job.sh").read_text().splitlines() if ln.startswith("#SBATCH --mem="))
            out.append(line.removeprefix("#SBATCH --mem="))
    return out


def cron_until_finished(run: Path, deadline: float) -> dict:
    """The cron line (observe | reconcile, tau-submit, tau-retry) every 3 s until the run is finished as tau-drive
    judges it (`rules.drive.finished`: succeeded, or nothing live and nothing a retry would submit)."""
    from taulib.rules.drive import finished

    while True:
        status = observe_reconcile(run)
        for command in ("tau-submit", "tau-retry"):
            proc = tau(command, str(run))
            assert proc.returncode == 0, f"{command} exited {proc.returncode}: {proc.stderr}"
        if finished(status) is not None:
            return status
        assert time.monotonic() < deadline, f"the cron line did not finish the run: {status['counts']}"
        time.sleep(3)


@pytest.fixture
def three_runs(cluster, workspace: Path):
    runs = {"drive-30s": init_run(workspace, "drive-30s", plan_doc=memory_plan([])),
            "drive-1s": init_run(workspace, "drive-1s", plan_doc=memory_plan(["--acctg-freq=task=1"])),
            "cron-30s": init_run(workspace, "cron-30s", plan_doc=memory_plan([]))}
    yield runs
    cancel_workspace_jobs(workspace)


def test_a_memory_hungry_shard_grows_256m_512m_1g_and_wins_driven_by_tau_drive_or_the_cron_line(three_runs):
    drivers = {name: subprocess.Popen([str(BIN / "tau-drive"), str(run), "--interval", "2"], env=env_for_tests(),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for name, run in three_runs.items() if name.startswith("drive")}
    cron: dict = {}
    thread = threading.Thread(target=lambda: cron.update(done=cron_until_finished(
        three_runs["cron-30s"], time.monotonic() + 600)))
    thread.start()
    try:
        for name, proc in drivers.items():
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, (name, err)
            assert json.loads(out)["finished"] == "succeeded", name
    finally:
        for proc in drivers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        thread.join(timeout=660)
    assert cron["done"]["state"] == "succeeded", cron["done"]["counts"]

    for name, run in three_runs.items():
        assert asked(run, "shard-00000") == ["256M", "512M", "1G"], name
        status = observe_reconcile(run)
        hungry = shard(status, "shard-00000")
        assert (hungry["winner"], hungry["attempts"]) == ("attempt-0003", 3), name
        for n in (1, 2):
            attempt = json.loads((run / f"shards/shard-00000/attempts/attempt-000{n}/attempt.json").read_bytes())
            terminal = attempt["terminal"]
            assert terminal["classification"] == "out_of_memory", (name, n, terminal)
            assert "exceeded memory limit (" in terminal["reason"] and "being killed" in terminal["reason"], name
        assert hungry["usage"]["mem_requested_bytes"] == 1 << 30
        assert 700 << 20 < hungry["usage"]["max_rss_bytes"] < 1 << 30, (name, hungry["usage"])
        quick = shard(status, "shard-00001")
        assert quick["winner"] == "attempt-0001" and asked(run, "shard-00001") == ["256M"]
    # the 10-second shard under the default 30 s sampling: its memory was asked for, and never measured
    status = observe_reconcile(three_runs["drive-30s"])
    quick = shard(status, "shard-00001")["usage"]
    assert quick["mem_requested_bytes"] == 256 << 20 and quick["max_rss_bytes"] is None, quick
    table = tau("tau-status", str(three_runs["drive-30s"]), "-o", "table")
    assert table.returncode == 0, table.stderr
    assert "no memory requested" not in table.stdout
    assert "not measured" in table.stdout


def test_a_held_task_and_one_behind_its_begin_time_show_slurms_reason_in_the_table(cluster, workspace: Path):
    held = dict(memory_plan(["--hold"]), shards=1, records=1)
    held["windows"] = dict(held["windows"], accounting_lag_seconds=5)  # a job cancelled while held never ran
    runs = {"held": init_run(workspace, "held", plan_doc=held),
            "later": init_run(workspace, "later", plan_doc=dict(memory_plan(["--begin=now+1hour"]), shards=1,
                                                                  records=1))}
    try:
        for run in runs.values():
            assert tau("tau-submit", str(run)).returncode == 0
        deadline = time.monotonic() + 60
        for name, words in (("held", "queued (JobHeldUser: held by its user; scontrol release lets it start)"),
                            ("later", "queued (BeginTime: not before its begin time; a requeued task waits here)")):
            while True:
                status = observe_reconcile(runs[name])
                if shard(status, "shard-00000")["reason"] == words:
                    break
                assert time.monotonic() < deadline, (name, shard(status, "shard-00000")["reason"])
                time.sleep(1)
            table = tau("tau-status", str(runs[name]), "-o", "table")
            assert table.returncode == 0, table.stderr
            row = next(line for line in table.stdout.splitlines() if line.startswith("shard-00000"))
            assert row.split()[1] == "pending" and words in row, row
        # the held attempt stopped, the user grants its retry more: exactly that is submitted and shown
        run = runs["held"]
        assert tau("tau-cancel", str(run), "--shard", "0", "--attempt").returncode == 0
        deadline = time.monotonic() + 60
        while shard(observe_reconcile(run), "shard-00000")["state"] not in ("failed", "unknown"):  # retryable
            assert time.monotonic() < deadline
            time.sleep(1)
        before = sorted(p.name for p in (run / "submissions").iterdir())
        too_much = tau("tau-retry", str(run), "--shard", "0", "--mem", "64T")
        assert too_much.returncode == 65, too_much.stderr
        assert error_of(too_much)["message"].startswith("tau-retry: cannot grant that: --mem 64T is more than ")
        assert sorted(p.name for p in (run / "submissions").iterdir()) == before
        granted = tau("tau-retry", str(run), "--shard", "0", "--mem", "1G", "--time", "2:00")
        assert granted.returncode == 0, granted.stderr
        sub = json.loads(granted.stdout)["submission_id"]
        script = (run / "submissions" / sub / "job.sh").read_text()
        assert "#SBATCH --mem=1G" in script and "#SBATCH --time=2:00" in script
        assert shard(observe_reconcile(run), "shard-00000")["request"] == {"mem": "1G", "time": "2:00"}
    finally:
        cancel_workspace_jobs(workspace)
