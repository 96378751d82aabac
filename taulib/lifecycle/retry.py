"""Retry (tau-retry) and the first submission (tau-submit): which shards get an attempt, then one submission.

Reads: the shards' records (from the sealed-shard index first), under the submit lock. Writes: through
`lifecycle.submission` only. The selection is the pure rule `rules.retry`: a shard is retryable when it has no
winner and its newest attempt is effectively failed or unknown (from the persisted records: run
`tau-observe | tau-reconcile` first to bring in the scheduler's latest evidence). Promises: a retry never touches a
sealed shard, reuses each shard's task index (its shard number), and is idempotent: the selection is made under the
submit lock, so a second or concurrent call finds the new attempts pending and does nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib import executor
from taulib.lifecycle import submission
from taulib.rules.retry import ShardFacts, select_initial, select_retry
from taulib.rundir import layout, state
from taulib.rundir.status import run_status

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run


def retry(run: Run, explicit: list[str] | None = None) -> Record:
    """Submit the retryable shards (or, with `explicit`, these shards, granting exhausted ones one attempt more).
    The result says why nothing was submitted when the run is past its failure budget (`stopped`)."""
    wanted = None
    if explicit:
        for sid in explicit:
            run.check_shard(sid)
        wanted = set(explicit)
    stopped = None

    def select(run_: Run) -> submission.Selection:
        nonlocal stopped
        status = run_status(run_, parallel=executor.of(run_).limits(run_.plan).parallel)
        stopped = status["budget"]["stopped"]
        facts = [ShardFacts(s["id"], s["state"], s["reason"], s["attempts"]) for s in status["shards"]
                 if wanted is None or s["id"] in wanted]
        return select_retry(facts, explicit=wanted is not None, stopped=stopped, unsubmitted=_submitted(run_))

    result = submission.submit(run, "retry", select)
    result["run_id"] = run.run_id
    result["stopped"] = stopped
    return result


def _submitted(run: Run) -> bool:
    """Whether the run's first submission was made (a bound initial submission is in the journal)."""
    return any(plan["purpose"] == "initial" and status is not None and status["state"] == "submitted"
               for plan, status in submission.journal(run).entries())


def initial(run: Run) -> Record:
    """tau-submit: the first attempt of every shard that has none and is not cancelled."""

    def select(run_: Run) -> submission.Selection:
        if state.run_cancel(run_) is not None:
            return [], [], []
        present = set(run_.dir.listdir(layout.SHARDS))  # a shard without a folder has no record and no cancel
        submitted = state.Submitted(run_)  # the attempts of bound submissions, which may have no folder yet
        counts = [(sid, len(state.attempt_ids(run_, sid, submitted, on_disk=sid in present)))
                  for sid in run_.shard_ids()]
        cancelled = frozenset(sid for sid, count in counts if count == 0 and sid in present
                              and state.cancellation(run_, sid, None) is not None)
        return select_initial(counts, cancelled), [], []

    result = submission.submit(run, "initial", select)
    result["run_id"] = run.run_id
    result["stopped"] = None
    return result
