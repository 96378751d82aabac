"""taulib.rules.efficiency: seff's arithmetic, attempt by attempt and over a run; nothing unknown is read as zero."""

from __future__ import annotations

import pytest

from taulib.rules.efficiency import FIGURES, SLOWEST, attempt, memory_unmeasured, summary

GIB = 1024 ** 3


def figures(shard: int, elapsed: float, cpu: float, cpus: int = 2, gpus: int = 0, rss: int | None = GIB,
            requested: int | None = 2 * GIB, attempt_no: int = 1) -> dict:
    return {"shard_id": f"shard-{shard:05d}", "attempt_id": f"attempt-{attempt_no:04d}", "state": "COMPLETED",
            "source": "sacct", "elapsed_seconds": elapsed, "cpu_seconds": cpu, "cpus": cpus, "gpus": gpus,
            "max_rss_bytes": rss, "mem_requested_bytes": requested, "time_limit_seconds": 600.0, "task_index": shard}


def test_an_attempts_efficiencies_are_cpu_over_core_time_and_peak_over_request():
    seen = attempt(figures(0, elapsed=100, cpu=150, cpus=2, rss=GIB, requested=4 * GIB))
    assert seen["measured"] is True
    assert (seen["cpu_efficiency"], seen["memory_efficiency"]) == (0.75, 0.25)
    assert {k: seen[k] for k in FIGURES} == {k: figures(0, 100, 150, rss=GIB, requested=4 * GIB)[k] for k in FIGURES}


def test_an_efficiency_without_its_denominator_is_none_never_a_guess():
    never_started = attempt(figures(0, elapsed=0, cpu=0, rss=None))
    assert (never_started["cpu_efficiency"], never_started["memory_efficiency"]) == (None, None)
    unrequested = attempt(figures(0, elapsed=10, cpu=5, cpus=1, requested=None))
    assert (unrequested["cpu_efficiency"], unrequested["memory_efficiency"]) == (0.5, None)


def test_an_unmeasured_attempt_has_every_figure_none_and_says_so():
    seen = attempt(None)
    assert seen["measured"] is False
    assert all(seen[k] is None for k in (*FIGURES, "cpu_efficiency", "memory_efficiency"))


def test_a_run_adds_up_every_measured_attempt_and_counts_the_unmeasured_apart():
    measured = [figures(0, 3600, 3600, cpus=2, gpus=1, rss=GIB, requested=4 * GIB),
                figures(1, 1800, 900, cpus=1, gpus=0, rss=3 * GIB, requested=4 * GIB),
                figures(1, 900, 0, cpus=1, rss=None, requested=None, attempt_no=2)]
    total = summary(measured, unmeasured=2)
    assert (total["measured"], total["unmeasured"]) == (3, 2)
    assert total["core_hours"] == pytest.approx((7200 + 1800 + 900) / 3600, abs=1e-4)
    assert total["gpu_hours"] == 1.0
    assert total["cpu_efficiency"] == round(4500 / 9900, 4)
    assert (total["memory_efficiency"], total["memory_efficiency_max"]) == (0.5, 0.75)
    assert total["max_rss_bytes"] == 3 * GIB
    assert [(s["shard_id"], s["attempt_id"]) for s in total["slowest"]] == [
        ("shard-00000", "attempt-0001"), ("shard-00001", "attempt-0001"), ("shard-00001", "attempt-0002")]


def test_a_run_names_only_its_slowest_attempts_and_nothing_measured_is_all_none():
    total = summary([figures(i, elapsed=i, cpu=0) for i in range(SLOWEST + 3)], unmeasured=0)
    assert [s["elapsed_seconds"] for s in total["slowest"]] == list(range(SLOWEST + 2, 2, -1))
    assert total["reason"] is None
    empty = summary([], unmeasured=4, reason="sacct failed: timed out")
    assert empty["measured"] == 0 and empty["unmeasured"] == 4 and empty["core_hours"] == 0
    assert empty["reason"] == "sacct failed: timed out"
    assert (empty["cpu_efficiency"], empty["memory_efficiency"], empty["max_rss_bytes"], empty["slowest"]) == (
        None, None, None, [])


def test_a_runs_figures_are_rounded_as_documented():
    # core and GPU hours to 4 places, CPU seconds to 3, the efficiencies to 4
    total = summary([figures(0, elapsed=1200, cpu=1000.12345, cpus=1, gpus=1, rss=GIB, requested=3 * GIB)],
                    unmeasured=0)
    assert (total["core_hours"], total["gpu_hours"], total["cpu_seconds"]) == (0.3333, 0.3333, 1000.123)
    assert (total["cpu_efficiency"], total["memory_efficiency"], total["memory_efficiency_max"]) == (
        0.8334, 0.3333, 0.3333)
    two = summary([figures(0, 60, 60, rss=GIB, requested=3 * GIB), figures(1, 60, 60, rss=GIB, requested=2 * GIB)],
                  unmeasured=0)
    assert two["memory_efficiency"] in (0.4166, 0.4167)  # the mean of 0.3333 and 0.5, to 4 places


def test_memory_asked_for_and_never_sampled_is_counted_as_unmeasured_never_as_unrequested():
    # a Slurm task shorter than JobAcctGatherFrequency has no MaxRSS though it asked for memory
    short = figures(0, elapsed=10.2, cpu=0.3, cpus=1, rss=None, requested=256 << 20)
    assert attempt(short)["memory_efficiency"] is None
    alone = summary([short], unmeasured=0)
    assert (alone["memory_unmeasured"], alone["memory_efficiency"], alone["max_rss_bytes"]) == (1, None, None)
    mixed = summary([short, figures(1, 60, 60, rss=GIB, requested=2 * GIB),
                     figures(2, 60, 60, rss=None, requested=None),  # asked for nothing: nothing to measure against
                     figures(3, 0, 0, rss=None, requested=GIB)],  # cancelled before it started: nothing to sample
                    unmeasured=1)
    assert (mixed["memory_unmeasured"], mixed["memory_efficiency"]) == (1, 0.5)
    assert summary([], unmeasured=0)["memory_unmeasured"] == 0


def test_an_attempt_lacks_its_memory_peak_only_when_it_ran_asked_for_memory_and_has_none():
    assert memory_unmeasured(figures(0, elapsed=0.5, cpu=0, rss=None, requested=GIB))  # half a second is a run
    assert memory_unmeasured(attempt(figures(0, elapsed=0.5, cpu=0, rss=None, requested=GIB)))  # a shard's usage
    assert not memory_unmeasured(figures(0, elapsed=0.5, cpu=0, rss=0, requested=GIB))  # a peak of 0 was measured
    assert not memory_unmeasured(figures(0, elapsed=0.5, cpu=0, rss=None, requested=0))
    assert not memory_unmeasured(figures(0, elapsed=0, cpu=0, rss=None, requested=GIB))
