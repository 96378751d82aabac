"""Submission on the real Slurm test cluster when sbatch's reply is lost: the journal stays PREPARED, the job is
adopted by its exact name (never submitted twice), or the journal is retired after its visibility deadline and
replaced; a retired submission's allocations that start late are fenced and write nothing.

The lost reply is real: an `sbatch` placed first on PATH runs (or does not run) the real /usr/bin/sbatch and then
reports the socket timeout that Slurm prints when the controller's answer never arrives.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from helpers import error_of, snapshot, tau
from slurm import (LOST_REPLY, attempt_record, fake_sbatch, init_slurm_run, job_id, jobs_named,
                   observe_reconcile, record, run_cmd, sacct_rows, settled, task_states, wait_for, wait_job_gone,
                   wait_until)

pytestmark = pytest.mark.slurm

WINDOWS = {"accounting_lag_seconds": 30, "preemption_seconds": 60, "submission_visibility_seconds": 5}


def _journal(run_dir: Path, sub: str = "submission-0001") -> dict:
    return record(run_dir, f"submissions/{sub}/status.json")


def _job_name(run_dir: Path, sub: str = "submission-0001") -> str:
    return record(run_dir, f"submissions/{sub}/plan.json")["job_name"]


def _wait_past_deadline(run_dir: Path) -> None:
    from taulib import jsonio

    deadline = jsonio.parse_time(_journal(run_dir)["deadline"])
    time.sleep(max(0.0, deadline - time.time()) + 0.5)


def _assert_busy_lost_reply(proc) -> dict:
    assert proc.returncode == 75, (proc.stdout, proc.stderr)
    err = error_of(proc)
    assert err["error"] == "busy" and err["code"] == 75, err
    return err


def test_a_lost_sbatch_reply_exits_75_and_the_next_submit_adopts_that_job_by_name_without_a_duplicate(
        cluster, workspace, extra_jobs):
    run_dir = init_slurm_run(workspace, "adopted")
    wrapped_id = workspace / "wrapped-job-id"
    lost = fake_sbatch(workspace / "lost-reply",
                       f'/usr/bin/sbatch "$@" > "{wrapped_id}" || exit $?\necho "{LOST_REPLY}" >&2\nexit 1\n')
    err = _assert_busy_lost_reply(tau("tau-submit", str(run_dir), env=lost))
    assert "may still have submitted the job" in err["message"], err
    assert "Socket timed out on send/recv operation" in err["message"], err
    journal = _journal(run_dir)
    assert (journal["state"], journal["job_id"], journal["revision"]) == ("prepared", None, 1), journal
    wrapped = wrapped_id.read_text().strip()
    assert wrapped.isdigit(), wrapped
    extra_jobs.append(wrapped)
    assert not list((run_dir / "shards" / "shard-00000" / "attempts").glob("attempt-*/attempt.json"))

    proc = tau("tau-submit", str(run_dir))  # the real sbatch is first on PATH again
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["job_id"] == wrapped and summary["submission_id"] == "submission-0001", summary
    assert summary["adopted"] is True and summary["created"] is False, summary
    journal = _journal(run_dir)
    assert (journal["state"], journal["job_id"], journal["revision"]) == ("submitted", wrapped, 2), journal
    assert not (run_dir / "submissions" / "submission-0002").exists()
    assert attempt_record(run_dir, "shard-00003")["scheduler"] == {"executor": "slurm", "job_id": wrapped,
                                                                   "task_index": 3}

    status = wait_for(settled, run_dir, timeout=60)
    assert status["state"] == "succeeded", status
    assert [(s["state"], s["winner"]) for s in status["shards"]] == [("succeeded", "attempt-0001")] * 4
    name = _job_name(run_dir)
    queue_ids, _ = jobs_named(name)
    assert queue_ids == {wrapped}, queue_ids
    wait_until(lambda: jobs_named(name)[1] == {wrapped}, 15, "accounting shows the one job by its name")
    every_task = [f"{wrapped}_{i}" for i in range(4)]
    wait_until(lambda: sorted(r["job"] for r in sacct_rows(wrapped)) == every_task, 20,
               "accounting lists every task of the one job (its rows arrive within a few seconds)")


def test_a_lost_reply_of_an_sbatch_that_submitted_nothing_is_retired_after_its_deadline_and_replaced(
        cluster, workspace, extra_jobs):
    run_dir = init_slurm_run(workspace, "replaced", windows=WINDOWS)
    lost = fake_sbatch(workspace / "lost-reply", f'echo "{LOST_REPLY}" >&2\nexit 1\n')
    _assert_busy_lost_reply(tau("tau-submit", str(run_dir), env=lost))
    name = _job_name(run_dir)

    proc = tau("tau-submit", str(run_dir))  # before the deadline: wait, never submit blindly
    err = _assert_busy_lost_reply(proc)
    assert "not visible in Slurm yet" in err["message"], err
    journal = _journal(run_dir)
    assert (journal["state"], journal["revision"]) == ("prepared", 1), journal
    assert not (run_dir / "submissions" / "submission-0002").exists()
    assert jobs_named(name) == (set(), set())

    _wait_past_deadline(run_dir)
    proc = tau("tau-submit", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["submission_id"] == "submission-0002" and summary["created"] is True, summary
    retired = _journal(run_dir)
    assert (retired["state"], retired["job_id"]) == ("failed", None), retired
    assert "no job with its name was visible" in retired["reason"], retired
    assert _journal(run_dir, "submission-0002")["state"] == "submitted"
    assert [t["attempt_id"] for t in summary["tasks"]] == ["attempt-0001"] * 4

    status = wait_for(settled, run_dir, timeout=60)
    assert status["state"] == "succeeded", status
    replacement = job_id(run_dir, "submission-0002")
    for i in range(4):
        assert attempt_record(run_dir, f"shard-{i:05d}")["submission_id"] == "submission-0002"
        assert attempt_record(run_dir, f"shard-{i:05d}")["scheduler"]["job_id"] == replacement
    assert jobs_named(name) == (set(), set())  # the first submission never reached Slurm


def test_a_delayed_allocation_of_a_retired_submission_is_fenced_exits_77_and_writes_nothing(
        cluster, workspace, extra_jobs):
    run_dir = init_slurm_run(workspace, "fenced", windows=WINDOWS)
    held_id = workspace / "held-job-id"
    # the job is submitted, but held and under another name: the lookup by exact name cannot find it
    hidden = fake_sbatch(workspace / "hidden", f'/usr/bin/sbatch --hold --job-name=tau-test-hidden "$@" > "{held_id}" '
                                               f'|| exit $?\necho "{LOST_REPLY}" >&2\nexit 1\n')
    _assert_busy_lost_reply(tau("tau-submit", str(run_dir), env=hidden))
    held = held_id.read_text().strip()
    assert held.isdigit(), held
    extra_jobs.append(held)
    assert set(task_states(held).values()) == {"PENDING"}

    _wait_past_deadline(run_dir)
    proc = tau("tau-submit", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["submission_id"] == "submission-0002"
    assert _journal(run_dir)["state"] == "failed"
    status = wait_for(settled, run_dir, timeout=60)
    assert status["state"] == "succeeded", status

    script = (run_dir / "submissions" / "submission-0001" / "job.sh").read_text()
    assert f"taulib.cli.attempt run {run_dir} --submission submission-0001" in script
    before = snapshot(run_dir / "shards")
    run_cmd("scontrol", "release", held)
    wait_job_gone(held, timeout=60)
    wait_until(lambda: [r["state"] for r in sacct_rows(held)] == ["FAILED"] * 4, 20,
               "the held job's four tasks in accounting")
    assert {r["exit_code"] for r in sacct_rows(held)} == {"77:0"}
    assert snapshot(run_dir / "shards") == before
    for task in range(4):
        out = run_dir / "submissions" / "submission-0001" / f"slurm-{held}_{task}.out"
        lines = [line for line in out.read_text().splitlines() if line.strip()]
        errors = [json.loads(line) for line in lines if line.startswith("{")]
        assert len(errors) == 1, lines
        assert errors[0]["code"] == 77 and errors[0]["error"] == "refused", errors
        assert "retired" in errors[0]["message"] and "writes nothing" in errors[0]["message"], errors

    status = observe_reconcile(run_dir)
    assert status["state"] == "succeeded", status
    replacement = job_id(run_dir, "submission-0002")
    for s in status["shards"]:
        assert (s["state"], s["winner"]) == ("succeeded", "attempt-0001"), s
        attempt = attempt_record(run_dir, s["id"])
        assert attempt["submission_id"] == "submission-0002" and attempt["scheduler"]["job_id"] == replacement
