"""Winners: validating a shard's whole chain and publishing exactly one immutable winner (tau-winner(1)).

Chain: the shard's latest attempt is succeeded and is not contradicted by terminal scheduler evidence; its
result.json is complete (actual == requested == the shard's range) and names manifest.json by path and sha256;
the manifest's ids, provenance (the plan digest), record counts and dataset folder are consistent; every file is
present with its recorded size, sha256, Parquet row count and schema digest.

Reads: the shard's attempt, result, manifest, evidence and winner records, and every file of the candidate.
Writes: winner.json (and, as the shard is sealed, removes what crashed writers left in its ended attempts'
folders), then the shard's segment of the sealed-shard index. The checks are the pure rule `rules.chain`.
Protocol: read and check the records (shard lock), hash the files (no lock but the shard's resume lock when the
dataset is shard-owned; failpoint winner.validated), then under the shard lock re-read the records (unchanged) and
publish winner.json with link-no-overwrite (failpoint winner.published); then, the shard lock released, add the
shard to its index segment (`rundir.index.add`, waiting at most NOTE_WAIT seconds for the index's lock). The
index is a cache: when it is busy or cannot be written, the next tau-reconcile adds the shard, and until
then readers read the shard's winner. Concurrent publishers converge: exactly one creates the winner, the others
see it and report it. An existing winner is re-validated (records only) on every call.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING

from taulib import failpoints, jsonio
from taulib.errors import CheckFailed, Conflict, NotFound, TauError
from taulib.rules import chain as chain_rules
from taulib.rules.attempt import effective_attempt
from taulib.rules.chain import Chain
from taulib.rundir import index, layout, locks, state

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run


def read_chain(run: Run, sid: str, aid: str, submitted: state.Submitted | None = None) -> Chain:
    """The records of the chain of attempt `aid` (CheckFailed when the result or the manifest is missing)."""
    attempt = state.attempt_record(run, sid, aid, submitted)
    if attempt is None:
        shown = run.dir.show(layout.attempt_file(sid, aid, "attempt.json"))
        raise NotFound(f"{shown} does not exist", path=shown)
    result_bytes = run.dir.read_bytes(layout.attempt_file(sid, aid, "result.json"))
    manifest_bytes = run.dir.read_bytes(layout.attempt_file(sid, aid, "manifest.json"))
    if result_bytes is None:
        raise CheckFailed(f"{sid}/{aid} has no result.json: the attempt never finished", shard_id=sid)
    if manifest_bytes is None:
        raise CheckFailed(f"{sid}/{aid} has no candidate manifest", shard_id=sid)
    result = run.dir.decode(layout.attempt_file(sid, aid, "result.json"), result_bytes, "tau.result")
    manifest = run.dir.decode(layout.attempt_file(sid, aid, "manifest.json"), manifest_bytes, "tau.manifest")
    return Chain(attempt, result, manifest, jsonio.sha256_hex(result_bytes), jsonio.sha256_hex(manifest_bytes))


def check_chain(run: Run, sid: str, aid: str, winner: Record | None = None,
                submitted: state.Submitted | None = None) -> Chain:
    """The chain of attempt `aid` when it holds (`rules.chain`), as a candidate or, given `winner`, as the
    published winner's; CheckFailed naming the first problem otherwise. `submitted`: the journal's snapshot (read
    only when needed: a winner's attempt always has its attempt.json)."""
    shard = run.shard(sid)
    chain = read_chain(run, sid, aid, submitted)
    newest = verdict = None
    if winner is None:
        latest = state.latest_attempt(run, sid, submitted)
        newest = latest["attempt_id"] if latest is not None else None
        verdict = effective_attempt(chain.attempt, state.read_evidence(run, sid, aid))
    found = chain_rules.problem(ids=(run.run_id, sid, aid), plan_sha256=run.plan_sha256,
                                requested=shard["record_end"] - shard["record_start"], chain=chain,
                                manifest_rel=layout.attempt_file(sid, aid, "manifest.json"),
                                newest_attempt_id=newest, verdict=verdict, winner=winner)
    if found is not None:
        raise CheckFailed(f"{sid}/{aid}: {found}", shard_id=sid, attempt_id=aid)
    return chain


def publish(run: Run, sid: str, resume_held: bool = False, submitted: state.Submitted | None = None) -> Record:
    """Publish the shard's winner (or confirm the existing one). Returns a summary; raises CheckFailed when the
    shard has no eligible candidate. `submitted`: a snapshot of the journal for many shards (a candidate's shard
    gets no newer attempt: it is not retryable), else read now."""
    from taulib.lifecycle import candidate

    run.check_shard(sid)
    if submitted is None and run.format >= 2:
        submitted = state.Submitted(run)
    with locks.hold(run.dir, "run", shared=True):
        existing = run.dir.read(layout.winner(sid), "tau.winner")
        if existing is not None:
            check_chain(run, sid, existing["attempt_id"], winner=existing, submitted=submitted)
            return _summary(existing, published=False)
        with locks.hold(run.dir, locks.shard_lock_name(sid)):
            latest = state.latest_attempt(run, sid, submitted)
            if latest is None:
                raise CheckFailed(f"{sid} has no attempt yet", shard_id=sid)
            aid = latest["attempt_id"]
            check_chain(run, sid, aid, submitted=submitted)  # records only: refuse early, before hashing
    with ExitStack() as stack:
        if run.plan["resume"] == "always" and not resume_held:
            stack.enter_context(locks.hold(run.dir, locks.resume_lock_name(sid)))  # no writer in the workspace
        stack.enter_context(locks.hold(run.dir, "run", shared=True))
        with locks.hold(run.dir, locks.shard_lock_name(sid)):
            first = check_chain(run, sid, aid, submitted=submitted)
        candidate.verify(run.dir, first.manifest)
        failpoints.hit("winner.validated")
        with locks.hold(run.dir, locks.shard_lock_name(sid)):
            existing = run.dir.read(layout.winner(sid), "tau.winner")
            if existing is not None:  # another process won the race while we hashed
                check_chain(run, sid, existing["attempt_id"], winner=existing, submitted=submitted)
                return _summary(existing, published=False)
            again = check_chain(run, sid, aid, submitted=submitted)
            if again != first:
                raise Conflict(f"{sid}/{aid} changed while its files were verified; run tau-winner again",
                               shard_id=sid)
            attempt = again.attempt
            record = {"kind": "tau.winner", "schema_version": 1, "run_id": run.run_id, "shard_id": sid,
                      "attempt_id": aid, "ordinal": attempt["ordinal"],
                      "manifest": {"path": layout.attempt_file(sid, aid, "manifest.json"),
                                   "sha256": again.manifest_sha256},
                      "result": {"path": layout.attempt_file(sid, aid, "result.json"), "sha256": again.result_sha256},
                      "published_at": jsonio.now_rfc3339()}
            run.dir.publish(layout.winner(sid), record)
            _tidy_ended(run, sid, submitted)
        failpoints.hit("winner.published")  # the winner seals the shard; the index does not list it yet
        _note_sealed(run, sid, attempt)
        return _summary(record, published=True)


def _tidy_ended(run: Run, sid: str, submitted: state.Submitted | None) -> None:
    """Remove what crashed writers left in the folders of the shard's ended attempts, once, as the shard is sealed
    (the caller holds the shard lock, which every writer of those folders takes: an observation replaced by a
    tau-reconcile killed mid-write is otherwise never written again, so never tidied). A live attempt's folder
    is left alone: its allocation may be writing there."""
    for aid in state.attempt_ids(run, sid, submitted):
        folder = f"{layout.attempts_dir(sid)}/{aid}"
        record = state.attempt_record(run, sid, aid, submitted)
        if record is not None and record["state"] not in ("submitted", "running") and run.dir.has_debris(folder):
            run.dir.clean_debris(folder)


def _note_sealed(run: Run, sid: str, attempt: Record) -> None:
    """Add a shard just sealed to its segment of the sealed-shard index (the caller holds the run lock, no shard
    lock). An index busy for NOTE_WAIT seconds, or a segment that cannot be read or written, is left to the next
    tau-reconcile, which says what is wrong with it: the winner is published, whatever becomes of its cache."""
    try:
        index.add(run, {layout.shard_index(sid): (attempt["ordinal"], index.seconds(attempt))},
                  timeout=index.NOTE_WAIT)
    except (TauError, OSError):
        pass


def publish_many(run: Run, shard_ids: list[str]) -> Record:
    for sid in shard_ids:
        run.check_shard(sid)  # an unknown shard is an error (66), not a shard without a winner
    results = []
    submitted = state.Submitted(run)
    for sid in shard_ids:
        try:
            results.append(publish(run, sid, submitted=submitted))
        except CheckFailed as exc:
            results.append({"shard_id": sid, "winner": None, "published": False, "reason": exc.message})
        except TauError as exc:
            if exc.code in (75, 77):  # busy or refused: stop, the caller must act
                raise
            results.append({"shard_id": sid, "winner": None, "published": False, "reason": exc.message})
    won = sum(1 for r in results if r["winner"])
    return {"kind": "tau.winners", "schema_version": 1, "run_id": run.run_id, "shards": results,
            "counts": {"won": won, "without_winner": len(results) - won}}


def _summary(record: Record, published: bool) -> Record:
    return {"shard_id": record["shard_id"], "winner": record["attempt_id"], "published": published,
            "manifest_sha256": record["manifest"]["sha256"], "reason": None}
