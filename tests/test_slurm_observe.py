"""taulib.executors.slurm.observe and taulib.executors.slurm.commands on recorded Slurm output: what one cycle
learns per attempt when squeue or sacct print what tau-slurm(7) says they never print (the cases the real
cluster cannot be made to give: the real cluster's own are in tests/integration/test_slurm_failures.py).

`squeue` and `sacct` here are executables first on PATH that print a recorded stdout and stderr and exit with a
recorded code, as the real commands do.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from taulib.errors import Ambiguous, BadInput, Unavailable
from taulib.executors.slurm import commands, observe

HUGE = "9" * 5000


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """`say(command, stdout, stderr="", rc=0)` records what `command` prints next."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()

    def say(command: str, stdout: str, stderr: str = "", rc: int = 0) -> None:
        (bin_dir / f"{command}.out").write_text(stdout)
        (bin_dir / f"{command}.err").write_text(stderr)
        script = bin_dir / command
        script.write_text(f"#!/bin/sh\ncat '{bin_dir}/{command}.out'\ncat '{bin_dir}/{command}.err' >&2\nexit {rc}\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)

    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return say


def attempt(shard: int, job: str, task: int) -> dict:
    return {"shard_id": f"shard-{shard:05d}", "attempt_id": "attempt-0001",
            "scheduler": {"executor": "slurm", "job_id": job, "task_index": task}}


THREE = [attempt(0, "7", 0), attempt(1, "7", 1), attempt(2, "7", 2)]
SACCT_OK = "7_0|7|x|RUNNING|0:0|2026-12-05T09:00:00|2026-12-05T09:00:01|Unknown\n"


def test_an_unknown_state_in_the_queue_is_that_tasks_problem_and_the_others_evidence_still_counts(recorded):
    recorded("squeue", "7_0|RUNNING|None\n7_1|ZOMBIE|None\n7_2|PENDING|Priority\n")
    recorded("sacct", SACCT_OK)
    views, sources = observe.observe(THREE)
    assert (sources["queue"], sources["accounting"]) == ("observed", "observed")
    assert sources["reason"] == "squeue reports state 'ZOMBIE' for 7_1, which tau does not know"
    by_shard = {v["shard_id"]: v for v in views}
    assert by_shard["shard-00000"]["queue"]["state"] == "running" and "sources" not in by_shard["shard-00000"]
    assert by_shard["shard-00002"]["queue"]["state"] == "pending" and "sources" not in by_shard["shard-00002"]
    odd = by_shard["shard-00001"]
    assert odd["queue"] is None
    assert odd["sources"] == {"queue": "unavailable", "accounting": "observed",
                              "reason": "squeue reports state 'ZOMBIE' for 7_1, which tau does not know"}


def test_a_pending_tasks_queue_reason_is_squeues_reason_code_alone(recorded):
    four = [*THREE, attempt(3, "7", 3), attempt(4, "7", 4)]
    recorded("squeue", "7_0|PENDING|Resources\n7_1|PENDING|None\n7_2|REQUEUE_HOLD|JobHeldUser\n"
             "7_3|CONFIGURING|None\n7_4|RUNNING|None\n")
    recorded("sacct", "7_1|7|x|PENDING|0:0|2026-12-05T09:00:00|Unknown|Unknown\n")
    views, _ = observe.observe(four)
    queue = {v["shard_id"]: v["queue"] for v in views}
    assert queue["shard-00000"] == {"state": "pending", "raw": "PENDING", "exit_code": None, "reason": "Resources"}
    assert queue["shard-00001"]["reason"] is None  # squeue's "None": no reason, never the word
    assert queue["shard-00002"]["reason"] == "JobHeldUser"
    assert queue["shard-00003"]["reason"] == "CONFIGURING"  # no code: the state, which says more than "pending"
    assert queue["shard-00004"]["reason"] == "RUNNING"  # only a pending row's reason is its code alone
    assert views[1]["accounting"]["reason"] == "PENDING"  # accounting's view is as it was


def test_two_queue_rows_for_one_task_make_that_task_unavailable_never_the_last_row_winning(recorded):
    recorded("squeue", "7_0|RUNNING|None\n7_1|RUNNING|None\n7_1|COMPLETING|None\n")
    recorded("sacct", SACCT_OK)
    views, sources = observe.observe(THREE)
    odd = next(v for v in views if v["shard_id"] == "shard-00001")
    assert odd["queue"] is None and odd["sources"]["queue"] == "unavailable"
    assert odd["sources"]["reason"] == "squeue printed 2 rows for 7_1, where it prints one per task"
    assert next(v for v in views if v["shard_id"] == "shard-00000")["queue"]["state"] == "running"


def test_an_unknown_accounting_state_is_that_tasks_problem(recorded):
    recorded("squeue", "")
    recorded("sacct", SACCT_OK + "7_1|8|x|CANCELLED by root|0:0|a|b|c\n")
    views, sources = observe.observe(THREE)
    assert sources["accounting"] == "observed"
    odd = next(v for v in views if v["shard_id"] == "shard-00001")
    assert odd["accounting"] is None
    assert odd["sources"] == {"queue": "observed", "accounting": "unavailable",
                              "reason": "sacct reports state 'CANCELLED by root' for 7_1, which tau does not know"}
    assert next(v for v in views if v["shard_id"] == "shard-00000")["accounting"]["state"] == "running"


@pytest.mark.parametrize("command, stdout, reason", [
    ("squeue", "7_0|RUNNING|None\n8_0|RUNNING|None\n", "squeue printed a row of job 8, which tau did not ask about"),
    ("sacct", SACCT_OK + "8_0|8|x|COMPLETED|0:0|a|b|c\n", "sacct printed a row of job 8, which tau did not ask about"),
    ("squeue", f"7_{HUGE}|RUNNING|None\n", "unexpected job id"),
    ("sacct", f"7_0|7|x|FAILED|{HUGE}:0|a|b|c\n", "unexpected ExitCode"),
    ("sacct", f"7_{HUGE}|7|x|FAILED|1:0|a|b|c\n", "unexpected job id"),
], ids=["squeue-unasked", "sacct-unasked", "squeue-huge-task", "sacct-huge-exit", "sacct-huge-task"])
def test_output_that_answers_another_question_or_has_unbounded_numbers_makes_the_source_unavailable(
        recorded, command, stdout, reason):
    recorded("squeue", "7_0|RUNNING|None\n")
    recorded("sacct", SACCT_OK)
    recorded(command, stdout)
    views, sources = observe.observe(THREE)
    source = "queue" if command == "squeue" else "accounting"
    other = "accounting" if command == "squeue" else "queue"
    assert (sources[source], sources[other]) == ("unavailable", "observed")
    assert reason in sources["reason"] and len(sources["reason"]) < 600
    assert all(v[source] is None for v in views)  # nothing learned, and absence is not concluded from it


def test_squeue_leaving_the_queue_is_only_its_exact_message(recorded):
    recorded("squeue", "", "slurm_load_jobs error: Invalid job id specified\n", rc=1)
    assert commands.squeue(["7"]) == []
    for similar in ("slurm_load_jobs error: Invalid job id specified for user 1000",
                    "squeue: error: Invalid job id specified in --jobs",
                    "error: Invalid job id specified\nslurm_load_jobs error: Unable to contact slurm controller"):
        recorded("squeue", "", similar, rc=1)
        with pytest.raises(Unavailable, match="squeue failed"):
            commands.squeue(["7"])


def test_scancel_forgives_only_jobs_it_says_exactly_are_gone(recorded):
    recorded("scancel", "", "scancel: error: Kill job error on job id 7_1: Invalid job id specified\n", rc=1)
    commands.scancel(["7_1"])
    recorded("scancel", "", "scancel: error: Kill job error on job id 7_1: Invalid job id specified\n"
             "scancel: error: Kill job error on job id 8: Access/permission denied\n", rc=1)
    with pytest.raises(Unavailable, match="permission denied"):
        commands.scancel(["7_1", "8"])
    recorded("scancel", "", "scancel: error: Invalid job id specified? maybe\n", rc=1)
    with pytest.raises(Unavailable):
        commands.scancel(["7_1"])


@pytest.mark.parametrize("stdout", ["0\n", f"{HUGE}\n", "4294967296\n", "00042\n"],
                         ids=["zero", "5000-digits", "beyond-32-bits", "leading-zeros"])
def test_sbatch_printing_no_valid_job_id_is_ambiguous_never_a_job(recorded, tmp_path, stdout):
    recorded("sbatch", stdout)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(Ambiguous) as caught:
        commands.sbatch(str(script))
    assert "not a job id" in caught.value.message and "may still have submitted the job" in caught.value.message
    assert len(caught.value.message) < 600


def test_a_recorded_job_id_that_is_not_a_slurm_job_id_is_refused_naming_the_record(recorded):
    recorded("squeue", "")
    recorded("sacct", "")
    with pytest.raises(BadInput) as caught:
        observe.observe([attempt(0, "7", 0), attempt(3, HUGE, 0)])
    assert caught.value.code == 65
    assert caught.value.message.startswith(
        "shards/shard-00003/attempts/attempt-0001/attempt.json records Slurm job id '999")
    assert caught.value.message.endswith("(5000 characters)', which is not a Slurm job id")


def test_the_recorded_commands_are_the_ones_run(recorded):
    recorded("squeue", "7_0|RUNNING|None\n")
    assert Path(os.environ["PATH"].split(os.pathsep)[0], "squeue").exists()
    assert [r.state for r in commands.squeue(["7"])] == ["running"]


def test_an_ambiguous_sbatch_reply_names_the_command_that_resolves_it(recorded, tmp_path):
    recorded("sbatch", "0\n")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(Ambiguous) as submit:
        commands.sbatch(str(script))
    assert submit.value.message.endswith("tau resolves it by its exact name on the next tau-submit or tau-retry")
    recorded("sbatch", "", "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
             rc=1)
    with pytest.raises(Ambiguous) as collect:
        commands.sbatch(str(script), pinned=True, resolved_by="tau-collect")
    assert collect.value.message.endswith("tau resolves it by its exact name on the next tau-collect")


@pytest.mark.parametrize("job, task", [("7", "²"), ("7", "9" * 5000), ("0", "1"), ("7", "01"), ("7", "[1-3]")],
                         ids=["superscript", "5000-digits", "job-0", "leading-zero", "a-range"])
def test_an_allocation_whose_array_variables_are_no_slurm_ids_is_refused_not_an_integer_error(job, task):
    from taulib.errors import Refused
    from taulib.executors.slurm.executor import Slurm

    environ = {"SLURM_JOB_ID": "8", "SLURM_ARRAY_JOB_ID": job, "SLURM_ARRAY_TASK_ID": task}
    with pytest.raises(Refused, match="are not a Slurm job id and array task index"):
        Slurm().identity(environ)
    assert Slurm().identity(dict(environ, SLURM_ARRAY_JOB_ID="7", SLURM_ARRAY_TASK_ID="3")) == {
        "executor": "slurm", "job_id": "7", "task_index": 3}
