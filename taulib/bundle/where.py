"""Where a run's bundles went: `RUN/bundles/G.json` (tau.bundle-ref), one immutable record per uploaded generation.

`tau-bundle-seal --upload URL --record RUN_DIR` writes it after the upload succeeded (with the shard and attempt
when the seal runs inside that run's allocation), and so does `tau-collect --upload URL` for a collection's dataset
(with its `collection_id`; `collect.bundle`); `tau-bundle-fetch --run RUN_DIR [--shard S | --collection C]
[--generation G]` reads it, so that the generation comes from the run's own records rather than from a mutable
pointer. The URL in a record is data: it passes the same endpoint checks as one typed by hand before any request
is made.
Reads and Writes: `RUN/bundles/*.json`, through the run directory's writer (immutable publish: another record of a
recorded generation is a conflict, 73).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from taulib import env, jsonio
from taulib.rundir import locks
from taulib.errors import NotFound, UsageError

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run


def _ref(run: Run, generation: str, url: str, manifest_sha256: str, shard_id: str | None, attempt_id: str | None,
         collection_id: str | None = None) -> Record:
    ref = {"kind": "tau.bundle-ref", "schema_version": 1, "run_id": run.run_id, "generation": generation,
           "url": url, "manifest_sha256": manifest_sha256, "shard_id": shard_id, "attempt_id": attempt_id,
           "recorded_at": jsonio.now_rfc3339()}
    if collection_id is not None:  # absent otherwise, so that a record made before collections had it is the same
        ref["collection_id"] = collection_id
    return ref


def _publish(run: Run, ref: Record) -> Record:
    """Publish `ref`, or return the record already there when it says the same (recorded_at aside)."""
    rel = f"bundles/{ref['generation']}.json"
    existing = run.dir.read(rel, "tau.bundle-ref")
    if existing is not None and {k: v for k, v in existing.items() if k != "recorded_at"} == \
            {k: v for k, v in ref.items() if k != "recorded_at"}:
        return existing  # recorded already (a repeated seal or upload)
    run.dir.publish(rel, ref)  # another record for G is a conflict (73)
    return ref


def record(run_dir: str, generation: str, url: str, manifest_sha256: str, shard_id: str | None,
           attempt_id: str | None) -> Record:
    from taulib.rundir.run import Run

    with Run(run_dir) as run:
        if shard_id is not None:
            run.check_shard(shard_id)
        ref = _ref(run, generation, url, manifest_sha256, shard_id, attempt_id)
        with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "bundles"):
            return _publish(run, ref)


def record_collection(run: Run, generation: str, url: str, manifest_sha256: str, collection_id: str) -> Record:
    """`record` of a collection's uploaded dataset (`collect.bundle`), in the open `run`; the caller holds run.lock
    (shared) and bundles.lock."""
    return _publish(run, _ref(run, generation, url, manifest_sha256, None, None, collection_id))


def recorded(run: Run, generation: str) -> Record | None:
    """The record of `generation` in the open `run`, or None."""
    return run.dir.read(f"bundles/{generation}.json", "tau.bundle-ref")


def record_sealed(run_dir: str, generation: str, url: str, manifest_sha256: str,
                  environ: dict[str, str] | None = None) -> Record:
    """`record` for tau-bundle-seal --record: the shard and attempt are the environment's (TAU_SHARD_ID,
    TAU_ATTEMPT_ID) only when the seal runs inside an allocation of that same run (TAU_RUN_DIR names it)."""
    own = env.get("TAU_RUN_DIR", environ)
    inside = bool(own and os.path.realpath(own) == os.path.realpath(run_dir))
    return record(run_dir, generation, url, manifest_sha256, env.get("TAU_SHARD_ID", environ) if inside else None,
                  env.get("TAU_ATTEMPT_ID", environ) if inside else None)


def resolve(run_dir: str, shard_id: str | None, generation: str | None, collection_id: str | None = None) -> Record:
    """The one bundle record of the run that matches the shard, collection and generation asked for."""
    from taulib.rundir.run import Run

    with Run(run_dir) as run:
        refs = [run.dir.require(f"bundles/{name}", "tau.bundle-ref")
                for name in run.dir.listdir("bundles") if name.endswith(".json")]
        chosen = [r for r in refs if (shard_id is None or r["shard_id"] == shard_id)
                  and (collection_id is None or r.get("collection_id") == collection_id)
                  and (generation is None or r["generation"] == generation)]
        if not chosen:
            raise NotFound(f"run {run.run_id!r} records no bundle" + (f" of {shard_id}" if shard_id else "")
                           + (f" of {collection_id}" if collection_id else "")
                           + (f" of generation {generation!r}" if generation else "")
                           + ("; tau-collect --upload records it once the upload is complete" if collection_id
                              else ""), **({"collection_id": collection_id} if collection_id else {}))
        if len(chosen) > 1:
            raise UsageError(f"run {run.run_id!r} records {len(chosen)} bundles ("
                             + ", ".join(sorted(r["generation"] for r in chosen)[:5])
                             + "); name one with --generation, --shard or --collection")
        return chosen[0]
