"""The read model of a run: its shards, their newest attempts and evidence, and the rolled-up run status.

Reads: records only (never a scheduler, never bulk data); the sealed-shard index first, so only unsealed shards
are read. Writes: nothing, except that `run_status(update_index=True)` adds the shards it found sealed to the
index (the caller holds the run lock). The rules themselves are the pure functions of `taulib.rules`; this module
feeds them records, and converts evidence between its record (observation.json) and `rules.evidence.Evidence`.
"""

from __future__ import annotations

from typing import NamedTuple

from taulib import jsonio
from taulib.errors import Conflict
from taulib.rules import rollup
from taulib.rules.attempt import Verdict, effective_attempt
from taulib.rules.evidence import Evidence
from taulib.rundir import index, layout


def evidence_from_record(rec: dict | None) -> Evidence | None:
    if rec is None:
        return None
    deadline = rec.get("deadline")
    return Evidence(
        state=rec["state"], source=rec["source"], terminal=rec["terminal"],
        observed_at=jsonio.parse_time(rec["observed_at"]), changed_at=jsonio.parse_time(rec["changed_at"]),
        deadline_window=deadline["window"] if deadline else None,
        deadline_at=jsonio.parse_time(deadline["at"]) if deadline else None,
        exit_code=rec.get("exit_code"), reason=rec.get("reason"), classification=rec.get("classification"))


def evidence_record(ev: Evidence, attempt: dict, revision: int) -> dict:
    return {
        "kind": "tau.observation", "schema_version": 1, "run_id": attempt["run_id"],
        "shard_id": attempt["shard_id"], "attempt_id": attempt["attempt_id"], "revision": revision,
        "state": ev.state, "source": ev.source, "terminal": ev.terminal,
        "observed_at": jsonio.format_time(ev.observed_at), "changed_at": jsonio.format_time(ev.changed_at),
        "deadline": None if ev.deadline_window is None else
        {"window": ev.deadline_window, "at": jsonio.format_time(ev.deadline_at)},  # type: ignore[arg-type]
        "exit_code": ev.exit_code, "reason": ev.reason, "classification": ev.classification}


def read_evidence(run, sid: str, aid: str) -> Evidence | None:
    return evidence_from_record(run.dir.read(layout.attempt_file(sid, aid, "observation.json"), "tau.observation"))


def attempt_ids(run, sid: str) -> list[str]:
    """The shard's attempts in order; they must be numbered 1..n without gaps."""
    names = [n for n in run.dir.listdir(layout.attempts_dir(sid)) if n.startswith("attempt-")]
    names.sort(key=layout.attempt_ordinal)
    for position, name in enumerate(names, start=1):
        if layout.attempt_ordinal(name) != position:
            raise Conflict(f"attempts of {sid} are not numbered 1..n ({name} at position {position})",
                           shard_id=sid)
    return names


def latest_attempt(run, sid: str) -> dict | None:
    """The newest attempt record of a shard whose attempt.json exists (an attempt folder without a record is an
    interrupted submission that never reached the scheduler)."""
    for aid in reversed(attempt_ids(run, sid)):
        record = run.dir.read(layout.attempt_file(sid, aid, "attempt.json"), "tau.attempt")
        if record is not None:
            return record
    return None


class ShardView(NamedTuple):
    shard_id: str
    winner: dict | None
    attempt: dict | None
    evidence: Evidence | None
    verdict: Verdict | None  # the latest attempt's
    state: str
    reason: str


def shard_view(run, sid: str) -> ShardView:
    winner = run.dir.read(layout.winner(sid), "tau.winner")
    attempt = latest_attempt(run, sid)
    evidence = None
    verdict = None
    if attempt is not None:
        evidence = read_evidence(run, sid, attempt["attempt_id"])
        verdict = effective_attempt(attempt, evidence)
    if winner is not None and attempt is not None and winner["attempt_id"] != attempt["attempt_id"]:
        # a later attempt exists beside a winner (it was fenced or is still draining): the winner decides
        attempt = run.dir.read(layout.attempt_file(sid, winner["attempt_id"], "attempt.json"), "tau.attempt")
        evidence = None
        verdict = Verdict("succeeded", "the winner's attempt")
    state, reason = rollup.shard_state(winner is not None, verdict)
    return ShardView(sid, winner, attempt, evidence, verdict, state, reason)


def shard_status(view: ShardView) -> dict:
    ev = view.evidence
    return {
        "id": view.shard_id,
        "state": view.state,
        "reason": view.reason,
        "attempt": view.attempt["attempt_id"] if view.attempt else None,
        "winner": view.winner["attempt_id"] if view.winner else None,
        "evidence": {
            "attempt_state": view.attempt["state"] if view.attempt else None,
            "effective_state": view.verdict.state if view.verdict else None,
            "scheduler": None if view.attempt is None else view.attempt["scheduler"],
            "observation": None if ev is None else {
                "state": ev.state, "source": ev.source, "terminal": ev.terminal,
                "changed_at": jsonio.format_time(ev.changed_at),
                "deadline": None if ev.deadline_at is None else
                {"window": ev.deadline_window, "at": jsonio.format_time(ev.deadline_at)},
                "exit_code": ev.exit_code, "reason": ev.reason},
        },
    }


def sealed_status(sid: str, ordinal: int) -> dict:
    aid = layout.attempt_id(ordinal)
    return {"id": sid, "state": "succeeded", "reason": "sealed by its winner", "attempt": aid, "winner": aid,
            "evidence": None}


def run_status(run, sources: dict | None = None, update_index: bool = False) -> dict:
    """The rolled-up status. Sealed shards come from the sealed-shard index (`rundir.index`), so only unsealed
    shards are read; with `update_index`, shards found sealed are added to it (the caller holds the run lock)."""
    sealed = index.load(run)
    found: dict[int, int] = {}
    shards = []
    for position, sid in enumerate(run.shard_ids()):
        if sealed[position]:
            shards.append(sealed_status(sid, sealed[position]))
            continue
        view = shard_view(run, sid)
        if view.winner is not None:
            found[position] = view.winner["ordinal"]
            shards.append(sealed_status(sid, view.winner["ordinal"]))
        else:
            shards.append(shard_status(view))
    if update_index:
        index.add(run, found)
    counts = {state: 0 for state in rollup.SHARD_STATES}
    for shard in shards:
        counts[shard["state"]] += 1
    reason = rollup.degraded_reason(shards)
    return {
        "kind": "tau.status", "schema_version": 1, "run_id": run.run_id, "run_dir": run.path,
        "state": rollup.run_state(counts),
        "degraded": reason is not None,
        "reason": reason,
        "counts": counts,
        "retryable": [s["id"] for s in shards if s["state"] in rollup.RETRYABLE],
        "sources": sources,
        "shards": shards,
    }


def unsealed_shards(run) -> list[str]:
    """Shard ids the sealed-shard index does not list (they may still have a winner: check it)."""
    sealed = index.load(run)
    return [sid for position, sid in enumerate(run.shard_ids()) if not sealed[position]]
