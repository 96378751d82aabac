"""taulib.rules.journal: resolving an ambiguous submission by its job's exact name, row by row of its table."""

from __future__ import annotations

import pytest

from taulib.rules.journal import Engine, Resolution, resolve

NAME = "tau-demo-6ddb4c9a-0002"
SLURM = Engine("Slurm", "sbatch")  # how the reasons name the scheduler


@pytest.mark.parametrize("past", [False, True])
def test_more_than_one_job_of_the_name_is_a_conflict_for_a_person(past):
    verdict = resolve({"101": {0, 1}, "102": {0, 1}}, {0, 1}, past, NAME, SLURM)
    assert verdict == Resolution("conflict", None, f"2 Slurm jobs are named {NAME!r} (ids ['101', '102']); tau "
                                 "adopts only one: cancel the extra ones")


@pytest.mark.parametrize("seen, expected", [({0, 7}, {0, 1}), ({None}, {0, 1}), ({3}, {None}), ({None, 3}, {None})])
def test_one_job_with_tasks_that_were_not_planned_is_never_adopted(seen, expected):
    verdict = resolve({"101": seen}, expected, False, NAME, SLURM)
    assert verdict.action == "conflict" and verdict.job_id == "101"
    assert "are not the planned ones; refusing to adopt it" in verdict.reason


@pytest.mark.parametrize("past", [False, True])
def test_one_job_with_exactly_the_planned_tasks_is_adopted(past):
    assert resolve({"101": {0, 1, 2}}, {0, 1, 2}, past, NAME, SLURM).action == "adopt"
    assert resolve({"77": {None}}, {None}, past, NAME, SLURM) == Resolution("adopt", "77",
                                                                          "Slurm job 77 carries its name")


def test_only_some_planned_tasks_are_waited_for_until_the_deadline_then_retired():
    assert resolve({"101": {0}}, {0, 1}, False, NAME, SLURM) == Resolution(
        "wait", "101", "only some tasks of Slurm job 101 are visible yet")
    assert resolve({"101": {0}}, {0, 1}, True, NAME, SLURM) == Resolution(
        "retire", "101", "only tasks ['0'] of job 101 were visible by the deadline")


def test_no_job_of_the_name_is_waited_for_until_the_deadline_then_retired_never_submitted_twice():
    assert resolve({}, {0}, False, NAME, SLURM) == Resolution(
        "wait", None, "its job is not visible in Slurm yet (its sbatch reply was lost)")
    assert resolve({}, {0}, True, NAME, SLURM) == Resolution(
        "retire", None, "no job with its name was visible in Slurm by the visibility deadline")


def test_the_reasons_name_the_scheduler_in_its_own_words():
    flux = Engine("Flux", "flux batch")
    assert resolve({}, {0}, False, NAME, flux).reason == \
        "its job is not visible in Flux yet (its flux batch reply was lost)"
    assert resolve({"7": {0}}, {0}, False, NAME, flux).reason == "Flux job 7 carries its name"
    assert resolve({}, {0}, True, NAME, flux).reason == \
        "no job with its name was visible in Flux by the visibility deadline"
