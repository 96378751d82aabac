"""The retry budget: when a shard, or a whole run, stops being retried, and what the run has spent of it. Pure
(tests/test_rules_budget.py).

The plan's `retry` sets it (`DEFAULTS` where the plan is silent): `max_attempts` per shard, and a run-wide
failure budget, past which the run stops retrying: more than `max_failed_attempts` failed attempts and more than
`max_failed_fraction` of the shards failed, both at once, so a small run is not stopped by one bad shard and a big
one not by a handful. A shard whose newest attempt failed (or is unknown) with all its attempts used is
`exhausted`: not retried, with the reason. `tau-retry RUN --shard S` grants a named shard one attempt more, past
either budget; the grant is recorded on the submission's task.

What a run has spent is counted shard by shard: a shard won by its attempt N failed N-1 times (`won`); an unsealed
shard failed every attempt before its newest, and its newest when that one's verdict is retryable and the shard is
not cancelled (`failed_attempts`, `latest_failed`); `spent` rolls them up into the status's `budget` object.
"""

from __future__ import annotations

from typing import Any

DEFAULTS: dict[str, Any] = {"max_attempts": 3, "max_failed_attempts": 10, "max_failed_fraction": 0.1}
RETRYABLE = frozenset({"failed", "unknown"})  # the verdicts of a newest attempt that count as failed and are retried
# the codes of failures a retry cannot mend (attempt.json's terminal `code`) -> why, for the shard's reason: its
# newest attempt failed so, the shard is exhausted (tau-retry --shard S grants one more, as for any exhausted shard)
NOT_RETRIED: dict[str | None, str] = {
    "image_changed": "not retried: a different image is a different run (tau-init NEW --from RUN, with the image "
                     "pinned anew)",
    "input_changed": "not retried: the input changed since the run was made, and a run's input never changes "
                     "(tau-init NEW --from RUN, over the new input, adopts the winners whose input is unchanged)",
    "input_unreadable": "not retried: the input's bytes are the ones indexed, but cannot be read (tau-init NEW "
                        "--from RUN, over a repaired input, adopts the winners whose input is unchanged)"}


def exhausted(retryable: bool, attempts: int, max_attempts: int) -> bool:
    """Whether a shard that would be retried has used every attempt its budget gives."""
    return retryable and attempts >= max_attempts


def won(ordinal: int) -> int:
    """How many attempts of a shard won by its attempt `ordinal` failed: every one before it (a new attempt is only
    ever made after the one before it ended without a winner)."""
    return ordinal - 1


def latest_failed(verdict_state: str | None, cancelled: bool) -> bool:
    """Whether an unsealed shard's newest attempt counts as failed: its verdict is retryable (failed or unknown),
    and the shard was not cancelled (a cancellation is the user's, not a failure)."""
    return not cancelled and verdict_state is not None and verdict_state in RETRYABLE


def failed_attempts(attempts: int, latest_failed: bool) -> int:
    """How many of an unsealed shard's attempts failed: every attempt before its newest, and the newest when it
    failed."""
    return max(attempts - 1, 0) + (1 if latest_failed else 0)


def run_stopped(failed: int, failed_shards: int, shard_count: int, retry: dict[str, Any]) -> str | None:
    """Why the run stops retrying (past its failure budget), or None while it is within it."""
    limit, fraction = retry["max_failed_attempts"], retry["max_failed_fraction"]
    if failed > limit and failed_shards > fraction * shard_count:
        return (f"past the run's failure budget: {failed} failed attempts (more than {limit}) and {failed_shards} "
                f"of {shard_count} shards failed (more than {fraction:.0%}); tau-retry submits nothing more "
                "(tau-retry --shard S grants a named shard one more attempt)")
    return None


def spent(retry: dict[str, Any], failed: int, counts: dict[str, int], shard_count: int) -> dict[str, Any]:
    """The status's `budget`: the plan's `retry`, the failed attempts counted over every shard, the failed shards
    (failed or exhausted, from the shard state `counts`), and why the run stopped retrying (None while it has not)."""
    failed_shards = counts["failed"] + counts["exhausted"]
    return {**retry, "failed_attempts": failed, "failed_shards": failed_shards,
            "stopped": run_stopped(failed, failed_shards, shard_count, retry)}
