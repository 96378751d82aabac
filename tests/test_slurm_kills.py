"""taulib.executors.slurm.kills: slurmstepd's words in a task's output name a memory kill or a time limit that sacct
calls FAILED or CANCELLED, and only where accounting agrees the task was killed and the limit is the attempt's own."""

from __future__ import annotations

from taulib.executors.slurm.kills import cause

MIB256 = 256 * 1024 * 1024
OVER = (b"working...\nslurmstepd: error: StepId=41_3.batch exceeded memory limit (768344064 > 268435456), being "
        b"killed\n")


def test_an_over_memory_kill_is_out_of_memory_with_slurmstepds_words():
    found = cause(b"a line of the client\n" + OVER, "failed", MIB256)
    assert found is not None and found.state == "out_of_memory"
    assert found.evidence == ("slurmstepd: error: StepId=41_3.batch exceeded memory limit (768344064 > 268435456), "
                              "being killed")
    assert cause(OVER, "cancelled", None).state == "out_of_memory"  # the request unknown: the line alone


def test_the_line_is_not_believed_where_accounting_says_the_task_completed_or_the_limit_is_not_the_request():
    assert cause(OVER, "completed", MIB256) is None
    assert cause(OVER, "running", MIB256) is None
    assert cause(OVER, "failed", 512 * 1024 * 1024) is None  # a client printing a limit it never ran at
    assert cause(b"slurmstepd: error: StepId=1.batch exceeded memory limit (1 > 268435456), being killed\n",
                 "failed", MIB256) is None  # used below the limit: not a kill for memory
    assert cause(b"  " + OVER.splitlines()[1], "failed", MIB256) is None  # not at the start of a line
    assert cause(b"nothing to see\n", "failed", MIB256) is None


def test_a_cgroup_oom_kill_event_and_a_time_limit_are_named():
    oom = (b"slurmstepd: error: Detected 1 oom_kill event in StepId=41_3.batch. Some of the step tasks have been OOM "
           b"Killed.\n")
    assert cause(oom, "failed", MIB256).state == "out_of_memory"
    assert cause(oom.replace(b"Detected 1", b"Detected 0"), "failed", MIB256) is None
    late = b"slurmstepd: error: *** JOB 41 ON node1 CANCELLED AT 2026-12-06T15:51:13 DUE TO TIME LIMIT ***\n"
    found = cause(late, "cancelled", MIB256)
    assert found.state == "timed_out" and found.evidence == late.decode().strip()
    assert cause(late, "completed", MIB256) is None


def test_slurmstepd_naming_its_node_is_slurmstepd_too():
    real = (b"slurmstepd-localhost: error: StepId=1406.batch exceeded memory limit (801189888 > 536870912), being "
            b"killed\nslurmstepd-localhost: error: *** JOB 1406 ON localhost CANCELLED AT 2026-12-06T20:14:52 ***\n"
            b"slurmstepd-localhost: error: Exceeded job memory limit\n")  # as the test cluster wrote it
    found = cause(real, "failed", 512 * 1024 * 1024)
    assert found is not None and found.state == "out_of_memory"
    assert found.evidence.startswith("slurmstepd-localhost: error: StepId=1406.batch exceeded memory limit")
    assert cause(real.replace(b"slurmstepd-localhost", b"slurmstepd-no such"), "failed", 512 << 20) is None


def test_the_newest_believable_line_counts():
    two = (b"slurmstepd: error: StepId=41_3.batch exceeded memory limit (5 > 4), being killed\n" + OVER)
    assert cause(two, "failed", MIB256).evidence.endswith("(768344064 > 268435456), being killed")
