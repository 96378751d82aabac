"""Observation (tau-observe) and its application (tau-reconcile).

`observe` is read-only: it finds the run's live attempts (the newest attempt of each shard without a winner whose
lifecycle is not finished) and asks their executor about them, printing one normalised `tau.observations`
document. `apply` validates such a document, then under the run lock (shared) and each shard's lock feeds every
attempt's view and its persisted evidence to the pure rules of `taulib.reconcile`, persists what changed
(observation.json, revision + 1) and finalises attempts that terminal evidence ended. It needs nothing but the run
directory and the document.
"""

from __future__ import annotations

from taulib import jsonio, layout, locks, reconcile, schema, state
from taulib.errors import BadInput, NotFound


def live_attempts(run) -> list[dict]:
    out = []
    for sid in state.unsealed_shards(run):
        if run.dir.exists(layout.winner(sid)):
            continue
        attempt = state.latest_attempt(run, sid)
        if attempt is not None and attempt["state"] in ("submitted", "running"):
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
        from taulib import local

        views.extend(local.observe(run, local_attempts))
    if slurm_attempts:
        from taulib.slurm import observe as slurm_observe

        slurm_views, sources = slurm_observe.observe(slurm_attempts)
        views.extend(slurm_views)
    doc = {"kind": "tau.observations", "schema_version": 1, "run_id": run.run_id, "observed_at": observed_at,
           "executor": executor, "sources": sources, "attempts": views}
    schema.validate(doc, "observations")
    return doc


def validate_document(doc: object) -> dict:
    if not isinstance(doc, dict):
        raise BadInput("observations on standard input must be one JSON object (the output of tau-observe)")
    schema.validate(doc, "observations", "observations on standard input")
    return doc  # type: ignore[return-value]


def apply(run, doc: dict) -> dict:
    """Apply a validated observations document; returns the run status."""
    if doc["run_id"] != run.run_id:
        raise BadInput(f"observations on standard input are for run {doc['run_id']!r}, not {run.run_id!r}")
    observed_at = jsonio.parse_time(doc["observed_at"])
    queue_ok = doc["sources"]["queue"] == "observed"
    accounting_ok = doc["sources"]["accounting"] == "observed"
    seen_by_shard: dict[str, list[dict]] = {}
    for view in doc["attempts"]:
        try:
            run.check_shard(view["shard_id"])
        except NotFound:
            raise BadInput(f"observations name {view['shard_id']}, which run {run.run_id!r} does not have",
                           shard_id=view["shard_id"]) from None
        seen_by_shard.setdefault(view["shard_id"], []).append(view)
    changes = []
    with locks.hold(run.dir, "run", shared=True):
        for view in doc["attempts"]:  # refuse the whole document before writing any of it
            _recorded_attempt(run, view)
        for sid in sorted(seen_by_shard):
            with locks.hold(run.dir, locks.shard_lock_name(sid)):
                for view in seen_by_shard[sid]:
                    change = _apply_one(run, view, reconcile.Seen(observed_at, view["queue"], view["accounting"],
                                                                  queue_ok, accounting_ok))
                    if change:
                        changes.append(change)
        status = state.run_status(run, sources=doc["sources"], update_index=True)
    status["changes"] = changes
    return status


def _recorded_attempt(run, view: dict) -> dict:
    """The attempt record a view names, or BadInput when the run has no such attempt under that identity."""
    sid, aid = view["shard_id"], view["attempt_id"]
    attempt = run.dir.read(layout.attempt_file(sid, aid, "attempt.json"), "tau.attempt")
    if attempt is None:
        raise BadInput(f"observations name {sid}/{aid}, which this run does not have", shard_id=sid)
    if attempt["scheduler"] != view["scheduler"]:
        raise BadInput(f"observations give {sid}/{aid} another scheduler identity than the recorded one",
                       shard_id=sid)
    return attempt


def _apply_one(run, view: dict, seen: reconcile.Seen) -> dict | None:
    sid, aid = view["shard_id"], view["attempt_id"]
    rel = layout.attempt_file(sid, aid, "attempt.json")
    attempt = _recorded_attempt(run, view)
    obs_rel = layout.attempt_file(sid, aid, "observation.json")
    prev_record = run.dir.read(obs_rel, "tau.observation")
    prev = state.evidence_from_record(prev_record)
    rule, new = reconcile.next_evidence(prev, seen, attempt["windows"])
    if new is None:
        return None
    change = None
    if prev is None or new._replace(observed_at=0.0) != prev._replace(observed_at=0.0):
        revision = 1 if prev_record is None else prev_record["revision"] + 1
        run.dir.replace(obs_rel, state.evidence_record(new, attempt, revision))
        change = {"shard_id": sid, "attempt_id": aid, "rule": rule, "from": prev.state if prev else None,
                  "to": new.state}
    if new.terminal and attempt["state"] in ("submitted", "running"):
        # terminal evidence ends an unfinished attempt; COMPLETED without a finalised attempt is a failure too
        effective, reason = reconcile.effective_attempt(attempt, new)
        now = jsonio.now_rfc3339()
        record = dict(attempt, revision=attempt["revision"] + 1, updated_at=max(now, attempt["updated_at"]),
                      state="failed", terminal={"classification": reconcile.terminal_classification(new),
                                                "reason": reason, "exit_code": new.exit_code})
        run.dir.replace(rel, record)
        change = change or {"shard_id": sid, "attempt_id": aid, "rule": rule, "from": prev.state if prev else None,
                            "to": new.state}
        change["attempt"] = "failed"
    return change
