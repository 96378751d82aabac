"""taulib.rules.partition: which rows of which winner file go into which output file, case by case and by
properties (every row in exactly one partition, in order; every partition but the last of exactly the planned
size; the plan is what dealing the rows out one by one gives)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rules_fixtures import examples

from taulib.rules.partition import Lane, Partition, Piece, file_name, lanes, plan


def test_files_are_cut_at_every_multiple_of_the_partition_size_and_the_last_takes_the_rest():
    assert plan([40, 40, 40], 50) == [
        Partition(0, 50, (Piece(0, 0, 40), Piece(1, 0, 10))),
        Partition(1, 50, (Piece(1, 10, 40), Piece(2, 0, 20))),
        Partition(2, 20, (Piece(2, 20, 40),)),
    ]


def test_a_partition_can_span_many_files_and_a_file_many_partitions():
    assert plan([3, 2, 1], 100) == [Partition(0, 6, (Piece(0, 0, 3), Piece(1, 0, 2), Piece(2, 0, 1)))]
    assert plan([250], 100) == [Partition(0, 100, (Piece(0, 0, 100),)), Partition(1, 100, (Piece(0, 100, 200),)),
                                Partition(2, 50, (Piece(0, 200, 250),))]


def test_an_exact_multiple_leaves_no_empty_last_partition_and_files_without_rows_give_no_piece():
    assert plan([50, 0, 50], 50) == [Partition(0, 50, (Piece(0, 0, 50),)), Partition(1, 50, (Piece(2, 0, 50),))]
    assert plan([], 10) == [] and plan([0, 0], 10) == []


def test_a_partition_size_below_one_is_refused():
    with pytest.raises(ValueError, match="^rows_per_partition must be at least 1$"):
        plan([10], 0)


def test_partition_files_are_numbered_with_five_digits_and_the_format_suffix():
    assert file_name(0, "parquet") == "part-00000.parquet"
    assert file_name(123, "jsonl") == "part-00123.jsonl"


FILES = st.lists(st.integers(min_value=0, max_value=300), max_size=12)
SIZES = st.integers(min_value=1, max_value=400)


@settings(max_examples=examples(400), deadline=None)
@given(FILES, SIZES)
def test_every_row_is_in_exactly_one_partition_in_collection_order(file_rows, size):
    rows = [(f, r) for f, n in enumerate(file_rows) for r in range(n)]
    planned = [(p.file, r) for part in plan(file_rows, size) for p in part.pieces for r in range(p.start, p.stop)]
    assert planned == rows


@settings(max_examples=examples(400), deadline=None)
@given(FILES, SIZES)
def test_every_partition_but_the_last_has_exactly_the_planned_size(file_rows, size):
    parts = plan(file_rows, size)
    total = sum(file_rows)
    assert [p.index for p in parts] == list(range(len(parts)))
    assert len(parts) == -(-total // size)
    for part in parts:
        assert part.rows == sum(p.stop - p.start for p in part.pieces) and all(p.stop > p.start for p in part.pieces)
    assert all(p.rows == size for p in parts[:-1])
    if parts:
        assert 0 < parts[-1].rows <= size and parts[-1].rows == total - size * (len(parts) - 1)


@settings(max_examples=examples(200), deadline=None)
@given(FILES, SIZES)
def test_the_plan_is_what_dealing_the_rows_out_one_by_one_gives(file_rows, size):
    # the reference: every row, in collection order, goes to partition (its position // size); a partition's
    # pieces are its runs of consecutive rows of one file
    rows: dict[int, list[tuple[int, int]]] = {}
    position = 0
    for file, count in enumerate(file_rows):
        for row in range(count):
            rows.setdefault(position // size, []).append((file, row))
            position += 1
    expected = []
    for index in sorted(rows):
        pieces: list[list[int]] = []
        for file, row in rows[index]:
            if pieces and pieces[-1][0] == file and pieces[-1][2] == row:
                pieces[-1][2] += 1
            else:
                pieces.append([file, row, row + 1])
        expected.append(Partition(index, len(rows[index]), tuple(Piece(*p) for p in pieces)))
    assert plan(file_rows, size) == expected
    assert plan(tuple(file_rows), size) == expected  # a tuple or a list: the same plan


# -- lanes: consecutive partitions written at the same time ----------------------------------------------------

def test_lanes_split_the_partitions_in_order_and_share_only_the_file_between_them():
    parts = plan([40, 40, 40], 50)  # file 1 holds rows of partitions 0 and 1
    assert lanes(parts, 3, 2) == [Lane(tuple(parts[0:2]), 0, 2), Lane(tuple(parts[2:3]), 2, 2)]
    assert lanes(parts, 3, 3) == [Lane((parts[0],), 0, 1), Lane((parts[1],), 1, 2), Lane((parts[2],), 2, 2)]
    assert lanes(parts, 3, 8) == lanes(parts, 3, 3)  # never more lanes than partitions


def test_files_without_rows_belong_to_the_lane_before_the_next_ones_first_file():
    parts = plan([0, 50, 0, 0, 50, 0], 50)
    assert lanes(parts, 6, 2) == [Lane((parts[0],), 0, 3), Lane((parts[1],), 4, 5)]
    assert lanes([], 2, 4) == [Lane((), 0, 1)] and lanes([], 0, 4) == [Lane((), 0, -1)]


def test_at_least_one_lane_is_asked_for():
    with pytest.raises(ValueError, match="^most must be at least 1$"):
        lanes([], 0, 0)


@settings(max_examples=examples(400), deadline=None)
@given(FILES, SIZES, st.integers(min_value=1, max_value=5))
def test_every_file_is_read_by_one_lane_but_the_ones_several_lanes_have_rows_of(file_rows, size, most):
    parts = plan(file_rows, size)
    split = lanes(parts, len(file_rows), most)
    assert len(split) == max(1, min(most, len(parts)))
    assert [p for lane in split for p in lane.partitions] == parts
    assert max(len(lane.partitions) for lane in split) - min(len(lane.partitions) for lane in split) <= 1
    for lane in split:
        for part in lane.partitions:
            assert all(lane.first <= piece.file <= lane.last for piece in part.pieces)
    readers = {f: [n for n, lane in enumerate(split) if lane.first <= f <= lane.last] for f in range(len(file_rows))}
    for f, who in readers.items():
        having = {n for n, lane in enumerate(split) for part in lane.partitions for piece in part.pieces
                  if piece.file == f}
        assert len(who) == 1 or set(who) == having, (f, who, having)


@settings(max_examples=examples(400), deadline=None)
@given(FILES, SIZES, st.integers(min_value=1, max_value=5), st.integers(min_value=1, max_value=4))
def test_a_tasks_lanes_read_exactly_the_files_of_the_task_and_write_exactly_its_partitions(file_rows, size, tasks,
                                                                                           most):
    """A collection split into tasks, each task split again over its threads (tau-collect --tasks): the sub-lanes of
    a task cover its partitions in order and read only within its files, from its first to its last."""
    parts = plan(file_rows, size)
    for task in lanes(parts, len(file_rows), tasks):
        sub = lanes(list(task.partitions), len(file_rows), most, task.first, task.last)
        assert [p for lane in sub for p in lane.partitions] == list(task.partitions)
        assert sub[0].first == task.first and sub[-1].last == task.last
        for lane in sub:
            assert task.first <= lane.first and lane.last <= task.last
            for part in lane.partitions:
                assert all(lane.first <= piece.file <= lane.last for piece in part.pieces)
        # consecutive sub-lanes share one file at most
        assert all(b.first - 1 <= a.last <= b.first for a, b in zip(sub, sub[1:], strict=False))


def test_a_lane_split_again_keeps_its_bounds():
    parts = plan([10, 0, 10, 0], 5)  # 4 partitions; files 1 and 3 are empty
    first, second = lanes(parts, 4, 2)
    assert (first.first, first.last, second.first, second.last) == (0, 1, 2, 3)
    assert lanes(list(second.partitions), 4, 2, second.first, second.last) == [
        Lane((parts[2],), 2, 2), Lane((parts[3],), 2, 3)]
    assert lanes([], 4, 3, 2, 3) == [Lane((), 2, 3)]
