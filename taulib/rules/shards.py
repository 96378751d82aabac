"""Shard ranges: which records each shard holds. Pure (tests/test_rules_shards.py).

A plan gives either `shard_count` (records split as evenly as integers allow: shard i holds
[i*N//count, (i+1)*N//count)) or `shard_size` (shard i holds [i*size, min((i+1)*size, N))). Every record is in
exactly one shard, shards are in record order, and no shard is empty.
"""

from __future__ import annotations

from typing import Any


def shard_count(records: int, shards: int | None, shard_size: int | None) -> int:
    """The number of shards a plan asks for (one of `shards` and `shard_size` is given)."""
    if shards is not None:
        return shards
    if shard_size is None:
        raise ValueError("a plan gives either shards or shard_size")
    return -(-records // shard_size)


def shard_range(plan: dict[str, Any], index: int) -> tuple[int, int]:
    """Half-open record range of shard `index` of a resolved plan."""
    records: int = plan["records"]
    count: int = plan["shard_count"]
    size: int | None = plan["shard_size"]
    if size is None:
        return index * records // count, (index + 1) * records // count
    return index * size, min((index + 1) * size, records)
