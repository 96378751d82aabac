"""Retry (tau-retry) and the first submission (tau-submit): which shards get an attempt, then one submission.

Reads: the shards' records (from the sealed-shard index first), under the submit lock. Writes: through
`lifecycle.submission` only. The selection is the pure rule `rules.retry`: a shard is retryable when it has no
winner and its newest attempt is effectively failed or unknown (from the persisted records: run
`tau-observe | tau-reconcile` first to bring in the scheduler's latest evidence). Promises: a retry never touches a
sealed shard, reuses each shard's task index (its shard number), and is idempotent: the selection is made under the
submit lock, so a second or concurrent call finds the new attempts pending and does nothing.
"""

from __future__ import annotations

from taulib.lifecycle import submission
from taulib.rules.retry import ShardFacts, select_initial, select_retry
from taulib.rundir import state


def retry(run, explicit: list[str] | None = None) -> dict:
    wanted = None
    if explicit:
        for sid in explicit:
            run.check_shard(sid)
        wanted = sorted(set(explicit))

    def select(run_) -> tuple[list[str], list[dict]]:
        facts = []
        for sid in wanted if wanted is not None else state.unsealed_shards(run_):
            view = state.shard_view(run_, sid)
            facts.append(ShardFacts(sid, view.state, view.reason))
        return select_retry(facts, explicit=wanted is not None)

    result = submission.submit(run, "retry", select)
    result["run_id"] = run.run_id
    return result


def initial(run) -> dict:
    """tau-submit: the first attempt of every shard that has none."""

    def select(run_) -> tuple[list[str], list[dict]]:
        return select_initial([(sid, len(state.attempt_ids(run_, sid))) for sid in run_.shard_ids()]), []

    result = submission.submit(run, "initial", select)
    result["run_id"] = run.run_id
    return result
