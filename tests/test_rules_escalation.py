"""taulib.rules.escalation: memory that doubles after an out-of-memory end, time that grows after a timeout, caps
that hold, and Slurm's own spellings read and written."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taulib.rules.escalation import (Next, ended_as, format_mem, format_time, limit_seconds, measured_cause, mem_mib,
                                     next_attempt, next_request, time_seconds)

ESCALATE = {"mem": 2, "time": 1.5, "max_mem": "16G", "max_time": "1-00:00:00"}


def test_memory_is_read_in_slurms_units_and_written_in_the_largest_that_divides_it():
    assert [mem_mib(t) for t in ("4096", "512M", "4G", "1T", "2048K")] == [4096, 512, 4096, 1024 * 1024, 2]
    assert [format_mem(m) for m in (4096, 512, 1536, 1024 * 1024, 0.5)] == ["4G", "512M", "1536M", "1T", "1M"]
    with pytest.raises(ValueError, match="not a memory size"):
        mem_mib("4GB")


def test_time_is_read_in_every_spelling_slurm_takes_and_written_back_rounded_up():
    assert [time_seconds(t) for t in ("10", "10:30", "1:00:00", "2-3", "2-3:04", "2-3:04:05")] == [
        600, 630, 3600, 2 * 86400 + 3 * 3600, 2 * 86400 + 3 * 3600 + 240, 2 * 86400 + 3 * 3600 + 245]
    assert [format_time(s) for s in (600, 3600.2, 86400 * 2 + 61)] == ["00:10:00", "01:00:01", "2-00:01:01"]
    with pytest.raises(ValueError, match="not a time limit"):
        time_seconds("1h")


@given(st.integers(0, 30 * 86400))
def test_a_written_time_reads_back_as_the_same_seconds(seconds):
    assert time_seconds(format_time(seconds)) == seconds


def test_out_of_memory_grows_memory_and_a_timeout_grows_time_and_nothing_else_grows_anything():
    asked = {"mem": "4G", "time": "1:00:00"}
    assert next_request(asked, "out_of_memory", ESCALATE) == {"mem": "8G", "time": "1:00:00"}
    assert next_request(asked, "timed_out", ESCALATE) == {"mem": "4G", "time": "01:30:00"}
    for other in ("failed", "cancelled", "node_failed", "completed_unfinalised", None):
        assert next_request(asked, other, ESCALATE) == asked
    assert next_request(asked, "out_of_memory", None) == asked
    assert next_request(asked, "out_of_memory", {"time": 2}) == asked  # memory not asked to grow


def test_a_grown_request_never_passes_its_cap_and_an_unset_request_is_never_invented():
    assert next_request({"mem": "12G", "time": None}, "out_of_memory", ESCALATE) == {"mem": "16G", "time": None}
    assert next_request({"mem": "16G", "time": None}, "out_of_memory", ESCALATE) == {"mem": "16G", "time": None}
    assert next_request({"mem": None, "time": "20:00:00"}, "timed_out", ESCALATE) == {"mem": None,
                                                                                      "time": "1-00:00:00"}
    assert next_request({"mem": None, "time": None}, "out_of_memory", ESCALATE) == {"mem": None, "time": None}


def test_a_time_limit_is_seconds_or_slurms_spelling():
    assert [limit_seconds(v) for v in (None, 90, "1:30", "1-0")] == [None, 90, 90, 86400]
    with pytest.raises(ValueError, match="not a time limit"):
        limit_seconds("90s")


def test_the_scheduler_saying_memory_or_time_ran_out_outweighs_what_the_killed_attempt_recorded():
    assert ended_as("failed", "out_of_memory") == "out_of_memory"
    assert ended_as("cancelled", "timed_out") == "timed_out"  # SIGTERM at the limit: the attempt saw a stop
    assert ended_as("failed", "failed") == "failed"
    assert ended_as("failed", "node_failed") == "failed"  # only memory and time grow anything
    assert ended_as("out_of_memory", None) == "out_of_memory"
    assert ended_as(None, None) is None


def test_a_peak_measured_above_the_request_of_an_attempt_that_did_not_complete_is_out_of_memory():
    killed = {"state": "FAILED", "max_rss_bytes": 320 << 20, "mem_requested_bytes": 256 << 20}
    assert ended_as("failed", "failed", killed) == "out_of_memory"  # OverMemoryKill: FAILED by SIGKILL
    assert ended_as("failed", "failed", dict(killed, state="COMPLETED")) == "failed"
    assert ended_as("failed", "failed", dict(killed, max_rss_bytes=200 << 20)) == "failed"
    assert ended_as("failed", "failed", dict(killed, mem_requested_bytes=None)) == "failed"
    assert ended_as("failed", "failed", dict(killed, max_rss_bytes=None)) == "failed"
    assert ended_as("failed", "timed_out", killed) == "timed_out"  # the scheduler's own word first


def test_time_grows_only_when_a_time_factor_other_than_1_is_given_and_without_a_cap_grows_freely():
    asked = {"mem": "4G", "time": "1:00:00"}
    assert next_request(asked, "timed_out", {"mem": 2}) == asked  # time not asked to grow
    assert next_request(asked, "timed_out", {"time": 1}) == asked  # a factor of 1: kept as it was spelt
    assert next_request(asked, "timed_out", {"time": 2}) == {"mem": "4G", "time": "02:00:00"}
    assert next_request({"mem": None, "time": "20:00:00"}, "timed_out", {"time": 2}) == {
        "mem": None, "time": "1-16:00:00"}  # no max_time


def test_memory_without_a_cap_grows_freely_and_a_factor_of_1_keeps_it_as_spelt():
    assert next_request({"mem": "12G", "time": None}, "out_of_memory", {"mem": 2}) == {"mem": "24G", "time": None}
    assert next_request({"mem": "4096", "time": None}, "out_of_memory", {"mem": 1}) == {"mem": "4096", "time": None}


def test_a_peak_equal_to_the_request_is_not_over_it():
    at = {"state": "FAILED", "max_rss_bytes": 256 << 20, "mem_requested_bytes": 256 << 20}
    assert ended_as("failed", "failed", at) == "failed"
    assert ended_as("failed", "failed", dict(at, max_rss_bytes=(256 << 20) + 1)) == "out_of_memory"


def test_a_request_at_its_cap_is_kept_as_it_was_spelt():
    assert next_request({"mem": "2048M", "time": None}, "out_of_memory", {"mem": 2, "max_mem": "2G"})["mem"] == "2048M"


def test_a_request_granted_past_the_cap_never_shrinks_after_a_kill():
    assert next_request({"mem": "32G", "time": "2-00:00:00"}, "out_of_memory", ESCALATE)["mem"] == "32G"
    assert next_request({"mem": "32G", "time": "2-00:00:00"}, "timed_out", ESCALATE)["time"] == "2-00:00:00"


GROW = {"mem": 2, "max_mem": "2G", "time": 2, "max_time": "4:00:00"}
ASKED = {"mem": "256M", "time": "1:00:00"}


def decide(previous=ASKED, ended="failed", escalate=GROW, killed=False, measured=False, now=1000.0):
    return next_attempt(previous, ended, escalate, killed, measured, ended_at=900.0, window=300.0, now=now)


def test_a_memory_kill_asks_for_more_at_once_whether_or_not_its_usage_arrived():
    for measured in (False, True):
        assert decide(ended="out_of_memory", killed=True, measured=measured) == Next(
            "submit", {"mem": "512M", "time": "1:00:00"})
    assert decide({"mem": "1G", "time": None}, "out_of_memory").request == {"mem": "2G", "time": None}
    assert decide(ended="timed_out") == Next("submit", {"mem": "256M", "time": "02:00:00"})


def test_a_kill_at_the_cap_is_exhausted_with_the_cap_named_and_a_grant_named():
    at_cap = decide({"mem": "2G", "time": None}, "out_of_memory")
    assert at_cap.action == "exhausted" and at_cap.request == {"mem": "2G", "time": None}
    assert at_cap.reason == ("ran out of memory asking for 2G, the cap (retry.escalate.max_mem): a retry would ask "
                             "the same; tau-retry --shard S --mem SIZE grants more")
    past = decide({"mem": "4G", "time": None}, "out_of_memory")  # granted past the cap
    assert past.action == "exhausted" and past.request["mem"] == "4G"
    slow = decide({"mem": None, "time": "4:00:00"}, "timed_out")
    assert slow.action == "exhausted" and "the cap (retry.escalate.max_time)" in slow.reason
    assert "--time LIMIT" in slow.reason
    # without a factor nothing grows, and nothing is called futile
    assert decide({"mem": "2G", "time": None}, "out_of_memory", {"time": 2}).action == "submit"
    assert decide({"mem": None, "time": None}, "out_of_memory").action == "submit"


def test_a_kill_without_a_cause_waits_for_its_measure_within_the_window_only():
    wait = decide(killed=True)
    assert wait.action == "wait" and wait.request == ASKED and wait.until == 1200.0
    assert "not retried with the same 256M" in wait.reason
    assert decide(killed=True, now=1199.9).action == "wait"
    assert decide(killed=True, now=1200.0) == Next("submit", ASKED)  # the window passed: the same request
    assert decide(killed=True, measured=True) == Next("submit", ASKED)  # measured, and not a memory kill
    assert decide(killed=False) == Next("submit", ASKED)  # the client exited by itself
    for ended in ("cancelled", "node_failed", "preempted", "fenced"):
        assert decide(ended=ended, killed=True).action == "submit"
    assert decide(killed=True, escalate={"time": 2}).action == "submit"  # memory never grows: nothing to learn
    assert decide(killed=True, escalate={"mem": 1}).action == "submit"
    assert decide(killed=True, escalate=None).action == "submit"
    assert decide({"mem": None, "time": "1:00:00"}, killed=True).action == "submit"


def test_the_executors_accounting_names_the_end_of_an_attempt_that_ended_itself():
    figures = {"state": "OUT_OF_MEMORY", "max_rss_bytes": 300 << 20, "mem_requested_bytes": 1 << 30}
    assert ended_as("failed", None, figures) == "out_of_memory"
    assert ended_as("failed", None, dict(figures, state="TIMEOUT")) == "timed_out"
    assert ended_as("failed", "out_of_memory", dict(figures, state="TIMEOUT")) == "out_of_memory"  # the scheduler first
    assert measured_cause("out_of_memory", "failed", None, figures) == (
        "out of memory: the executor's accounting says OUT_OF_MEMORY, peak 300.0 MiB of the 1024.0 MiB asked")
    assert measured_cause("out_of_memory", "failed", None, dict(figures, max_rss_bytes=None)) == (
        "out of memory: the executor's accounting says OUT_OF_MEMORY")
    assert measured_cause("out_of_memory", "failed", None, dict(figures, mem_requested_bytes=None)) == (
        "out of memory: the executor's accounting says OUT_OF_MEMORY")
    assert measured_cause("timed_out", "failed", None, dict(figures, state="TIMEOUT")) == (
        "out of time: the executor's accounting says TIMEOUT")
    assert measured_cause("out_of_memory", "failed", "out_of_memory", figures) is None  # the scheduler said it
    assert measured_cause("out_of_memory", "out_of_memory", None, figures) is None  # the attempt said it
    assert measured_cause("failed", "failed", None, figures) is None
    assert measured_cause("out_of_memory", "failed", None, None) is None
