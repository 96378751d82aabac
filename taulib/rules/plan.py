"""Shard ranges: which records each shard holds. Pure (tests/test_rules_plan.py).

A plan gives either `shard_count` (records split as evenly as integers allow: shard i holds
[i*N//count, (i+1)*N//count)) or `shard_size` (shard i holds [i*size, min((i+1)*size, N))). Every record is in
exactly one shard, shards are in record order, and no shard is empty.
"""

from __future__ import annotations


def shard_count(records: int, shards: int | None, shard_size: int | None) -> int:
    """The number of shards a plan asks for (one of `shards` and `shard_size` is given)."""
    if shards is not None:
        return shards
    assert shard_size is not None
    return -(-records // shard_size)


def shard_range(plan: dict, index: int) -> tuple[int, int]:
    """Half-open record range of shard `index` of a resolved plan."""
    records, count, size = plan["records"], plan["shard_count"], plan["shard_size"]
    if size is None:
        return index * records // count, (index + 1) * records // count
    return index * size, min((index + 1) * size, records)
