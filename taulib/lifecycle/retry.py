"""Retry (tau-retry) and the first submission (tau-submit): which shards get an attempt, then one submission.

Reads: the shards' records (from the sealed-shard index first), under the submit lock. Writes: through
`lifecycle.submission` only. The selection is the pure rule `rules.retry`: a shard is retryable when it has no
winner and its newest attempt is effectively failed or unknown (tau-retry observes and reconciles first, so it acts
on the state tau-status shows). Promises: a retry never touches a sealed shard, reuses each shard's task index (its
shard number), and is idempotent: the selection is made under the submit lock, so a second or concurrent call finds
the new attempts pending and does nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib import executors
from taulib.errors import UsageError
from taulib.lifecycle import submission
from taulib.rules.retry import ShardFacts, select_initial, select_retry
from taulib.rundir import layout, state
from taulib.rundir.status import run_status

LIVE = ("running", "pending", "accounting_lag", "candidate")  # shard states a retry waits out

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run


def retry(run: Run, explicit: list[str] | None = None, reopen: bool = False,
          grant: Record | None = None, observed: bool = False) -> Record:
    """Submit the retryable shards (or, with `explicit`, these shards, granting exhausted ones one attempt more). With
    `reopen`, the cancellation of the named shards (or, with none named, of the run) is lifted first
    (`lifecycle.cancel.reopen`). With `grant` ({mem, time} in `rules.escalation`'s spelling, None where not granted),
    the named shards' new attempts ask for that instead of what escalation would ask (checked against the site's limits
    where its executor can read them), recorded in the submission. A shard whose newest attempt was killed without a
    cause yet waits for it (`rules.escalation.next_attempt`) unless named. The result names the exhausted shards left
    alone and the waiting ones, and says why nothing was submitted (`reason`; `stopped` when the run is past its failure
    budget). It acts on the state tau-status shows: the scheduler is observed and its word reconciled first (as
    tau-drive does), unless the caller just did (`observed`)."""
    wanted = None
    if explicit:
        for sid in explicit:
            run.check_shard(sid)
        wanted = set(explicit)
    grant = checked_grant(grant, wanted is not None)
    if grant is not None:
        executors.of(run).check_request(run, grant)
    reopened: list[Record] = []
    if reopen:
        from taulib.lifecycle import cancel

        reopened = cancel.reopen(run, explicit)
    if not observed:
        from taulib.lifecycle import observe

        observe.observe_and_reconcile(run)  # under the run lock, as tau-observe | tau-reconcile
    stopped = None
    exhausted: list[Record] = []
    capped: set[str] = set()  # exhausted because a retry would ask the request that was killed
    waiting: list[Record] = []
    cancelled = False
    live = 0

    def select(run_: Run) -> submission.Selection:
        nonlocal stopped, exhausted, cancelled, live, waiting
        status = run_status(run_, parallel=executors.of(run_).limits(run_.plan).parallel)
        stopped = status["budget"]["stopped"]
        cancelled = status["cancelled"] is not None
        live = sum(status["counts"][k] for k in LIVE)
        waiting = [{"shard_id": s["id"], "reason": s["next"]["reason"], "until": s["next"]["until"]}
                   for s in status["shards"] if wanted is None and s["next"] and s["next"]["action"] == "wait"]
        held = {w["shard_id"] for w in waiting}
        facts = [ShardFacts(s["id"], s["state"], s["reason"], s["attempts"]) for s in status["shards"]
                 if (wanted is None or s["id"] in wanted) and s["id"] not in held]
        capped.update(s["id"] for s in status["shards"] if s["next"] and s["next"]["action"] == "exhausted")
        exhausted = [{"shard_id": f.shard_id, "reason": f.reason} for f in facts
                     if f.state == "exhausted" and wanted is None]
        return select_retry(facts, explicit=wanted is not None, stopped=stopped, unsubmitted=initial_made(run_))

    result = submission.submit(run, "retry", select, grant=grant)
    result["run_id"] = run.run_id
    result["stopped"] = stopped
    result["reopened"] = reopened
    result["exhausted"] = exhausted
    result["waiting"] = waiting
    result["granted_request"] = grant
    result["reason"] = None if result["submission_id"] is not None else why_nothing(
        run, stopped, exhausted, result["skipped"], cancelled, result["deferred"], live, waiting, capped)
    return result


def checked_grant(grant: Record | None, named: bool) -> Record | None:
    """What a person grants ({mem, time}: None, or values in Slurm's spelling), without what is not granted; None
    when nothing is. UsageError for a grant to no named shard, a spelling Slurm would not take, or zero (which
    Slurm reads as no limit at all)."""
    from taulib.rules import escalation

    given = {key: value for key, value in (grant or {}).items() if value is not None}
    if not given:
        return None
    if not named:
        raise UsageError("--mem and --time grant named shards more; name them with --shard")
    for key, value in given.items():
        try:
            amount = (escalation.mem_mib if key == "mem" else escalation.time_seconds)(value)
        except ValueError as exc:
            raise UsageError(f"--{key}: {exc}") from None
        if not amount:
            raise UsageError(f"--{key}: {value!r} grants nothing (Slurm reads a zero --{key} as no limit at all)")
    return given


def why_nothing(run: Run, stopped: str | None, exhausted: list[Record], skipped: list[Record], cancelled: bool,
                deferred: Record, live: int, waiting: list[Record] | None = None,
                capped: set[str] | frozenset[str] = frozenset()) -> str:
    """Why a retry submitted nothing, in one sentence a person can act on."""
    if waiting:
        first = waiting[0]
        return (f"{len(waiting)} shard(s) wait to learn why their attempt was killed ({first['shard_id']}: "
                f"{first['reason']}; at most until {first['until']}); a later tau-retry submits them")
    if deferred["shards"]:
        return (f"{deferred['shards']} shard(s) wait until the queue has room "
                f"({deferred['holding'] or 'the scheduler limits'}); a later tau-retry or tau-submit submits them")
    if cancelled:
        return f"the run is cancelled; tau-retry {run.path} --reopen lifts the cancellation"
    if stopped is not None:
        return stopped
    at_cap = [e["shard_id"] for e in exhausted if e["shard_id"] in capped]
    if at_cap and len(at_cap) == len(exhausted):
        shown = ", ".join(at_cap[:5]) + (" and more" if len(at_cap) > 5 else "")
        return (f"{len(at_cap)} shard(s) were killed at the cap of retry.escalate ({shown}): a retry would ask the "
                f"same request again; tau-retry {run.path} --shard S --mem SIZE (or --time LIMIT) grants more")
    if exhausted:
        shown = ", ".join(e["shard_id"] for e in exhausted[:5]) + (" and more" if len(exhausted) > 5 else "")
        return (f"{len(exhausted)} shard(s) used every attempt of their budget ({shown}); tau-retry {run.path} "
                "--shard S grants one more")
    if skipped:
        lift = (f"; tau-retry {run.path} --shard {skipped[0]['shard_id']} --reopen lifts its cancellation"
                if skipped[0]["state"] == "cancelled" else "")
        return f"no named shard is retryable ({skipped[0]['shard_id']}: {skipped[0]['reason']}){lift}"
    if live:
        return (f"no shard is retryable: {live} shard(s) are live (pending, running or waiting for their winner), "
                "and a live shard is retried only once its attempt has failed")
    return ("no shard is retryable: every shard has a winner or is cancelled (tau-retry RUN --shard S --reopen "
            "lifts a shard's cancellation)")


def initial_made(run: Run) -> bool:
    """Whether the run's first submission was made (a bound initial submission is in the journal)."""
    return any(plan["purpose"] == "initial" and status is not None and status["state"] == "submitted"
               for plan, status in submission.journal(run).entries())


def initial(run: Run, limit: int | None = None, shards: list[str] | None = None) -> Record:
    """tau-submit: the first attempt of every shard that has none and is not cancelled; a canary (`limit`, or only
    the named `shards`) submits only some of them, and the next call the rest (`held_back` says how many wait)."""
    only = None
    if shards:
        for sid in shards:
            run.check_shard(sid)
        only = frozenset(shards)
    held = 0

    def select(run_: Run) -> submission.Selection:
        nonlocal held
        if state.run_cancel(run_) is not None:
            return [], [], []
        present = set(run_.dir.listdir(layout.SHARDS))  # a shard without a folder has no record and no cancel
        submitted = state.Submitted(run_)  # the attempts of bound submissions, which may have no folder yet
        counts = [(sid, len(state.attempt_ids(run_, sid, submitted, on_disk=sid in present)))
                  for sid in run_.shard_ids()]
        cancelled = frozenset(sid for sid, count in counts if count == 0 and sid in present
                              and state.cancellation(run_, sid, None) is not None)
        chosen, held = select_initial(counts, cancelled, only, limit)
        return chosen, [], []

    result = submission.submit(run, "initial", select)
    result["run_id"] = run.run_id
    result["stopped"] = None
    result["held_back"] = held
    return result
