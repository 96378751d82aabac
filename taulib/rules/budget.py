"""The retry budget: when a shard, or a whole run, stops being retried. Pure (tests/test_rules_budget.py).

The plan's `retry` sets it: `max_attempts` per shard (default 3), and a run-wide failure budget, past which the
run stops retrying: more than `max_failed_attempts` failed attempts (default 10) and more than
`max_failed_fraction` of the shards failed (default 0.1), both at once, so a small run is not stopped by one bad
shard and a big one not by a handful. A shard whose newest attempt failed (or is unknown) with all its attempts
used is `exhausted`: not retried, with the reason. `tau-retry RUN --shard S` grants a named shard one attempt more,
past either budget; the grant is recorded on the submission's task.
"""

from __future__ import annotations


def exhausted(retryable: bool, attempts: int, max_attempts: int) -> bool:
    """Whether a shard that would be retried has used every attempt its budget gives."""
    return retryable and attempts >= max_attempts


def failed_attempts(attempts: int, latest_failed: bool) -> int:
    """How many of a shard's attempts failed: every attempt before its newest (a new attempt is only ever made
    after the one before it ended without a winner), and the newest when it failed."""
    return max(attempts - 1, 0) + (1 if latest_failed else 0)


def run_stopped(failed: int, failed_shards: int, shard_count: int, retry: dict) -> str | None:
    """Why the run stops retrying (past its failure budget), or None while it is within it."""
    limit, fraction = retry["max_failed_attempts"], retry["max_failed_fraction"]
    if failed > limit and failed_shards > fraction * shard_count:
        return (f"past the run's failure budget: {failed} failed attempts (more than {limit}) and {failed_shards} "
                f"of {shard_count} shards failed (more than {fraction:.0%}); tau-retry submits nothing more "
                "(tau-retry --shard S grants a named shard one more attempt)")
    return None
