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


# The plan's defaults: what tau-init fills in, and what a plan written before a field existed is read with.
WINDOWS = {"accounting_lag_seconds": 300, "preemption_seconds": 300, "submission_visibility_seconds": 300,
           "heartbeat_seconds": 60, "stall_seconds": 900}
RETRY = {"max_attempts": 3, "max_failed_attempts": 10, "max_failed_fraction": 0.1}
MAX_PARALLEL = 4
ROWS_PER_PARTITION = 1_000_000


def with_defaults(plan: dict) -> dict:
    """The plan as tau reads it: fields added after a plan was written take their defaults (a documented mapping:
    tau-run(5) "The plan"). A plan that has every field is returned as it is."""
    if "retry" in plan and "inherit_env" in plan and "stall_seconds" in plan["windows"] and "schema" in plan["output"]:
        return plan
    return dict(plan, retry=dict(RETRY, **plan.get("retry", {})), inherit_env=list(plan.get("inherit_env", [])),
                windows=dict(WINDOWS, **plan["windows"]), output=dict({"schema": None}, **plan["output"]))
