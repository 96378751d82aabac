"""The read model of a run, shard by shard: its winner, cancellation, newest attempt, evidence and state.

Reads: records only (never a scheduler, never bulk data). Writes: nothing. The rules themselves are the pure
functions of `taulib.rules`; this module feeds them records, and converts evidence between its record
(observation.json) and `rules.evidence.Evidence`. The rolled-up run status is `rundir.status`.
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


def run_cancel(run) -> dict | None:
    """The run's cancellation record (tau-cancel RUN), or None."""
    return run.dir.read(layout.CANCEL, "tau.cancel")


def cancellation(run, sid: str, whole_run: dict | None) -> dict | None:
    """The record that cancels shard `sid`: the run's (`whole_run`, read once by the caller) or its own."""
    return whole_run or run.dir.read(layout.shard_cancel(sid), "tau.cancel")


def cancel_reason(record: dict) -> str:
    return f"cancelled by the user at {record['requested_at']}"


def attempt_ids(run, sid: str) -> list[str]:
    """The shard's attempts in order; they must be numbered 1..n without gaps. A name in the attempts folder that
    is not an attempt's (tau never makes one) is no attempt and is ignored."""
    names = [n for n in run.dir.listdir(layout.attempts_dir(sid)) if layout.is_attempt_id(n)]
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
    attempts: int = 0  # the ordinal of its newest attempt
    cancelled: dict | None = None  # the cancellation record that applies to it


def shard_view(run, sid: str, whole_run_cancel: dict | None = None,
               evidence: dict[tuple[str, str], Evidence] | None = None) -> ShardView:
    """What the records say of shard `sid`. `evidence` replaces the persisted evidence of the attempts it names
    (tau-status: the evidence tau-reconcile would persist, computed and not written)."""
    winner = run.dir.read(layout.winner(sid), "tau.winner")
    attempt = latest_attempt(run, sid)
    found = None
    verdict = None
    if attempt is not None:
        key = (sid, attempt["attempt_id"])
        found = evidence[key] if evidence and key in evidence else read_evidence(run, sid, attempt["attempt_id"])
        verdict = effective_attempt(attempt, found)
    attempts = attempt["ordinal"] if attempt is not None else 0
    if winner is not None and attempt is not None and winner["attempt_id"] != attempt["attempt_id"]:
        # a later attempt exists beside a winner (it was fenced or is still draining): the winner decides
        attempt = run.dir.read(layout.attempt_file(sid, winner["attempt_id"], "attempt.json"), "tau.attempt")
        found = None
        verdict = Verdict("succeeded", "the winner's attempt")
    cancelled = None if winner is not None else cancellation(run, sid, whole_run_cancel)
    state, reason = rollup.shard_state(winner is not None, verdict, attempts, run.plan["retry"]["max_attempts"],
                                       cancel_reason(cancelled) if cancelled else None)
    return ShardView(sid, winner, attempt, found, verdict, state, reason, attempts, cancelled)


def unsealed_shards(run) -> list[str]:
    """Shard ids the sealed-shard index does not list (they may still have a winner: check it)."""
    sealed = index.load(run)
    return [sid for position, sid in enumerate(run.shard_ids()) if not sealed[position]]
