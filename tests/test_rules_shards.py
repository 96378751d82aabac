"""taulib.rules.shards: shard counts and record ranges, case by case and by properties (every record in exactly one
shard, in order, no shard empty)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rules_fixtures import examples

from taulib.rules.shards import shard_count, shard_range


def resolved(records: int, shards: int | None = None, size: int | None = None) -> dict:
    return {"records": records, "shard_count": shard_count(records, shards, size), "shard_size": size}


def test_a_shard_count_splits_the_records_as_evenly_as_integers_allow():
    plan = resolved(10, shards=4)
    assert [shard_range(plan, i) for i in range(4)] == [(0, 2), (2, 5), (5, 7), (7, 10)]


def test_a_shard_size_gives_full_shards_and_a_last_one_with_the_rest():
    plan = resolved(10, size=4)
    assert plan["shard_count"] == 3
    assert [shard_range(plan, i) for i in range(3)] == [(0, 4), (4, 8), (8, 10)]
    assert shard_count(8, None, 4) == 2 and shard_count(8, 2, None) == 2


@settings(max_examples=examples(300), deadline=None)
@given(st.integers(min_value=1, max_value=5000), st.data())
def test_every_record_is_in_exactly_one_non_empty_shard_in_order(records, data):
    if data.draw(st.booleans()):
        plan = resolved(records, shards=data.draw(st.integers(min_value=1, max_value=records)))
    else:
        plan = resolved(records, size=data.draw(st.integers(min_value=1, max_value=records + 10)))
    ranges = [shard_range(plan, i) for i in range(plan["shard_count"])]
    assert ranges[0][0] == 0 and ranges[-1][1] == records
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    assert all(end > start for start, end in ranges)


def test_a_plan_with_neither_shards_nor_shard_size_is_refused():
    with pytest.raises(ValueError, match="^a plan gives either shards or shard_size$"):
        shard_count(10, None, None)
