"""Observation (tau-observe RUN): ask the executors about a run's live attempts. Read-only, but for
`observe_and_reconcile`, which hands what it observed to `lifecycle.reconcile`.

Reads: the shards' records (the sealed-shard index first, so finished shards cost nothing) and whatever the
executor of each live attempt keeps (`Executor.observe`: the local executor's records, or one batched squeue and
one batched sacct for the recorded Slurm jobs). Writes: nothing itself; `observe_and_reconcile` writes through
`lifecycle.reconcile.apply` only.
Promises: the live attempts are the newest attempt of each shard without a winner whose lifecycle is not finished;
the result is one normalised `tau.observations` document (schema `observations`), which tau-reconcile applies.
`observed` reads under the run lock, shared, as every command holds it (tau-observe); `observe_and_reconcile` is
`tau-observe RUN | tau-reconcile RUN` in one process (tau-drive's cycle, the Python API's `reconcile`): the run
lock is taken for each step in turn (observe, then reconcile's own), never held across both, so that a caller
holding drive.lock may make it and no step waits for a lock its caller holds.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from taulib import executors, jsonio, schema
from taulib.rundir import layout, locks, state, usage

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run


def live_attempts(run: Run) -> list[Record]:
    """The newest attempt of each shard without a winner that is unfinished, or finished while the scheduler has
    not yet said its last word on it (it was seen live, and its evidence is neither terminal nor unknown): an
    allocation that exits before accounting shows it is asked about until it does, so its exit code and Slurm's
    reason reach its evidence. One that finished before anybody observed it has its own result's reason."""
    out = []
    submitted = state.Submitted(run)
    for sid in state.unsealed_shards(run):
        if run.dir.exists(layout.winner(sid)):
            continue
        attempt = state.latest_attempt(run, sid, submitted)
        if attempt is None:
            continue
        if attempt["state"] in ("submitted", "running"):
            out.append(attempt)
            continue
        evidence = run.dir.read(layout.attempt_file(sid, attempt["attempt_id"], "observation.json"),
                                "tau.observation")
        if evidence is not None and not evidence["terminal"] and evidence["state"] != "unknown":
            out.append(attempt)
    return out


def observed(run: Run) -> Record:
    """`observe`, under the run lock (shared), as tau-observe makes it."""
    with locks.hold(run.dir, "run", shared=True):
        return observe(run)


def observe_and_reconcile(run: Run) -> Record:
    """Observe the run (`observed`), then apply what was observed (`lifecycle.reconcile.apply`, under its own
    locks): the run status with the `changes` made, as `tau-observe RUN | tau-reconcile RUN` prints it. Busy (75)
    when the run lock is not granted in time, before the executor is asked."""
    from taulib.lifecycle import reconcile

    return reconcile.apply(run, observed(run))


def observe(run: Run) -> Record:
    """The `tau.observations` document of the run's live attempts now (the caller holds the run lock: `observed`)."""
    attempts = live_attempts(run)
    observed_at = jsonio.now_rfc3339()
    views: list[Record] = []
    problems: dict[str, list[str]] = {"queue": [], "accounting": []}
    notes: list[str] = []  # why some attempts' own sources are unavailable, the executor's sources observed
    for name, group in by_executor(attempts).items():
        seen = executors.get(name).observe(run, group)
        views.extend(seen.views)
        for source in problems:
            if seen.sources[source] != "observed":
                problems[source].append(seen.sources["reason"] or f"{name} could not be asked")
        if seen.sources["reason"] and all(seen.sources[source] == "observed" for source in problems):
            notes.append(seen.sources["reason"])
    reasons = list(dict.fromkeys([*(r for source in problems.values() for r in source), *notes]))
    sources = {source: "unavailable" if problems[source] else "observed" for source in problems}
    doc = {"kind": "tau.observations", "schema_version": 1, "run_id": run.run_id, "observed_at": observed_at,
           "executor": run.plan["scheduler"]["profile"],
           "sources": dict(sources, reason="; ".join(reasons) if reasons else None), "attempts": views,
           "usage": measured(run)}
    schema.validate(doc, "observations")
    return doc


def measured(run: Run) -> Record:
    """The document's `usage`: what the finished tasks of the run's submissions used that their usage records do
    not hold yet (`Executor.usage`), asked only for submissions not complete (`rundir.usage.pending`); `reason`
    says why an executor could not be asked (nothing is then learned, and nothing is read as zero)."""
    groups: dict[str, list[tuple[Record, str, set[int]]]] = {}
    known: dict[str, set[int]] = {}
    for plan, job_id, held in usage.pending(run, time.time()):
        groups.setdefault(plan["executor"], []).append((plan, job_id, held))
        known[plan["submission_id"]] = held
    entries, problems = [], []
    for name, group in groups.items():
        found = executors.get(name).usage(run, group)
        if found.problem is not None:
            problems.append(found.problem)
        for plan, job_id, _ in group:
            sub = plan["submission_id"]
            fresh = [dict(figures, task_index=index) for index, figures in sorted(found.tasks.get(sub, {}).items())
                     if index not in known[sub]]
            if fresh:
                entries.append({"submission_id": sub, "job_id": job_id, "tasks": fresh})
    return {"submissions": entries, "reason": "; ".join(problems) if problems else None}


def by_executor(attempts: list[Record]) -> dict[str, list[Record]]:
    """The attempts grouped by the executor that runs each (in the order the executors first appear)."""
    groups: dict[str, list[Record]] = {}
    for attempt in attempts:
        groups.setdefault(attempt["scheduler"]["executor"], []).append(attempt)
    return groups
