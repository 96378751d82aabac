"""Retry (tau-retry): new attempts for retryable shards, as one sparse submission.

A shard is retryable when it has no winner and its newest attempt is effectively failed or unknown (from the
persisted records: run `tau-observe | tau-reconcile` first to bring in the scheduler's latest evidence). A retry
never touches a sealed shard, reuses each shard's task index (its shard number), and is idempotent: the selection
is made under the submit lock, so a second or concurrent call finds the new attempts pending and does nothing.
"""

from __future__ import annotations

from taulib import reconcile, state, submission


def retry(run, explicit: list[str] | None = None) -> dict:
    wanted = None
    if explicit:
        for sid in explicit:
            run.check_shard(sid)
        wanted = sorted(set(explicit))

    def select(run_) -> tuple[list[str], list[dict]]:
        chosen, skipped = [], []
        for sid in wanted if wanted is not None else state.unsealed_shards(run_):
            view = state.shard_view(run_, sid)
            if view.state in reconcile.RETRYABLE:
                chosen.append(sid)
            elif wanted is not None:
                skipped.append({"shard_id": sid, "state": view.state, "reason": "not retryable: " + view.reason})
        return chosen, skipped

    result = submission.submit(run, "retry", select)
    result["run_id"] = run.run_id
    return result


def initial(run) -> dict:
    """tau-submit: the first attempt of every shard that has none."""

    def select(run_) -> tuple[list[str], list[dict]]:
        return [sid for sid in run_.shard_ids() if not state.attempt_ids(run_, sid)], []

    result = submission.submit(run, "initial", select)
    result["run_id"] = run.run_id
    return result
