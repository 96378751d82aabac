"""The read model of a run, shard by shard: its winner, cancellation, newest attempt, evidence and state.

Reads: records only (never a scheduler, never bulk data). Writes: nothing, except `record_attempt` (below). The
rules themselves are the pure functions of `taulib.rules`; this module feeds them records, and converts evidence
between its record (observation.json) and `rules.evidence.Evidence`. A shard's records are read once into its
facts (`facts`), and one rule decides its state, reason, budget spent, next attempt and stall from them
(`rules.shard.decide`, through `shard_view`). The rolled-up run status is `rundir.status`.

An attempt's record: its attempt.json; or, in a format-2 run (`rundir.run`), while nobody has changed the attempt
yet, the revision-1 record its bound submission implies (`Submitted`: the submission's plan, its status's job id
and the run's plan), byte for byte the attempt.json that tau-submit published in format 1. So tau-submit writes
nothing per shard: status SUBMITTED is the one commit point that gives every task its attempt, and the first
process that changes an attempt (its allocation, or tau-reconcile ending it) publishes that record first, under
the shard's lock (`record_attempt`; failpoint attempt.recorded), then changes it as ever.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from typing import TYPE_CHECKING, Any

from taulib import failpoints, jsonio
from taulib.errors import BadInput, Conflict
from taulib.rules.evidence import Evidence
from taulib.rules.shard import Facts, decide, following, policy
from taulib.rules.shard import cancel_reason as cancelled_by_user
from taulib.rundir import index, layout
from taulib.rundir.journal import SUBMISSIONS, Journal, compact_tasks, range_task_index

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rules.escalation import Next
    from taulib.rules.shard import Decision
    from taulib.rundir.run import Run


def evidence_from_record(rec: Record | None) -> Evidence | None:
    if rec is None:
        return None
    deadline = rec.get("deadline")
    return Evidence(
        state=rec["state"], source=rec["source"], terminal=rec["terminal"],
        observed_at=jsonio.parse_time(rec["observed_at"]), changed_at=jsonio.parse_time(rec["changed_at"]),
        deadline_window=deadline["window"] if deadline else None,
        deadline_at=jsonio.parse_time(deadline["at"]) if deadline else None,
        exit_code=rec.get("exit_code"), reason=rec.get("reason"), classification=rec.get("classification"))


def evidence_record(ev: Evidence, attempt: Record, revision: int) -> Record:
    return {
        "kind": "tau.observation", "schema_version": 1, "run_id": attempt["run_id"],
        "shard_id": attempt["shard_id"], "attempt_id": attempt["attempt_id"], "revision": revision,
        "state": ev.state, "source": ev.source, "terminal": ev.terminal,
        "observed_at": jsonio.format_time(ev.observed_at), "changed_at": jsonio.format_time(ev.changed_at),
        "deadline": _deadline_record(ev),
        "exit_code": ev.exit_code, "reason": ev.reason, "classification": ev.classification}


def _deadline_record(ev: Evidence) -> Record | None:
    if ev.deadline_window is None:
        return None
    assert ev.deadline_at is not None  # the rules set a deadline's window and its time together
    return {"window": ev.deadline_window, "at": jsonio.format_time(ev.deadline_at)}


def read_evidence(run: Run, sid: str, aid: str) -> Evidence | None:
    return evidence_from_record(run.dir.read(layout.attempt_file(sid, aid, "observation.json"), "tau.observation"))


def cancel_chain(run: Run, sid: str | None) -> tuple[Record | None, int]:
    """(the cancellation in force of the run (sid None) or of shard `sid`, or None; its generation, or the one a new
    cancellation takes). A cancellation is lifted by the reopen record of its generation, and may be followed by
    another (`layout.cancel_record`); one read when nothing was ever cancelled."""
    generation = 1
    while True:
        record = run.dir.read(layout.cancel_record(sid, generation), "tau.cancel")
        if record is None:
            return None, generation
        if not run.dir.exists(layout.reopen_record(sid, generation)):
            return record, generation
        generation += 1


def run_cancel(run: Run) -> Record | None:
    """The run's cancellation in force (tau-cancel RUN, not lifted by tau-retry --reopen), or None."""
    return cancel_chain(run, None)[0]


def cancellation(run: Run, sid: str, whole_run: Record | None) -> Record | None:
    """The record that cancels shard `sid`: the run's (`whole_run`, read once by the caller) or its own in force."""
    return whole_run or cancel_chain(run, sid)[0]


def cancel_reason(record: Record) -> str:
    return cancelled_by_user(record["requested_at"])


def attempt_stop(run: Run, sid: str, aid: str) -> str | None:
    """Why the attempt was asked to stop without its shard being cancelled (its stop.json), or None."""
    record = run.dir.read(layout.attempt_stop(sid, aid), "tau.stop")
    return None if record is None else record["reason"]


def submitted_record(run: Run, plan: Record, job_id: str, shard: int, task_index: int, ordinal: int) -> Record:
    """The attempt.json revision 1 of a task (shard index `shard`, array task `task_index`) of a bound submission:
    what tau-submit publishes in format 1, and what a format-2 attempt's record is until it first changes."""
    sid, aid = layout.shard_id(shard), layout.attempt_id(ordinal)
    dataset = (layout.shard_dataset(sid) if run.plan["resume"] == "always"
               else layout.attempt_file(sid, aid, "dataset"))
    return {
        "kind": "tau.attempt", "schema_version": 1, "run_id": run.run_id, "shard_id": sid, "attempt_id": aid,
        "ordinal": ordinal, "plan_sha256": run.plan_sha256, "submission_id": plan["submission_id"],
        "scheduler": {"executor": plan["executor"], "job_id": job_id, "task_index": task_index},
        "windows": run.plan["windows"], "state": "submitted", "terminal": None, "dataset": dataset, "revision": 1,
        "created_at": plan["created_at"], "updated_at": plan["created_at"], "started_at": None, "restarts": 0}


class Submitted:
    """The attempts the run's bound (SUBMITTED) submissions gave, by shard: a snapshot of the submission journal,
    read once for a pass over many shards (a caller that looks at one shard lets the functions below read it). In a
    format-1 run it is empty: every attempt there has its attempt.json."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._entries: list[tuple[Record, str, list[int], list[Record]]] = []
        if run.format < 2:
            return
        for plan, status in Journal(run, SUBMISSIONS).entries():
            if status is None or status["state"] != "submitted":
                continue
            ranges = plan["task_ranges"] if "task_ranges" in plan else compact_tasks(
                sorted(plan["tasks"], key=lambda t: layout.shard_index(t["shard_id"])))
            self._entries.append((plan, status["job_id"], [r["first"] for r in ranges], ranges))

    def ordinals(self, shard: int) -> dict[int, tuple[Record, str, int]]:
        """{ordinal: (submission plan, job id, array task index)} of the attempts the bound submissions gave the
        shard of index `shard`."""
        found: dict[int, tuple[Record, str, int]] = {}
        for plan, job_id, firsts, ranges in self._entries:
            position = bisect_right(firsts, shard) - 1
            if position >= 0 and shard < firsts[position] + ranges[position]["count"]:
                found[ranges[position]["ordinal"]] = (plan, job_id, range_task_index(ranges[position], shard))
        return found

    def record(self, shard: int, ordinal: int) -> Record | None:
        """The revision-1 record of that attempt when a bound submission gave it, else None."""
        given = self.ordinals(shard).get(ordinal)
        return None if given is None else submitted_record(self.run, given[0], given[1], shard, given[2], ordinal)


def attempt_ids(run: Run, sid: str, submitted: Submitted | None = None, on_disk: bool = True) -> list[str]:
    """The shard's attempts in order: its attempt folders and, in a format-2 run, the attempts its bound submissions
    gave it; they must be numbered 1..n without gaps (else Conflict). A name in the attempts folder that is not an
    attempt's (tau never makes one) is refused (BadInput, naming it): a run that contradicts its own records is
    never reinterpreted. `on_disk=False`: the caller knows the shard has no folder."""
    names = run.dir.listdir(layout.attempts_dir(sid)) if on_disk else []
    for name in names:
        if not layout.is_attempt_id(name):
            shown = run.dir.show(f"{layout.attempts_dir(sid)}/{name}")
            raise BadInput(f"{shown} is not an attempt of {sid}: an attempts folder holds only attempt-NNNN "
                           "folders, numbered 1..n; tau never makes any other name there, so the run was edited "
                           "by hand or by another tool", path=shown, shard_id=sid)
    if run.format >= 2:
        given = (submitted if submitted is not None else Submitted(run)).ordinals(layout.shard_index(sid))
        names = sorted(set(names) | {layout.attempt_id(o) for o in given}, key=layout.attempt_ordinal)
    names.sort(key=layout.attempt_ordinal)
    for position, name in enumerate(names, start=1):
        if layout.attempt_ordinal(name) != position:
            shown = run.dir.show(f"{layout.attempts_dir(sid)}/{name}")
            raise Conflict(f"{shown}: the attempts of {sid} are not numbered 1..n ({name} where "
                           f"{layout.attempt_id(position)} should be); the run was edited by hand or by another tool",
                           path=shown, shard_id=sid)
    return names


def attempt_record(run: Run, sid: str, aid: str, submitted: Submitted | None = None) -> Record | None:
    """The attempt's record: its attempt.json, or (format 2) the revision 1 its bound submission implies; None
    when neither exists."""
    record = run.dir.read(layout.attempt_file(sid, aid, "attempt.json"), "tau.attempt")
    if record is not None or run.format < 2:
        return record
    return (submitted if submitted is not None else Submitted(run)).record(layout.shard_index(sid),
                                                                           layout.attempt_ordinal(aid))


def attempt_request(run: Run, attempt: Record, plans: dict[str, Record | None] | None = None) -> Record:
    """What the attempt's allocation asked for, {mem, time} in Slurm's spelling (None where nothing was asked): its
    submission's `resources` (grown on retry by `retry.escalate`, or granted by tau-retry --mem/--time), else the
    request its executor makes of the plan's own section. `plans` caches submission plans by id across calls."""
    from taulib import executors

    sub_id = attempt["submission_id"]
    cache = plans if plans is not None else {}
    if sub_id not in cache:
        cache[sub_id] = run.dir.read(f"{SUBMISSIONS.folder}/{sub_id}/plan.json", "tau.submission-plan")
    plan = cache[sub_id]
    if plan is not None and plan.get("resources") is not None:
        return {"mem": plan["resources"].get("mem"), "time": plan["resources"].get("time")}
    name = plan["executor"] if plan is not None else run.plan["scheduler"]["profile"]
    return dict(executors.get(name).request(run.plan["scheduler"].get(name) or {}))


def latest_attempt(run: Run, sid: str, submitted: Submitted | None = None, on_disk: bool = True) -> Record | None:
    """The newest attempt record of a shard (an attempt folder without a record, of no bound submission, is an
    interrupted submission that never reached the scheduler)."""
    if submitted is None and run.format >= 2:
        submitted = Submitted(run)
    for aid in reversed(attempt_ids(run, sid, submitted, on_disk)):
        record = attempt_record(run, sid, aid, submitted)
        if record is not None:
            return record
    return None


def record_attempt(run: Run, attempt: Record) -> bool:
    """Publish the attempt.json of an attempt only its submission records yet (format 2), before the caller
    changes it; the caller holds the shard's lock. True when this call published it (failpoint attempt.recorded
    after); an attempt that has its attempt.json is left alone."""
    rel = layout.attempt_file(attempt["shard_id"], attempt["attempt_id"], "attempt.json")
    if attempt["revision"] != 1 or run.dir.exists(rel):
        return False
    run.dir.publish(rel, attempt)
    failpoints.hit("attempt.recorded")  # the record its submission implied is on disk; not yet changed
    return True


class ShardView:
    """A shard as its records say: its winner record (None without one), the facts read once (`facts`) and the
    decision of the rules on them (`rules.shard.decide`)."""

    __slots__ = ("shard_id", "winner", "facts", "decision")

    def __init__(self, shard_id: str, winner: Record | None, facts: Facts, decision: Decision) -> None:
        self.shard_id, self.winner, self.facts, self.decision = shard_id, winner, facts, decision


def shard_view(run: Run, sid: str, whole_run_cancel: Record | None = None,
               evidence: dict[tuple[str, str], Evidence] | None = None,
               submitted: Submitted | None = None, figures: dict[tuple[str, str], Record] | None = None,
               plans: dict[str, Record | None] | None = None, now: float | None = None) -> ShardView:
    """What the records say of shard `sid`, decided by the one rule of a shard (`rules.shard.decide`) at the
    observer's clock `now`; the other arguments are `facts`'."""
    winner, found = facts(run, sid, whole_run_cancel, evidence, submitted, figures, plans)
    return ShardView(sid, winner, found, decide(found, policy(run.plan), time.time() if now is None else now))


def facts(run: Run, sid: str, whole_run_cancel: Record | None = None,
          evidence: dict[tuple[str, str], Evidence] | None = None, submitted: Submitted | None = None,
          figures: dict[tuple[str, str], Record] | None = None, plans: dict[str, Record | None] | None = None
          ) -> tuple[Record | None, Facts]:
    """(its winner record, the facts of shard `sid`), read once (`rules.shard.Facts` says what each is).
    `evidence` replaces the persisted evidence of the attempts it names (tau-status: the evidence tau-reconcile
    would persist, computed and not written); `submitted`, the journal's snapshot of a pass over many shards;
    `figures`, what the attempts used (`rundir.usage.load`, read here when None and the plan escalates); `plans`, a
    cache of submission plans. A shard with a winner is read no further than the winning attempt: the winner seals
    it. The records only some decisions weigh are read only where they can exist: a result when the plan escalates
    and the attempt did not succeed, the readiness of an attempt that has not ended, each attempt's end when a
    cancellation was ever recorded."""
    if submitted is None and run.format >= 2:
        submitted = Submitted(run)
    winner = run.dir.read(layout.winner(sid), "tau.winner")
    attempt = latest_attempt(run, sid, submitted)
    if winner is not None:
        if attempt is None or winner["attempt_id"] != attempt["attempt_id"]:
            # a later attempt exists beside a winner (it was fenced or is still draining): the winner decides
            attempt = attempt_record(run, sid, winner["attempt_id"], submitted)
        return winner, Facts(won=winner["ordinal"], attempt=attempt)
    cancelled = cancellation(run, sid, whole_run_cancel)
    requested = None if cancelled is None else cancelled["requested_at"]
    if attempt is None:
        return None, Facts(cancelled=requested)
    aid, ordinal = attempt["attempt_id"], attempt["ordinal"]
    key = (sid, aid)
    found = evidence[key] if evidence and key in evidence else read_evidence(run, sid, aid)
    stops = [run.dir.read(layout.attempt_stop(sid, layout.attempt_id(o)), "tau.stop") for o in range(1, ordinal + 1)]
    classified = None
    if cancelled is not None or run.dir.exists(layout.cancel_record(sid, 1)) \
            or run.dir.exists(layout.cancel_record(None, 1)):
        records = [attempt_record(run, sid, layout.attempt_id(o), submitted) for o in range(1, ordinal)]
        classified = tuple(None if r is None else (r.get("terminal") or {}).get("classification")
                           for r in [*records, attempt])
    readiness = beat_at = progress_at = None
    records_held = 0
    if attempt["state"] not in ("succeeded", "failed"):
        readiness = run.dir.read(layout.attempt_file(sid, aid, "readiness.json"), "tau.readiness")
        if readiness is not None:
            beat_at = jsonio.parse_time(readiness["updated_at"])
            progressed = readiness.get("progress_at")
            progress_at = None if progressed is None else jsonio.parse_time(progressed)
            held = run.shard(sid)
            records_held = held["record_end"] - held["record_start"]
    return None, Facts(evidence=found, stopped=None if stops[-1] is None else stops[-1]["reason"],
                       stopped_by=tuple(None if stop is None else stop["by"] for stop in stops),
                       classified=classified, cancelled=requested, readiness=readiness, beat_at=beat_at,
                       progress_at=progress_at, records=records_held,
                       **_ended(run, attempt, figures, plans))


def _ended(run: Run, attempt: Record, figures: dict[tuple[str, str], Record] | None,
           plans: dict[str, Record | None] | None) -> dict[str, Any]:
    """The facts of an attempt that what follows it weighs (`rules.shard.following`): its record, its request,
    its executor's figures, its result (read only when the plan escalates and it did not succeed) and when its
    record last changed."""
    sid, aid = attempt["shard_id"], attempt["attempt_id"]
    escalate = run.plan["retry"].get("escalate")
    if figures is None and escalate and attempt["state"] != "succeeded":
        from taulib.rundir import usage

        figures = usage.load(run)
    result = None
    if escalate and attempt["state"] != "succeeded":
        result = run.dir.read(layout.attempt_file(sid, aid, "result.json"), "tau.result")
    return {"attempt": attempt, "request": attempt_request(run, attempt, plans),
            "measured": (figures or {}).get((sid, aid)), "result": result,
            "updated_at": jsonio.parse_time(attempt["updated_at"])}


def next_attempt(run: Run, attempt: Record, evidence: Evidence | None,
                 figures: dict[tuple[str, str], Record] | None = None, plans: dict[str, Record | None] | None = None,
                 now: float | None = None) -> Next:
    """What the next attempt after `attempt` (failed, with scheduler `evidence`) does (`rules.shard.following`)."""
    return following(Facts(evidence=evidence, **_ended(run, attempt, figures, plans)),
                     policy(run.plan), time.time() if now is None else now)


def unsealed_shards(run: Run) -> list[str]:
    """Shard ids the sealed-shard index does not list (they may still have a winner: check it)."""
    sealed = index.load(run)
    return [sid for position, sid in enumerate(run.shard_ids()) if not sealed[position]]
