"""Reconciliation (tau-reconcile): a `tau.observations` document applied to the run's records under locks.

Reads: the document (validated against `observations` before anything is touched) and the records of the attempts
it names. Writes, under the run lock (shared) and each shard's lock: observation.json (revision + 1) where the
evidence changed, and attempt.json where terminal evidence ended an unfinished attempt (an attempt only its
submission recorded gets its revision-1 attempt.json first: `rundir.state.record_attempt`); the submissions'
usage.json with the figures the document's `usage` brings (`rundir.usage.merge`); then, under the local
executor, the folder of a supervisor that died without ending (`Executor.sweep`); the temp file of a
crashed publish in the run's own folder; then the sealed-shard index.
Promises: the rules are the pure table `rules.evidence` and the verdict `rules.attempt`; a document that names an
attempt this run does not have, or gives it another scheduler identity, is refused whole before anything is
written; nothing but the run directory and the document is needed, so any fresh process can reconcile.
With a status file (`--status-file PATH`, checked before anything is written), the status is computed and written
there under `status.lock`, by the mutable replace protocol (a private temp file of its own, fsync, rename): readers
of PATH see one whole status or the one before, and never an older one after a newer.
"""

from __future__ import annotations

import os
import stat
import time
from typing import TYPE_CHECKING, NamedTuple

from taulib import executors, failpoints, jsonio, schema
from taulib.errors import BadInput, Busy, NotFound, Refused, UsageError
from taulib.fs.tree import Tree
from taulib.rules import evidence as evidence_rules
from taulib.rules.attempt import effective_attempt, terminal_classification
from taulib.rundir import layout, locks, state, usage
from taulib.rundir.status import run_status

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rules.evidence import Evidence
    from taulib.rundir.run import Run


def validate_document(doc: object) -> Record:
    if not isinstance(doc, dict):
        raise BadInput("observations on standard input must be one JSON object (the output of tau-observe)")
    schema.validate(doc, "observations", "observations on standard input")
    return doc


class StatusFile:
    """Where `--status-file PATH` writes: a file in an existing folder outside the run directory."""

    def __init__(self, run: Run, path: str) -> None:
        if not path or "\0" in path:
            raise UsageError("--status-file must be a path")
        full = os.path.abspath(path)
        folder, self.name = os.path.split(full)
        if not self.name or self.name in (".", ".."):
            raise UsageError(f"--status-file {path!r} has no file name")
        if len(os.fsencode(self.name)) > 255 - BESIDE_EXTRA:
            raise UsageError(f"--status-file's name is too long: {255 - BESIDE_EXTRA} bytes at most")
        real_folder, real_run = os.path.realpath(folder), os.path.realpath(run.path)
        if real_folder == real_run or real_folder.startswith(real_run + "/"):
            raise UsageError(f"--status-file {path!r} is inside the run directory, which holds only tau's records: "
                             "keep it beside the run (RUN.status.json)")
        try:
            self.tree = Tree.open(folder, label="the status file's folder", follow=True)
        except NotFound:
            raise NotFound(f"--status-file {path!r}: its folder {folder!r} does not exist") from None
        self.path = os.path.join(self.tree.path, self.name)
        st = self.tree.lstat(self.name)
        if st is not None and stat.S_ISDIR(st.st_mode):
            self.tree.close()
            raise Refused(f"--status-file {path!r} is a folder", path=self.path)

    def write(self, status: Record) -> None:
        self.tree.replace_beside(self.name, jsonio.canonical(status))

    def close(self) -> None:
        self.tree.close()


BESIDE_EXTRA = len(".") + len(".tau-") + 16 + len(".tmp")  # what `atomic.beside_temp` adds to a name


def apply(run: Run, doc: Record, status_file: str | None = None) -> Record:
    """Apply a validated observations document; returns the run status with the `changes` made (also written to
    `status_file` when given)."""
    target = None if status_file is None else StatusFile(run, status_file)
    try:
        return _apply(run, doc, target)
    finally:
        if target is not None:
            target.close()


def _apply(run: Run, doc: Record, target: StatusFile | None) -> Record:
    if doc["run_id"] != run.run_id:
        raise BadInput(f"observations on standard input are for run {doc['run_id']!r}, not {run.run_id!r}")
    now = time.time()
    seen = seen_of(doc, now)
    seen_by_shard: dict[str, list[Record]] = {}
    for view in doc["attempts"]:
        try:
            run.check_shard(view["shard_id"])
        except NotFound:
            raise BadInput(f"observations name {view['shard_id']}, which run {run.run_id!r} does not have",
                           shard_id=view["shard_id"]) from None
        seen_by_shard.setdefault(view["shard_id"], []).append(view)
    changes: list[Record] = []
    with locks.hold(run.dir, "run", shared=True):
        submitted = state.Submitted(run)  # the attempts that only their submissions record yet
        for view in doc["attempts"]:  # refuse the whole document before writing any of it
            _not_before(view, _recorded_attempt(run, view, submitted), seen[(view["shard_id"], view["attempt_id"])][1])
        measured = usage.check(run, doc.get("usage", {"submissions": []})["submissions"])
        for sid in sorted(seen_by_shard):
            with locks.hold(run.dir, locks.shard_lock_name(sid)):
                for view in seen_by_shard[sid]:
                    change = _apply_one(run, view, seen[(sid, view["attempt_id"])][1], now, submitted)
                    if change:
                        changes.append(change)
        for plan, entry in measured:
            usage.merge(run, plan, entry)
        failpoints.hit("reconcile.applied")  # the evidence is written; the index not yet
        chosen = executors.of(run)
        chosen.sweep(run)  # what the executor's own processes left when they died (a local supervisor)
        parallel = chosen.limits(run.plan).parallel
        _tidy_run_folder(run)
        if target is None:
            status = run_status(run, parallel=parallel, sources=doc["sources"], update_index=True, now=now,
                                usage_reason=doc.get("usage", {}).get("reason"))
            status["changes"] = changes
            return status
        with locks.hold(run.dir, "status"):  # computed and written in turn: never an older status after a newer
            status = run_status(run, parallel=parallel, sources=doc["sources"], update_index=True, now=now,
                                usage_reason=doc.get("usage", {}).get("reason"))
            status["changes"] = changes
            target.write(status)
    return status


def _tidy_run_folder(run: Run) -> None:
    """A publish into the run's own folder (schema.json, cancel.json) that crashed leaves a temp file no later
    write there would remove, since those records are written once: it is removed under the root lock that owns
    the folder, when the lock is free (a writer holding it now may be mid-publish)."""
    if not run.dir.has_debris(""):
        return
    try:
        with locks.hold(run.dir, "root", timeout=0):
            run.dir.clean_debris("")
    except Busy:
        pass


def seen_of(doc: Record, now: float) -> dict[tuple[str, str], tuple[Record, evidence_rules.Seen]]:
    """The `Seen` of every attempt a validated document names, {(shard id, attempt id): (view, Seen)}. A document
    dated beyond this machine's clock (more than the tolerance) is refused: it would hide later evidence."""
    try:
        observed_at = jsonio.parse_time(doc["observed_at"])
    except BadInput as exc:
        raise BadInput(f"observations on standard input: observed_at {exc.message}") from None
    early = evidence_rules.ahead(observed_at, now)
    if early is not None:
        raise BadInput(f"observations on standard input are dated {doc['observed_at']}, {early:.0f}s ahead of this "
                       "machine's clock: tau-reconcile refuses a document from the future, which would hide later "
                       "evidence; check the clocks of the machines that observe and reconcile",
                       observed_at=doc["observed_at"])
    out = {}
    for v in doc["attempts"]:  # a source is observed for an attempt when the document's and its own say so
        own = v.get("sources") or doc["sources"]
        queue_ok = doc["sources"]["queue"] == own["queue"] == "observed"
        accounting_ok = doc["sources"]["accounting"] == own["accounting"] == "observed"
        out[(v["shard_id"], v["attempt_id"])] = (v, evidence_rules.Seen(observed_at, v["queue"], v["accounting"],
                                                                        queue_ok, accounting_ok))
    return out


class Next(NamedTuple):
    """What one view does to its attempt's evidence (`next_for`)."""

    attempt: Record  # the attempt's record
    prev_record: Record | None  # its persisted observation.json
    prev: Evidence | None  # the evidence that record holds, clamped
    rule: str  # the name of the rule of `rules.evidence` that applies
    new: Evidence | None  # the evidence after the view (None only when there was none and the rule kept it)


def next_for(run: Run, view: Record, seen: evidence_rules.Seen, now: float,
             submitted: state.Submitted | None = None) -> Next:
    """What the view of one attempt does to its evidence (`Next`); the persisted evidence is read `clamped` to
    `now`: a time from a fast clock becomes the time of this observation, so it never hides the new evidence."""
    sid, aid = view["shard_id"], view["attempt_id"]
    attempt = _recorded_attempt(run, view, submitted)
    prev_record = run.dir.read(layout.attempt_file(sid, aid, "observation.json"), "tau.observation")
    prev = evidence_rules.clamped(state.evidence_from_record(prev_record), now, attempt["windows"],
                                  present=seen.observed_at)
    rule, new = evidence_rules.next_evidence(prev, seen, attempt["windows"])
    return Next(attempt, prev_record, prev, rule, new)


def _not_before(view: Record, attempt: Record, seen: evidence_rules.Seen) -> None:
    """BadInput when the document is dated before the submission of an attempt it names (`rules.evidence.predates`)."""
    early = evidence_rules.predates(seen.observed_at, jsonio.parse_time(attempt["created_at"]))
    if early is not None:
        raise BadInput(f"observations on standard input are dated {early:.0f}s before {view['shard_id']}/"
                       f"{view['attempt_id']} was submitted ({attempt['created_at']}): evidence never predates its "
                       "attempt, so tau-reconcile refuses the document; observe the run again, and check the clocks "
                       "of the machines that submit and observe", shard_id=view["shard_id"])


def _recorded_attempt(run: Run, view: Record, submitted: state.Submitted | None = None) -> Record:
    """The attempt record a view names, or BadInput when the run has no such attempt under that identity."""
    sid, aid = view["shard_id"], view["attempt_id"]
    attempt = state.attempt_record(run, sid, aid, submitted)
    if attempt is None:
        raise BadInput(f"observations name {sid}/{aid}, which this run does not have", shard_id=sid)
    if attempt["scheduler"] != view["scheduler"]:
        raise BadInput(f"observations give {sid}/{aid} another scheduler identity than the recorded one",
                       shard_id=sid)
    return attempt


def _apply_one(run: Run, view: Record, seen: evidence_rules.Seen, now: float,
               submitted: state.Submitted | None = None) -> Record | None:
    sid, aid = view["shard_id"], view["attempt_id"]
    obs_rel = layout.attempt_file(sid, aid, "observation.json")
    attempt, prev_record, prev, rule, new = next_for(run, view, seen, now, submitted)
    if new is None:
        return None
    change: Record | None = None
    if evidence_rules.changed(prev, new):
        revision = 1 if prev_record is None else prev_record["revision"] + 1
        run.dir.replace(obs_rel, state.evidence_record(new, attempt, revision))
        change = {"shard_id": sid, "attempt_id": aid, "rule": rule, "from": prev.state if prev else None,
                  "to": new.state}
    if new.terminal and attempt["state"] in ("submitted", "running"):
        # terminal evidence ends an unfinished attempt; COMPLETED without a finalised attempt is a failure too
        verdict = effective_attempt(attempt, new, state.attempt_stop(run, sid, aid))
        state.record_attempt(run, attempt)  # an attempt only its submission recorded gets its attempt.json first
        stamp = jsonio.now_rfc3339()
        record = dict(attempt, revision=attempt["revision"] + 1, updated_at=max(stamp, attempt["updated_at"]),
                      state="failed", terminal={"classification": terminal_classification(new),
                                                "reason": verdict.reason, "exit_code": new.exit_code})
        run.dir.replace(layout.attempt_file(sid, aid, "attempt.json"), record)
        change = change or {"shard_id": sid, "attempt_id": aid, "rule": rule, "from": prev.state if prev else None,
                            "to": new.state}
        change["attempt"] = "failed"
    return change
