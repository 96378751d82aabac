"""A submission's tasks in its plan (`taulib.rundir.journal`): `task_ranges` (this version) and `tasks` (earlier ones)
read the same way, and 100,000 first attempts are one range."""

from __future__ import annotations

import re

import pytest

from taulib import schema
from taulib.rundir.journal import (SUBMISSIONS, Journal, compact_tasks, find_task, job_name, range_task_index,
                                   task_count, task_indices, tasks)


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
    assert find_task(plan, 1) == dict(task(6, 2), task_index=1)  # the second task of a range of two
    window = submission(task_ranges=compact_tasks(windowed(list(range(1000, 1200)), 0)))
    assert [find_task(window, i)["shard_id"] for i in (0, 1, 199)] == ["shard-01000", "shard-01001", "shard-01199"]
    assert find_task(plan, 4) is None and find_task(plan, 5) is None  # 5 is shard 5's index, not an array index
    assert not schema.is_valid(submission(task_ranges=[{"first": 0, "count": 1, "ordinal": 1, "task": -1}]),
                               "submission-plan")


# -- the journal of a real run directory: newest(), ids, job names ---------------------------------------------------


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A real run (made by tau-init's library, in this process), open."""
    import sys

    from taulib.lifecycle.init import init
    from taulib.rundir.run import Run

    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    monkeypatch.chdir(ws)
    init(str(ws / "run"), {"records": 4, "shards": 2, "command": [sys.executable, "-c", "pass"]})
    with Run(str(ws / "run")) as opened:
        yield opened


def entry_plan(number: int) -> dict:
    return submission(submission_id=f"submission-{number:04d}", job_name=f"tau-run-00000000-{number:04d}",
                      task_ranges=[{"first": 0, "count": 2, "ordinal": 1}])


def test_an_empty_journal_has_no_newest_entry_and_starts_at_one(run):
    journal = Journal(run, SUBMISSIONS)
    assert journal.newest() is None and journal.ids() == [] and journal.next_id() == "submission-0001"


def test_the_newest_entry_that_reached_prepared_is_read_whole(run):
    journal = Journal(run, SUBMISSIONS)
    journal.open(entry_plan(1))
    status = journal.open(entry_plan(2))
    newest = journal.newest()
    assert newest is not None and newest.plan == entry_plan(2) and newest.status == status
    assert (status["state"], status["revision"], status["submission_id"]) == ("prepared", 1, "submission-0002")
    assert journal.next_id() == "submission-0003"


@pytest.mark.parametrize("left", ["plan.json", "status.json", None])
def test_a_newest_folder_that_never_reached_prepared_is_removed_and_its_number_used_again(run, left):
    journal = Journal(run, SUBMISSIONS)
    journal.open(entry_plan(1))
    journal.open(entry_plan(2))
    folder = f"submissions/submission-0002/{'plan.json' if left == 'status.json' else 'status.json'}"
    if left is None:
        run.dir.remove_tree("submissions/submission-0002")
        run.dir.make_folders("submissions/submission-0002")  # a folder made, nothing in it yet
    else:
        run.dir.remove_file(folder)  # a crash between the plan and its status (or the status alone: damage)
    assert journal.ids() == ["submission-0001", "submission-0002"]
    assert journal.newest() is None
    assert not run.dir.exists("submissions/submission-0002")
    assert journal.ids() == ["submission-0001"] and journal.next_id() == "submission-0002"
    assert journal.newest().plan == entry_plan(1)


def test_entries_are_in_numeric_order_and_names_that_are_not_entries_are_no_part_of_the_journal(run):
    journal = Journal(run, SUBMISSIONS)
    for number in (1, 2, 9, 10):
        journal.open(entry_plan(number))
    run.dir.make_folders("submissions/submission-01x")
    run.dir.make_folders("submissions/notes")
    assert journal.ids() == ["submission-0001", "submission-0002", "submission-0009", "submission-0010"]
    assert [e.plan["submission_id"] for e in journal.entries()] == journal.ids()
    assert journal.next_id() == "submission-0011"


def test_advance_moves_a_status_one_revision_and_retire_fails_it_with_why(run):
    journal = Journal(run, SUBMISSIONS)
    status = journal.open(entry_plan(1))
    moved = journal.advance(status, state="submitted", job_id="123")
    assert (moved["revision"], moved["state"], moved["job_id"]) == (2, "submitted", "123")
    assert journal.reread(status) == moved
    failed = journal.retire(moved, "x" * 600)
    assert (failed["revision"], failed["state"], failed["reason"]) == (3, "failed", "x" * 500)


def test_the_visibility_deadline_is_the_creation_time_plus_the_window(run):
    journal = Journal(run, SUBMISSIONS)
    status = journal.open(entry_plan(1))
    assert status["deadline"] == "2026-11-29T12:05:00.000000Z"  # created 12:00:00, a window of 300 s


def test_a_job_name_is_tau_the_run_id_8_hex_of_run_json_and_the_entry_number(run):
    from taulib import jsonio

    name = job_name(run, "0002")
    assert name == f"tau-run-{jsonio.digest(run.record)[:8]}-0002"
    assert re.fullmatch(r"tau-run-[0-9a-f]{8}-0002", name)
    run.run_id = "r" * 150
    assert job_name(run, "c0001").startswith("tau-" + "r" * 100 + "-")


def test_a_task_out_of_order_by_its_shard_alone_or_its_index_alone_is_refused():
    message = "^tasks must be in ascending task order \\(their shards and array task indices both\\)$"
    by_shard = [dict(task(3, 1), task_index=0), dict(task(4, 1), task_index=1), dict(task(4, 1), task_index=2)]
    by_index = [dict(task(3, 1), task_index=5), dict(task(4, 1), task_index=6), dict(task(9, 1), task_index=6)]
    for tasks_ in (by_shard, by_index):
        with pytest.raises(ValueError, match=message):
            compact_tasks(tasks_)


def test_a_ranges_task_index_of_a_shard_counts_from_its_first_task():
    assert range_task_index({"first": 1000, "count": 200, "ordinal": 1, "task": 0}, 1005) == 5
    assert range_task_index({"first": 3, "count": 2, "ordinal": 2}, 4) == 4  # no "task": the shard's own index


def test_an_opened_entry_names_its_plan_by_path_and_digest_and_advancing_it_stamps_the_time(run):
    from taulib import jsonio

    journal = Journal(run, SUBMISSIONS)
    status = journal.open(entry_plan(1))
    assert status["plan"] == {"path": "submissions/submission-0001/plan.json", "sha256": jsonio.digest(entry_plan(1))}
    moved = journal.advance(status, state="submitted")
    assert moved["updated_at"] != status["updated_at"]  # created 2026-11-29T12:00:00Z; advanced now
    assert abs(jsonio.parse_time(moved["updated_at"]) - jsonio.parse_time(jsonio.now_rfc3339())) < 60


@pytest.mark.parametrize("swapped", ["plan.json", "status.json"])
def test_an_entry_whose_record_is_of_another_kind_is_refused(run, swapped):
    from pathlib import Path

    from taulib import jsonio
    from taulib.errors import TauError

    journal = Journal(run, SUBMISSIONS)
    status = journal.open(entry_plan(1))
    other = status if swapped == "plan.json" else entry_plan(1)
    (Path(run.path) / "submissions" / "submission-0001" / swapped).write_bytes(jsonio.canonical(other))
    with pytest.raises(TauError) as caught:
        journal.read("submission-0001")
    assert caught.value.code == 65 and swapped in caught.value.message
    if swapped == "status.json":
        with pytest.raises(TauError):
            journal.reread(status)
