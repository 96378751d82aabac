"""Observation (tau-observe RUN): ask the executors about a run's live attempts. Read-only.

Reads: the shards' records (the sealed-shard index first, so finished shards cost nothing) and whatever the
executor keeps: the local executor's records (`taulib.local.observe`), or one batched squeue and one batched sacct
for the recorded Slurm jobs (`taulib.slurm.observe`). Writes: nothing.
Promises: the live attempts are the newest attempt of each shard without a winner whose lifecycle is not finished;
the result is one normalised `tau.observations` document (schema `observations`), which tau-reconcile applies.
"""

from __future__ import annotations

from taulib import jsonio, schema
from taulib.rundir import layout, state


def live_attempts(run) -> list[dict]:
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


def observe(run) -> dict:
    attempts = live_attempts(run)
    observed_at = jsonio.now_rfc3339()
    executor = run.plan["scheduler"]["profile"]
    sources = {"queue": "observed", "accounting": "observed", "reason": None}
    local_attempts = [a for a in attempts if a["scheduler"]["executor"] == "local"]
    slurm_attempts = [a for a in attempts if a["scheduler"]["executor"] == "slurm"]
    views = []
    if local_attempts:
        from taulib.local import observe as local_observe

        views.extend(local_observe.observe(run, local_attempts))
    if slurm_attempts:
        from taulib.slurm import observe as slurm_observe

        slurm_views, sources = slurm_observe.observe(slurm_attempts)
        views.extend(slurm_views)
    doc = {"kind": "tau.observations", "schema_version": 1, "run_id": run.run_id, "observed_at": observed_at,
           "executor": executor, "sources": sources, "attempts": views}
    schema.validate(doc, "observations")
    return doc
