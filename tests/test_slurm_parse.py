"""taulib.executors.slurm.parse: fixture pairs of real Slurm 22.05 text output and the rows tau reads from them.

Accept an intended change with: TAU_ACCEPT_GOLDEN=1 .venv/bin/python -m pytest tests/test_slurm_parse.py
"""

import json
import os
from pathlib import Path

import pytest

from taulib.executors.slurm import parse

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm"


def rows_json(rows) -> list[dict]:
    return [row._asdict() for row in rows]


def check_fixture(name: str, value) -> None:
    path = FIXTURES / f"{name}.json"
    if os.environ.get("TAU_ACCEPT_GOLDEN") == "1":
        path.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n")
    assert json.loads(path.read_text()) == value, f"{name} differs from its fixture (TAU_ACCEPT_GOLDEN=1 accepts)"


def test_squeue_rows_expand_unsplit_arrays_and_keep_plain_jobs():
    rows = parse.squeue((FIXTURES / "squeue-arrays.txt").read_text())
    check_fixture("squeue-arrays", rows_json(rows))
    assert [(r.job_id, r.task) for r in rows if r.job_id == "2"] == [("2", 1), ("2", 3), ("2", 7)]
    assert [r.task for r in rows if r.job_id == "11"] == list(range(10))
    assert next(r for r in rows if r.job_id == "12") .task is None


def test_sacct_drops_the_placeholders_written_during_accounting_lag():
    rows = parse.sacct((FIXTURES / "sacct-placeholders.txt").read_text(), arrays={"1", "2", "3"})
    check_fixture("sacct-placeholders", rows_json(rows))
    assert [(r.job_id, r.task, r.state) for r in rows] == [("3", 0, "completed")]


def test_sacct_duplicates_give_each_task_its_newest_row_and_a_restart_count():
    rows = parse.sacct((FIXTURES / "sacct-requeue-preempt.txt").read_text(), arrays={"12", "13"})
    latest = parse.latest_by_task(rows)
    check_fixture("sacct-requeue-preempt", {f"{k[0]}_{k[1]}": [v[0]._asdict(), v[1]] for k, v in latest.items()})
    assert latest[("12", 0)][0].state == "completed" and latest[("12", 0)][1] == 1
    assert latest[("13", 0)][0].state == "completed" and latest[("13", 0)][1] == 1
    assert latest[("13", 1)][1] == 0


def test_only_an_earlier_requeued_preempted_or_node_failed_row_counts_as_a_restart():
    started = "123_2|123|x|RUNNING|0:0|2026-12-05T09:00:00|2026-12-05T09:00:05|Unknown\n"
    remainder = "123_[2-5]|123|x|PENDING|0:0|2026-12-05T09:00:00|Unknown|Unknown\n"  # the array's unsplit rest
    latest = parse.latest_by_task(parse.sacct(remainder + started, arrays={"123"}))
    assert (latest[("123", 2)][0].state, latest[("123", 2)][1]) == ("running", 0)  # no run of task 2 came before
    assert [latest[("123", t)][1] for t in (3, 4, 5)] == [0, 0, 0]
    pending_again = "123_2|123|x|PENDING|0:0|2026-12-05T09:00:05|Unknown|Unknown\n"  # not a run: no restart
    assert parse.latest_by_task(parse.sacct(remainder + pending_again, arrays={"123"}))[("123", 2)][1] == 0
    for state in ("REQUEUED", "PREEMPTED", "NODE_FAIL"):
        earlier = f"123_2|123|x|{state}|0:0|2026-12-05T08:59:00|2026-12-05T08:59:01|2026-12-05T08:59:59\n"
        latest = parse.latest_by_task(parse.sacct(remainder + earlier + started, arrays={"123"}))
        assert (latest[("123", 2)][0].state, latest[("123", 2)][1]) == ("running", 1), state


def test_sacct_terminal_states_exit_codes_signals_and_unknown_spellings():
    rows = parse.sacct((FIXTURES / "sacct-terminal-states.txt").read_text(), arrays={"9", "10"})
    check_fixture("sacct-terminal-states", rows_json(rows))
    by_task = {(r.job_id, r.task): r for r in rows}
    assert (by_task["9", 0].state, by_task["9", 0].exit_code) == ("failed", 3)
    assert by_task["9", 1].state == "timed_out"
    assert by_task["9", 2].state == "cancelled" and by_task["9", 2].raw == "CANCELLED by 0"
    assert (by_task["9", 3].state, by_task["9", 3].signal) == ("failed", 9)
    assert by_task["9", 4].state == "out_of_memory"
    assert by_task["9", 5].state == "node_failed"
    assert by_task["9", 6].state == "unknown"  # never guessed: observation reports the source unavailable
    assert sorted(t for (j, t) in by_task if j == "10") == [2, 9, 10, 11]


@pytest.mark.parametrize("text, message", [
    ("1_0|RUNNING\n", "fields"),
    ("abc|RUNNING|None\n", "job id"),
    ("1_[3-1]|PENDING|None\n", "range"),
])
def test_squeue_output_of_another_shape_is_refused_not_guessed(text, message):
    with pytest.raises(parse.ParseError, match=message):
        parse.squeue(text)


HUGE = "9" * 5000  # beyond Python's 4,300-digit limit of int(): converted unbounded, it would raise ValueError


@pytest.mark.parametrize("text, message", [
    (f"1_{HUGE}|RUNNING|None\n", "job id"),
    (f"{HUGE}_1|RUNNING|None\n", "job id"),
    ("4294967296_1|RUNNING|None\n", "job id"),  # beyond Slurm's 32-bit job ids
    ("0_1|RUNNING|None\n", "job id"),
    ("012_1|RUNNING|None\n", "job id"),
    ("1_4000001|RUNNING|None\n", "beyond Slurm's largest"),
    ("1_007|RUNNING|None\n", "job id"),
    (f"1_[0-{HUGE}]|PENDING|None\n", "array spec element"),
    ("1_[0-4000001]|PENDING|None\n", "beyond Slurm's largest"),
    ("1_[0-3,2-5]|PENDING|None\n", "never overlap"),
    (f"1_[0-3%{HUGE}]|PENDING|None\n", "throttle"),
], ids=lambda value: value if len(value) < 40 else f"{value[:20]}...")
def test_squeue_numbers_are_bounded_before_they_are_converted(text, message):
    with pytest.raises(parse.ParseError, match=message) as caught:
        parse.squeue(text)
    assert len(str(caught.value)) < 400  # a 5,000-digit number is named, not quoted whole


@pytest.mark.parametrize("exit_text", [f"{HUGE}:0", f"0:{HUGE}", "256:0", "0:256", "-1:0", "01:0", "1", "1:2:3"],
                         ids=lambda value: value if len(value) < 40 else f"{value[:20]}...")
def test_sacct_exit_codes_and_signals_are_bounded_to_0_255(exit_text):
    with pytest.raises(parse.ParseError, match="ExitCode"):
        parse.sacct(f"9_0|9|x|FAILED|{exit_text}|a|b|c\n")
    assert parse.sacct("9_0|9|x|FAILED|255:255|a|b|c\n")[0][4:6] == (255, 255)


def test_a_row_of_a_job_that_was_not_asked_about_is_refused_by_squeue_and_sacct():
    assert [r.job_id for r in parse.squeue("7_0|RUNNING|None\n", asked={"7"})] == ["7"]
    with pytest.raises(parse.ParseError, match="row of job 8, which tau did not ask about"):
        parse.squeue("7_0|RUNNING|None\n8_0|RUNNING|None\n", asked={"7"})
    with pytest.raises(parse.ParseError, match="row of job 8, which tau did not ask about"):
        parse.sacct("8_0|8|x|COMPLETED|0:0|a|b|c\n", arrays={"7"}, asked={"7"})
    with pytest.raises(parse.ParseError, match="row of job 8"):  # a placeholder row of another job too
        parse.sacct("8|8|allocation|PENDING|0:0|a|b|c\n", arrays={"7"}, asked={"7"})


def test_two_queue_rows_for_one_task_or_an_unknown_state_make_that_task_alone_unreadable():
    rows = parse.squeue("7_0|RUNNING|None\n7_1|PENDING|None\n7_1|RUNNING|None\n7_2|WEIRD|None\n", asked={"7"})
    found, problems = parse.queue_by_task(rows)
    assert sorted(found) == [("7", 0)]
    assert problems == {("7", 1): "squeue printed 2 rows for 7_1, where it prints one per task",
                        ("7", 2): "squeue reports state 'WEIRD' for 7_2, which tau does not know"}


def test_an_unknown_state_in_accounting_makes_that_task_alone_unreadable():
    rows = parse.sacct("7_0|7|x|COMPLETED|0:0|a|b|c\n7_1|8|x|CANCELLED by root|0:0|a|b|c\n"
                       "7_2|9|x|REQUEUED|0:0|1|b|c\n7_2|9|x|BRAND_NEW|0:0|2|b|c\n", arrays={"7"})
    latest, problems = parse.accounting_by_task(rows)
    assert sorted(latest) == [("7", 0)]
    assert problems == {("7", 1): "sacct reports state 'CANCELLED by root' for 7_1, which tau does not know",
                        ("7", 2): "sacct reports state 'BRAND_NEW' for 7_2, which tau does not know"}


@pytest.mark.parametrize("text", [f"00:{HUGE}", f"{HUGE}-00:00:00", "1:2:3:4"],
                         ids=lambda value: value if len(value) < 40 else f"{value[:20]}...")
def test_durations_are_bounded(text):
    with pytest.raises(parse.ParseError, match="duration"):
        parse.clock_seconds(text)


@pytest.mark.parametrize("text", [f"{HUGE}K", f"1.{HUGE}G", "12X"],
                         ids=lambda value: value if len(value) < 40 else f"{value[:20]}...")
def test_sizes_are_bounded(text):
    with pytest.raises(parse.ParseError, match="size"):
        parse.size_bytes(text)


def test_a_step_row_in_sacct_output_is_refused():
    with pytest.raises(parse.ParseError, match="step row"):
        parse.sacct("9.batch|9.batch|batch|FAILED|3:0|a|b|c\n")


@pytest.mark.parametrize("raw, state", [
    ("RUNNING", "running"), ("COMPLETING", "running"), ("PENDING", "pending"), ("REQUEUE_HOLD", "pending"),
    ("CANCELLED+", "cancelled"), ("CANCELLED by 64030", "cancelled"), ("CANCELLED by root", "unknown"),
    ("CANCELLED by", "unknown"), ("CANCELLED_BY 0", "unknown"), ("CANCELLEDX", "unknown"), ("PREEMPTED", "preempted"),
    ("REQUEUED", "requeued"), ("BOOT_FAIL", "failed"), ("DEADLINE", "failed"), ("SOMETHING_NEW", "unknown"),
])
def test_state_spellings_map_to_taus_vocabulary(raw, state):
    assert parse.normalise_state(raw) == state


@pytest.mark.parametrize("stdout, job", [("42\n", "42"), ("42;cluster1\n", "42"), ("4294967295\n", "4294967295")])
def test_sbatch_parsable_output_gives_the_job_id(stdout, job):
    assert parse.sbatch_job_id(stdout) == job


@pytest.mark.parametrize("stdout", ["", "Submitted batch job 42", "42 43", "sbatch: error", "0", "0;cluster1",
                                    "042", "4294967296", "9" * 5000, f"42;{'c' * 200}"],
                         ids=lambda value: value if len(value) < 40 else f"{value[:20]}...")
def test_sbatch_output_that_is_not_a_job_id_is_an_error(stdout):
    with pytest.raises(parse.ParseError):
        parse.sbatch_job_id(stdout)


def test_array_indices_compress_and_expand_back():
    indices = [0, 1, 2, 5, 7, 8, 9, 20]
    assert parse.compress_indices(indices) == "0-2,5,7-9,20"
    assert parse.expand_array_spec(parse.compress_indices(indices)) == indices
    with pytest.raises(ValueError):
        parse.compress_indices([])


def test_name_rows_read_the_submit_time_for_exact_name_recovery():
    rows = parse.name_rows("70_[0-3]|tau-run-6b6321b5-0001|2026-11-29T17:00:03\n"
                           "122_1|tau-run-6b6321b5-0001|2026-11-29T17:05:10\n", 3)
    assert rows == [("70", [0, 1, 2, 3], "tau-run-6b6321b5-0001", "2026-11-29T17:00:03"),
                    ("122", [1], "tau-run-6b6321b5-0001", "2026-11-29T17:05:10")]


@pytest.mark.parametrize("submit, since, before", [
    ("2026-11-29T17:00:03", "2026-11-29T17:04:00", True),
    ("2026-11-29T17:05:10", "2026-11-29T17:04:00", False),
    ("Unknown", "2026-11-29T17:04:00", False),  # a time tau cannot read never rules a job out
    ("", "2026-11-29T17:04:00", False),
])
def test_a_job_submitted_before_the_journal_is_not_the_journals_job(submit, since, before):
    assert parse.submitted_before(submit, since) is before


USAGE = """\
77_0|COMPLETED|2026-12-04T18:40:01|00:01:05|00:58.250||2|1G|billing=2,cpu=2,gres/gpu=1,mem=1G,node=1|00:10:00|1
77_0.batch|COMPLETED|2026-12-04T18:40:01|00:01:05|00:58.250|314572K|2||cpu=2,gres/gpu=1,mem=1G,node=1||1
77_0.extern|COMPLETED|2026-12-04T18:40:01|00:01:05|00:00:00|1024K|2||billing=2,cpu=2,mem=1G,node=1||1
77_1|OUT_OF_MEMORY|2026-12-04T18:40:01|1-02:03:04|01:02:03||1|512Mc|billing=1,cpu=1,node=1|UNLIMITED|1
77_1.batch|OUT_OF_MEMORY|2026-12-04T18:40:01|1-02:03:04|01:02:03|1.50G|1||cpu=1,node=1||1
77_2|RUNNING|2026-12-04T18:40:01|00:00:09|00:00:00||1|0|billing=1,cpu=1,node=1|Partition_Limit|1
77_2.batch|RUNNING|2026-12-04T18:40:01|00:00:09|00:00:00||1||cpu=1,node=1||1
77_3|COMPLETED|2026-12-04T18:40:01|00:00:02|00:00.100||1|100M|billing=1,cpu=1,node=1|00:05:00|1
77_4|CANCELLED by 0|None|00:00:00|00:00:00||0|100M||00:05:00|1
77_[5-9]|PENDING|Unknown|00:00:00|00:00:00||0|100M||00:05:00|1
78_[0-2]|CANCELLED by 0|None|00:00:00|00:00:00||0|100M||00:05:00|1
"""


def test_sacct_usage_gives_final_figures_of_finished_tasks_only():
    found = parse.usage(USAGE)
    # 2 runs; 3's batch step is not accounted yet; 5-9 wait; 78's tasks were cancelled before any was split off
    assert set(found) == {("77", 0), ("77", 1), ("77", 4), ("78", 0), ("78", 1), ("78", 2)}
    assert found[("78", 2)] == dict(found[("77", 4)], state="CANCELLED by 0")
    assert found[("77", 0)] == {
        "state": "COMPLETED", "elapsed_seconds": 65.0, "cpu_seconds": 58.25, "max_rss_bytes": 314572 * 1024,
        "cpus": 2, "gpus": 1, "mem_requested_bytes": 1024 ** 3, "time_limit_seconds": 600.0}
    oom = found[("77", 1)]
    assert (oom["state"], oom["elapsed_seconds"], oom["cpu_seconds"]) == ("OUT_OF_MEMORY", 93784.0, 3723.0)
    assert (oom["max_rss_bytes"], oom["mem_requested_bytes"], oom["time_limit_seconds"]) == (
        round(1.5 * 1024 ** 3), 512 * 1024 ** 2, None)  # 512M a CPU, one CPU; unlimited
    never = found[("77", 4)]  # cancelled while pending: it used nothing, and had no peak to measure
    assert (never["elapsed_seconds"], never["cpu_seconds"], never["max_rss_bytes"], never["cpus"]) == (0, 0, None, 0)


@pytest.mark.parametrize(("row", "message"), [
    ("77_0|COMPLETED|x|00:01:05|00:58.250||2|1G|cpu=2|00:10:00", "has 10 fields, expected 11"),
    ("77_0|COMPLETED|x|1h|00:58.250||2|1G|cpu=2|00:10:00|1", "unexpected duration '1h'"),
    ("77_0|COMPLETED|None|00:01:05|00:58.250||two|1G|cpu=2|00:10:00|1", "unexpected AllocCPUS"),
    ("77_0|COMPLETED|None|00:01:05|00:58.250||2|1GB|cpu=2|00:10:00|1", "unexpected size '1GB'"),
    ("77_0|COMPLETED|None|00:01:05|00:58.250||2|1G|gres/gpu=two|00:10:00|1", "unexpected GPU count"),
    ("77_x|COMPLETED|None|00:01:05|00:58.250||2|1G|cpu=2|00:10:00|1", "unexpected job id"),
])
def test_sacct_usage_of_another_shape_is_refused_not_guessed(row, message):
    with pytest.raises(parse.ParseError, match=message):
        parse.usage(row + "\n")


def test_gpus_come_from_the_untyped_total_or_the_typed_ones_summed():
    assert parse.gpus("cpu=4,gres/gpu=2,gres/gpu:a100=2,node=1") == 2
    assert parse.gpus("cpu=4,gres/gpu:a100=2,gres/gpu:v100=1") == 3
    assert parse.gpus("") == 0
