"""Strict parsing on the real Slurm test cluster: what tau takes for "gone" is the message this Slurm prints, an
sbatch reply that is no job id is resolved by name into the job sbatch really made, and a queue row tau cannot read
holds back only its own attempt (tau-slurm(7) "Observation").

The odd outputs are made by wrappers first on PATH around the real commands: the real job exists, only its reply is
changed, as a misbehaving site wrapper or a broken proxy would change it.
"""

from __future__ import annotations

import json

import pytest

from helpers import error_of, tau
from slurm import (attempt_record, fake_command, init_slurm_run, job_id, observe_reconcile, record, run_cmd, shard,
                   two_tasks_running)

from taulib.errors import Unavailable
from taulib.executors.slurm import commands

pytestmark = pytest.mark.slurm


def test_squeue_of_jobs_slurm_no_longer_knows_prints_exactly_the_message_tau_takes_for_gone(cluster):
    unknown = "67000000"  # below MaxJobId (67043328 at most): a job id Slurm could give, and has not
    proc = run_cmd("squeue", "--noheader", "--array", "--format=%i|%T|%r", f"--jobs={unknown}", check=False)
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.strip() == commands.GONE
    assert commands.squeue([unknown]) == []
    beyond = run_cmd("squeue", "--noheader", "--jobs=4000000000", check=False)  # refused by squeue itself
    assert beyond.returncode != 0 and beyond.stderr.strip() == "squeue: error: Invalid job id: 4000000000"
    with pytest.raises(Unavailable, match="squeue failed: squeue: error: Invalid job id: 4000000000"):
        commands.squeue(["4000000000"])


@pytest.mark.parametrize("printed", ["0", "9" * 5000], ids=["zero", "5000-digits"])
def test_sbatch_replying_no_job_id_is_ambiguous_and_the_next_submit_adopts_the_job_it_made(
        cluster, workspace, extra_jobs, printed):
    run_dir = init_slurm_run(workspace, records=8, shards=2)
    real_id = workspace / "real-id"
    odd = fake_command(workspace / "odd-reply", "sbatch",
                       f'/usr/bin/sbatch "$@" > "{real_id}" || exit $?\necho "{printed}"\n')
    proc = tau("tau-submit", str(run_dir), env=odd)
    assert proc.returncode == 75, proc.stderr
    err = error_of(proc)
    shown = printed if len(printed) < 60 else f"{printed[:60]}... ({len(printed)} characters)"
    assert f"sbatch's outcome is ambiguous: it printed '{shown}', not a job id" in err["message"], err
    assert err["message"].endswith("tau resolves it by its exact name on the next tau-submit or tau-retry")
    made = real_id.read_text().strip()
    extra_jobs.append(made)
    journal = record(run_dir, "submissions/submission-0001/status.json")
    assert (journal["state"], journal["job_id"]) == ("prepared", None), journal

    proc = tau("tau-submit", str(run_dir))  # the real sbatch first on PATH again
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["job_id"], summary["adopted"]) == (made, True), summary
    assert attempt_record(run_dir, "shard-00001")["scheduler"] == {"executor": "slurm", "job_id": made,
                                                                   "task_index": 1}
    observed = tau("tau-observe", str(run_dir))
    assert observed.returncode == 0, observed.stderr


def test_two_queue_rows_for_one_task_hold_back_that_attempt_alone_and_a_row_of_another_job_the_whole_queue(
        cluster, workspace, extra_jobs):
    run_dir, job = two_tasks_running(workspace, sleep=40)
    doubled = fake_command(workspace / "doubled", "squeue",
                           f'out=$(/usr/bin/squeue "$@") || exit $?\nprintf "%s\\n" "$out"\n'
                           f'printf "%s\\n" "$out" | grep "^{job}_1|"\n')
    proc = tau("tau-observe", str(run_dir), env=doubled)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    views = {v["shard_id"]: v for v in doc["attempts"]}
    reason = f"squeue printed 2 rows for {job}_1, where it prints one per task"
    assert doc["sources"] == {"queue": "observed", "accounting": "observed", "reason": reason}, doc["sources"]
    assert views["shard-00001"]["queue"] is None
    assert views["shard-00001"]["sources"] == {"queue": "unavailable", "accounting": "observed", "reason": reason}
    assert views["shard-00000"]["queue"]["state"] == "running" and "sources" not in views["shard-00000"]
    applied = tau("tau-reconcile", str(run_dir), input=proc.stdout)
    assert applied.returncode == 0, applied.stderr
    assert shard(json.loads(applied.stdout), "shard-00000")["state"] == "running"

    stranger = fake_command(workspace / "stranger", "squeue",
                            '/usr/bin/squeue "$@" || exit $?\necho "4000000000_0|RUNNING|None"\n')
    proc = tau("tau-observe", str(run_dir), env=stranger)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["sources"]["queue"] == "unavailable"
    assert "squeue printed a row of job 4000000000, which tau did not ask about" in doc["sources"]["reason"]
    assert all(v["queue"] is None for v in doc["attempts"])
    status = observe_reconcile(run_dir)  # the real squeue again: nothing was lost
    assert {shard(status, s)["state"] for s in ("shard-00000", "shard-00001")} == {"running"}
    run_cmd("scancel", job)
    assert job_id(run_dir) == job
