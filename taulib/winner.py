"""Winners: validating a shard's whole chain and publishing exactly one immutable winner (SPEC 7).

Chain: the shard's latest attempt is succeeded and is not contradicted by terminal scheduler evidence; its
result.json is complete (actual == requested == the shard's range) and names manifest.json by path and sha256;
the manifest's ids, provenance (the plan digest), record counts and dataset folder are consistent; every file is
present with its recorded size, sha256, Parquet row count and schema digest.

Protocol: read and check the records (shard lock), hash the files (no lock but the shard's resume lock when the
dataset is shard-owned), then under the shard lock re-read the records (unchanged) and publish winner.json with
link-no-overwrite. Concurrent publishers converge: exactly one creates the winner, the others see it and report
it. An existing winner is re-validated (records only) on every call.
"""

from __future__ import annotations

from contextlib import ExitStack

from taulib import failpoints, jsonio, layout, locks, reconcile, state
from taulib.errors import CheckFailed, Conflict, TauError


def _records(run, sid: str, aid: str) -> tuple[dict, dict, dict, bytes, bytes]:
    attempt = run.dir.require(layout.attempt_file(sid, aid, "attempt.json"), "tau.attempt")
    result_bytes = run.dir.read_bytes(layout.attempt_file(sid, aid, "result.json"))
    manifest_bytes = run.dir.read_bytes(layout.attempt_file(sid, aid, "manifest.json"))
    if result_bytes is None:
        raise CheckFailed(f"{sid}/{aid} has no result.json: the attempt never finished", shard_id=sid)
    if manifest_bytes is None:
        raise CheckFailed(f"{sid}/{aid} has no candidate manifest", shard_id=sid)
    result = run.dir.decode(layout.attempt_file(sid, aid, "result.json"), result_bytes, "tau.result")
    manifest = run.dir.decode(layout.attempt_file(sid, aid, "manifest.json"), manifest_bytes, "tau.manifest")
    return attempt, result, manifest, result_bytes, manifest_bytes


def check_chain(run, sid: str, aid: str, winner: dict | None = None) -> tuple[dict, dict, dict, str, str]:
    """Validate the records of a candidate chain. Returns (attempt, result, manifest, result_sha, manifest_sha)."""
    shard = run.shard(sid)
    attempt, result, manifest, result_bytes, manifest_bytes = _records(run, sid, aid)
    requested = shard["record_end"] - shard["record_start"]
    where = f"{sid}/{aid}"

    def need(ok: bool, message: str) -> None:
        if not ok:
            raise CheckFailed(f"{where}: {message}", shard_id=sid, attempt_id=aid)

    ids = (run.run_id, sid, aid)
    need((attempt["run_id"], attempt["shard_id"], attempt["attempt_id"]) == ids, "attempt ids do not match")
    need((result["run_id"], result["shard_id"], result["attempt_id"]) == ids, "result ids do not match")
    need((manifest["run_id"], manifest["shard_id"], manifest["attempt_id"]) == ids, "manifest ids do not match")
    need(attempt["state"] == "succeeded" and (attempt["terminal"] or {}).get("classification") == "succeeded",
         f"the attempt is {attempt['state']}, not succeeded")
    need(attempt["plan_sha256"] == run.plan_sha256, "the attempt belongs to another plan")
    need(result["outcome"] == "complete", f"the result is {result['outcome']}, not complete")
    need(result["requested_records"] == requested, f"the result requested {result['requested_records']} "
         f"records; the shard has {requested}")
    need(result["actual_records"] == requested, f"the result holds {result['actual_records']} of {requested} "
         "records")
    manifest_rel = layout.attempt_file(sid, aid, "manifest.json")
    manifest_sha = jsonio.sha256_hex(manifest_bytes)
    need(result["manifest"] == {"path": manifest_rel, "sha256": manifest_sha},
         "the result does not name this manifest by path and digest")
    need(manifest["provenance"] == run.plan_sha256, "the manifest's provenance is not the plan digest")
    need(manifest["ordinal"] == attempt["ordinal"], "the manifest's ordinal differs from the attempt's")
    need(manifest["requested_records"] == requested and manifest["actual_records"] == requested,
         "the manifest's record counts differ from the shard's range")
    need(sum(f["rows"] for f in manifest["files"]) == manifest["actual_records"],
         "the manifest's file row counts do not add up")
    need(manifest["dataset"] == attempt["dataset"], "the manifest names another dataset folder")
    need(all(f["size"] > 0 for f in manifest["files"]), "the manifest lists an empty file")
    if winner is None:
        latest = state.latest_attempt(run, sid)
        need(latest is not None and latest["attempt_id"] == aid, "a newer attempt exists; this one is stale")
        evidence = state.evidence_from_record(run.dir.read(layout.attempt_file(sid, aid, "observation.json"),
                                                           "tau.observation"))
        effective, reason = reconcile.effective_attempt(attempt, evidence)
        need(effective == "succeeded", f"scheduler evidence contradicts success: {reason}")
    else:
        need(winner["attempt_id"] == aid and winner["ordinal"] == attempt["ordinal"], "winner ids do not match")
        need(winner["manifest"] == {"path": manifest_rel, "sha256": manifest_sha},
             "the winner does not name the manifest by path and digest")
        result_sha = jsonio.sha256_hex(result_bytes)
        need(winner["result"]["sha256"] == result_sha, "the winner does not name the result by digest")
    return attempt, result, manifest, jsonio.sha256_hex(result_bytes), manifest_sha


def publish(run, sid: str, resume_held: bool = False) -> dict:
    """Publish the shard's winner (or confirm the existing one). Returns a summary; raises CheckFailed when the
    shard has no eligible candidate."""
    from taulib import candidate

    run.check_shard(sid)
    with locks.hold(run.dir, "run", shared=True):
        existing = run.dir.read(layout.winner(sid), "tau.winner")
        if existing is not None:
            check_chain(run, sid, existing["attempt_id"], winner=existing)
            return _summary(existing, published=False)
        with locks.hold(run.dir, locks.shard_lock_name(sid)):
            latest = state.latest_attempt(run, sid)
            if latest is None:
                raise CheckFailed(f"{sid} has no attempt yet", shard_id=sid)
            aid = latest["attempt_id"]
            check_chain(run, sid, aid)  # records only: refuse early, before any lease or hashing
    with ExitStack() as stack:
        if run.plan["resume"] == "always" and not resume_held:
            stack.enter_context(locks.hold(run.dir, locks.resume_lock_name(sid)))  # no writer in the workspace
        stack.enter_context(locks.hold(run.dir, "run", shared=True))
        with locks.hold(run.dir, locks.shard_lock_name(sid)):
            first = check_chain(run, sid, aid)
        candidate.verify(run.dir, first[2])
        failpoints.hit("winner.validated")
        with locks.hold(run.dir, locks.shard_lock_name(sid)):
            existing = run.dir.read(layout.winner(sid), "tau.winner")
            if existing is not None:  # another process won the race while we hashed
                check_chain(run, sid, existing["attempt_id"], winner=existing)
                return _summary(existing, published=False)
            again = check_chain(run, sid, aid)
            if again[3:] != first[3:] or again[0] != first[0]:
                raise Conflict(f"{sid}/{aid} changed while its files were verified; run tau-winner again",
                               shard_id=sid)
            attempt = again[0]
            record = {"kind": "tau.winner", "schema_version": 1, "run_id": run.run_id, "shard_id": sid,
                      "attempt_id": aid, "ordinal": attempt["ordinal"],
                      "manifest": {"path": layout.attempt_file(sid, aid, "manifest.json"), "sha256": again[4]},
                      "result": {"path": layout.attempt_file(sid, aid, "result.json"), "sha256": again[3]},
                      "published_at": jsonio.now_rfc3339()}
            run.dir.publish(layout.winner(sid), record)
            return _summary(record, published=True)


def publish_many(run, shard_ids: list[str]) -> dict:
    for sid in shard_ids:
        run.check_shard(sid)  # an unknown shard is an error (66), not a shard without a winner
    results = []
    for sid in shard_ids:
        try:
            results.append(publish(run, sid))
        except CheckFailed as exc:
            results.append({"shard_id": sid, "winner": None, "published": False, "reason": exc.message})
        except TauError as exc:
            if exc.code in (75, 77):  # busy or refused: stop, the caller must act
                raise
            results.append({"shard_id": sid, "winner": None, "published": False, "reason": exc.message})
    won = sum(1 for r in results if r["winner"])
    return {"kind": "tau.winners", "schema_version": 1, "run_id": run.run_id, "shards": results,
            "counts": {"won": won, "without_winner": len(results) - won}}


def _summary(record: dict, published: bool) -> dict:
    return {"shard_id": record["shard_id"], "winner": record["attempt_id"], "published": published,
            "manifest_sha256": record["manifest"]["sha256"], "reason": None}
