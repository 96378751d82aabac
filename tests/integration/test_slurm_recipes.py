"""The Slurm recipes in contrib/slurm, on the real test cluster: the EpilogSlurmctld hook (installed by
cluster-up.sh as /etc/slurm/tau-epilog-slurmctld.sh), the cron line of tau.crontab, and the rendered sbatch script.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from helpers import BIN, ROOT
from slurm import (cancel_workspace_jobs, init_slurm_run, job_id, observe_reconcile, record, run_cmd, settled, submit,
                   wait_for, wait_task_state, wait_until)

pytestmark = pytest.mark.slurm


@pytest.fixture
def jobs_cancelled(workspace):
    """Every job the test's runs recorded is cancelled at the end."""
    yield
    cancel_workspace_jobs(workspace)


def _status_file(run_dir: Path) -> Path:
    return run_dir.parent / f"{run_dir.name}.status.json"


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def test_the_epilog_hook_reconciles_a_cancelled_task_by_itself_and_writes_the_status_beside_the_run(
        cluster, workspace, jobs_cancelled):
    run_dir = init_slurm_run(workspace, records=10, shards=1, client_args=("--sleep", "30"))
    submit(run_dir)
    job = job_id(run_dir)
    wait_task_state(job, 0, "RUNNING")
    attempt_dir = run_dir / "shards" / "shard-00000" / "attempts" / "attempt-0001"
    wait_until((attempt_dir / "client.log").exists, 30, "the client runs", pause=0.2)
    assert not (attempt_dir / "observation.json").exists()  # nobody has reconciled this run
    run_cmd("scancel", f"{job}_0")

    # the test never runs tau-reconcile: the hook's own delayed observe | reconcile (20 s after the epilog) does
    def final_status() -> dict | None:
        obs = _read_json(attempt_dir / "observation.json")
        status = _read_json(_status_file(run_dir))
        if obs and obs["terminal"] and status and status["shards"][0]["state"] == "failed":
            return status
        return None

    status = wait_until(final_status, 45, "the hook's delayed reconcile", pause=0.5)
    obs = record(run_dir, "shards/shard-00000/attempts/attempt-0001/observation.json")
    assert (obs["state"], obs["source"], obs["terminal"]) == ("cancelled", "accounting", True), obs
    assert "CANCELLED" in obs["reason"]
    # (whether the hook's first, immediate reconcile saw the task COMPLETING or already gone is timing: only the
    # end state is promised)
    assert status["kind"] == "tau.status" and status["run_id"] == run_dir.name, status
    assert status["state"] == "failed" and status["retryable"] == ["shard-00000"], status
    shard = status["shards"][0]
    assert shard["evidence"]["observation"]["state"] == "cancelled" and "CANCELLED" in shard["reason"], shard
    attempt = record(run_dir, "shards/shard-00000/attempts/attempt-0001/attempt.json")
    assert attempt["state"] == "failed" and attempt["terminal"]["classification"] == "cancelled", attempt


def _cron_command(run_dir: Path) -> str:
    lines = [line for line in (ROOT / "contrib" / "slurm" / "tau.crontab").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert len(lines) == 1, lines
    fields = lines[0].split(None, 5)
    assert len(fields) == 6, lines[0]
    schedule, command = fields[:5], fields[5]
    assert all(re.fullmatch(r"[0-9*/,-]+", field) for field in schedule), schedule
    match = re.match(r"^PATH=([^ :]+)(:\S*) RUN=(\S+); (.*)\Z", command)
    assert match, command
    return f"PATH={BIN}{match[2]} RUN={run_dir}; {match[4]}"


def test_the_cron_line_writes_a_valid_status_document_of_the_run_beside_it(cluster, workspace, jobs_cancelled):
    run_dir = init_slurm_run(workspace, records=20, shards=2)
    submit(run_dir)
    # settled, and what each attempt used measured (sacct has the batch steps' figures a moment after the tasks)
    expected = wait_for(lambda s: settled(s) and not s["efficiency"]["unmeasured"], run_dir, timeout=60)
    _status_file(run_dir).unlink(missing_ok=True)  # the epilog hook may have written one already

    proc = subprocess.run(["sh", "-c", _cron_command(run_dir)], capture_output=True, text=True, timeout=60,
                          env={"HOME": str(workspace), "LANG": "C.UTF-8"})  # cron's environment is bare
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""
    status = json.loads(_status_file(run_dir).read_text())
    assert not Path(f"{_status_file(run_dir)}.tmp").exists()
    assert (status["kind"], status["schema_version"]) == ("tau.status", 1), status
    assert (status["run_id"], status["run_dir"]) == (run_dir.name, str(run_dir)), status
    assert status["sources"] == {"queue": "observed", "accounting": "observed", "reason": None}
    assert status["changes"] == []
    for key in ("state", "counts", "retryable", "shards"):
        assert status[key] == expected[key], key
    assert status["state"] == "succeeded" and sum(status["counts"].values()) == 2


def test_the_rendered_sbatch_script_passes_sbatch_test_only_with_the_options_tau_relies_on(
        cluster, workspace, jobs_cancelled):
    run_dir = init_slurm_run(workspace, records=20, shards=2)
    submit(run_dir)
    folder = run_dir / "submissions" / "submission-0001"
    script = folder / "job.sh"
    proc = run_cmd("sbatch", "--test-only", str(script))
    assert "to start at" in proc.stderr, proc.stderr
    options = {}
    for line in script.read_text().splitlines():
        if line.startswith("#SBATCH "):
            key, _, value = line[len("#SBATCH "):].partition("=")
            options[key] = value
    assert options["--array"] == "0-1"
    assert options["--job-name"] == record(run_dir, "submissions/submission-0001/plan.json")["job_name"]
    assert "--requeue" in options and options["--open-mode"] == "append"
    assert Path(options["--output"]).parent == folder, options
    assert options["--chdir"] == str(folder)

    status = wait_for(settled, run_dir, timeout=60)
    assert status["state"] == "succeeded", status
    assert sorted(p.name for p in folder.glob("slurm-*.out")) == [f"slurm-{job_id(run_dir)}_{i}.out"
                                                                  for i in range(2)]
    assert observe_reconcile(run_dir)["state"] == "succeeded"
