"""A submission's tasks in its plan (`taulib.rundir.journal`): `task_ranges` (this version) and `tasks` (earlier ones)
read the same way, and 100,000 first attempts are one range."""

from __future__ import annotations

import pytest

from taulib import schema
from taulib.rundir.journal import compact_tasks, find_task, task_count, task_indices, tasks


def task(index: int, ordinal: int, granted: bool = False) -> dict:
    out = {"shard_id": f"shard-{index:05d}", "attempt_id": f"attempt-{ordinal:04d}", "ordinal": ordinal,
           "task_index": index}
    return dict(out, granted=True) if granted else out


def submission(**form) -> dict:
    return {"kind": "tau.submission-plan", "schema_version": 1, "run_id": "run", "submission_id": "submission-0001",
            "purpose": "retry", "plan_sha256": "0" * 64, "created_at": "2026-11-29T12:00:00.000000Z",
            "executor": "local", "job_name": "tau-run-00000000-0001", **form}


SPARSE = [task(0, 2), task(1, 2), task(2, 3), task(5, 2), task(6, 2, granted=True), task(7, 2, granted=True),
          task(8, 2)]


def test_consecutive_tasks_with_one_ordinal_and_grant_are_one_range():
    assert compact_tasks([task(i, 1) for i in range(100_000)]) == [{"first": 0, "count": 100_000, "ordinal": 1}]
    assert compact_tasks(SPARSE) == [
        {"first": 0, "count": 2, "ordinal": 2}, {"first": 2, "count": 1, "ordinal": 3},
        {"first": 5, "count": 1, "ordinal": 2}, {"first": 6, "count": 2, "ordinal": 2, "granted": True},
        {"first": 8, "count": 1, "ordinal": 2}]
    assert compact_tasks([]) == []


def test_tasks_out_of_order_are_refused():
    with pytest.raises(ValueError, match="ascending task order"):
        compact_tasks([task(3, 1), task(1, 1)])


@pytest.mark.parametrize("form", ["task_ranges", "tasks"])
def test_both_forms_of_a_plan_read_the_same(form):
    plan = submission(**({"task_ranges": compact_tasks(SPARSE)} if form == "task_ranges" else {"tasks": SPARSE}))
    schema.validate(plan, "submission-plan", "plan")
    assert tasks(plan) == SPARSE
    assert task_count(plan) == 7 and task_indices(plan) == [0, 1, 2, 5, 6, 7, 8]
    assert find_task(plan, 6) == task(6, 2, granted=True) and find_task(plan, 2) == task(2, 3)
    assert find_task(plan, 4) is None and find_task(plan, 9) is None


def test_a_plan_has_exactly_one_form_of_its_tasks():
    ranges = compact_tasks(SPARSE)
    assert schema.is_valid(submission(task_ranges=ranges), "submission-plan")
    assert not schema.is_valid(submission(), "submission-plan")
    assert not schema.is_valid(submission(task_ranges=ranges, tasks=SPARSE), "submission-plan")
    assert not schema.is_valid(submission(task_ranges=[{"first": 0, "count": 0, "ordinal": 1}]), "submission-plan")
    assert not schema.is_valid(submission(task_ranges=[{"first": 0, "count": 1, "ordinal": 1, "granted": False}]),
                               "submission-plan")


def windowed(shards: list[int], first_task: int, ordinal: int = 1) -> list[dict]:
    """Tasks of the shards given array task indices first_task, first_task + 1, ... (a window of a large run)."""
    return [dict(task(shard, ordinal), task_index=first_task + k) for k, shard in enumerate(shards)]


def test_a_window_records_the_array_index_of_each_ranges_first_task_only_where_it_is_not_the_shards():
    window = windowed(list(range(1000, 1200)), 0)
    assert compact_tasks(window) == [{"first": 1000, "count": 200, "ordinal": 1, "task": 0}]
    sparse = windowed([5, 6, 54321, 99999], 0, ordinal=2)
    assert compact_tasks(sparse) == [{"first": 5, "count": 2, "ordinal": 2, "task": 0},
                                     {"first": 54321, "count": 1, "ordinal": 2, "task": 2},
                                     {"first": 99999, "count": 1, "ordinal": 2, "task": 3}]
    assert compact_tasks(windowed([0, 1, 2], 0)) == [{"first": 0, "count": 3, "ordinal": 1}]  # index == shard
    with pytest.raises(ValueError, match="ascending task order"):
        compact_tasks([dict(task(3, 1), task_index=5), dict(task(4, 1), task_index=1)])


def test_an_allocation_finds_its_shard_from_its_array_index_in_a_windowed_plan():
    sparse = windowed([5, 6, 54321, 99999], 0, ordinal=2)
    plan = submission(task_ranges=compact_tasks(sparse))
    schema.validate(plan, "submission-plan", "plan")
    assert tasks(plan) == sparse
    assert task_indices(plan) == [0, 1, 2, 3] and task_count(plan) == 4
    assert find_task(plan, 2) == dict(task(54321, 2), task_index=2)
    assert find_task(plan, 3)["shard_id"] == "shard-99999"
    assert find_task(plan, 4) is None and find_task(plan, 5) is None  # 5 is shard 5's index, not an array index
    assert not schema.is_valid(submission(task_ranges=[{"first": 0, "count": 1, "ordinal": 1, "task": -1}]),
                               "submission-plan")
