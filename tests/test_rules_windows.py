"""taulib.rules.windows: a submission's shards cut into arrays that fit the scheduler now, the rest deferred."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rules_fixtures import examples

from taulib.rules.windows import Windows, cut


def test_a_run_that_fits_is_one_array_whose_task_indices_are_its_shards():
    assert cut([0, 1, 2, 5], None, None, None) == Windows([[(0, 0), (1, 1), (2, 2), (5, 5)]], 0)
    assert cut([0, 1, 2, 5], 1000, 1001, 250) == Windows([[(0, 0), (1, 1), (2, 2), (5, 5)]], 0)
    assert cut([], 1000, 1001, 0) == Windows([], 0)


def test_shards_past_the_room_are_deferred_in_shard_order():
    assert cut(list(range(10)), 1000, 1001, 4) == Windows([[(i, i) for i in range(4)]], 6)
    assert cut(list(range(10)), 1000, 1001, 0) == Windows([], 10)
    assert cut(list(range(10)), 1000, 1001, -3) == Windows([], 10)  # more queued than the limit: nothing fits


def test_shards_above_the_largest_index_get_array_indices_from_zero():
    windows = cut(list(range(1000, 1200)), 1000, 1001, 250)
    assert windows.deferred == 0 and len(windows.arrays) == 1
    assert windows.arrays[0][0] == (1000, 0) and windows.arrays[0][-1] == (1199, 199)
    sparse = cut([5, 54321, 99999], 1000, 1001, None)
    assert sparse == Windows([[(5, 0), (54321, 1), (99999, 2)]], 0)


def test_an_array_never_holds_more_tasks_than_the_scheduler_allows():
    windows = cut(list(range(2500)), 1000, 1001, None)
    assert [len(a) for a in windows.arrays] == [1001, 1001, 498]
    assert windows.arrays[0][-1] == (1000, 1000)  # shards 0..1000 keep their indices
    assert windows.arrays[1][0] == (1001, 0) and windows.arrays[2][-1] == (2499, 497)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.integers(0, 200_000), unique=True, max_size=3000).map(sorted),
       st.one_of(st.none(), st.integers(0, 2000)), st.one_of(st.none(), st.integers(1, 2001)),
       st.one_of(st.none(), st.integers(-5, 5000)))
def test_every_array_fits_and_every_shard_is_taken_once_or_deferred(shards, max_index, max_tasks, room):
    windows = cut(shards, max_index, max_tasks, room)
    taken = [shard for array in windows.arrays for shard, _ in array]
    assert taken == shards[:len(taken)] and len(taken) + windows.deferred == len(shards)
    if room is not None:
        assert len(taken) <= max(room, 0)
    for array in windows.arrays:
        indices = [index for _, index in array]
        assert len(set(indices)) == len(indices) and indices == sorted(indices)
        if max_index is not None:
            assert max(indices) <= max_index
        if max_tasks is not None:
            assert len(array) <= max_tasks


def test_room_for_fewer_than_the_least_worth_a_window_waits_unless_it_takes_every_shard_left():
    assert cut(list(range(100)), 1000, 1001, 7, least=25) == Windows([], 100)
    assert cut(list(range(100)), 1000, 1001, 30, least=25) == Windows([[(i, i) for i in range(30)]], 70)
    assert cut(list(range(5)), 1000, 1001, 7, least=25) == Windows([[(i, i) for i in range(5)]], 0)  # the last ones


def test_the_largest_index_bounds_an_array_of_tasks_numbered_from_zero():
    # max_index 2: at most 3 tasks an array; an array whose shards lie above it is numbered 0, 1, ...
    assert cut(list(range(5)), 2, None, None) == Windows([[(0, 0), (1, 1), (2, 2)], [(3, 0), (4, 1)]], 0)
    assert cut(list(range(5)), 2, 2, None) == Windows([[(0, 0), (1, 1)], [(2, 0), (3, 1)], [(4, 0)]], 0)


def test_shards_up_to_the_largest_index_itself_keep_their_own_indices():
    assert cut([1, 2], 2, 2, None) == Windows([[(1, 1), (2, 2)]], 0)
    assert cut([2, 3], 2, 2, None) == Windows([[(2, 0), (3, 1)]], 0)


def test_a_limit_of_zero_tasks_is_no_limit_and_one_shard_is_one_array():
    assert cut([0, 1], None, 0, None) == Windows([[(0, 0), (1, 1)]], 0)
    assert cut([7], None, None, None) == Windows([[(7, 7)]], 0)
