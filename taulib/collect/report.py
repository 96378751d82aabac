"""What tau-collect prints: the `tau.collection` summary of a collection, finished or still in its CPU job. Its
`created` is true when the call that prints it planned the collection or published its dataset itself, false when
it found the collection planned, or published, by another.
Pure: built from the journal entry (plan and status) and the published dataset's `_tau_collection.json` (and,
for `bundle`, the run's record of the upload, which `collect.bundle.deliver` fills in).
`complete` and `missing` (the shards without a winner it left out, with their state and reason) come from the
plan, so a collection planned by an older tau, which knew no missing shards, reads as complete; so does
`group_readable` (one planned before tau-collect took --group-readable reads as private)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib.collect.destination import group_readable

if TYPE_CHECKING:
    from taulib.jsonio import Record


def progress(plan: Record, status: Record, created: bool) -> Record:
    """The summary of a collection whose job has not published the dataset yet; `created`, whether the caller
    planned the collection (and submitted its first job) rather than found it."""
    return {"kind": "tau.collection", "schema_version": 1, "run_id": plan["run_id"],
            "collection_id": plan["collection_id"], "state": status["state"], "created": created,
            "destination": plan["destination"], "format": plan["format"],
            "rows_per_partition": plan["rows_per_partition"], "records": plan["records"],
            "partitions": None, "files": [], "job_id": status["job_id"], "tasks": plan.get("tasks", 1),
            "group_readable": group_readable(plan), "bundle": bundle(plan), **coverage(plan)}


def summary(plan: Record, status: Record, result: Record, created: bool) -> Record:
    return {"kind": "tau.collection", "schema_version": 1, "run_id": plan["run_id"],
            "collection_id": plan["collection_id"], "state": status["state"], "created": created,
            "destination": plan["destination"], "format": plan["format"],
            "rows_per_partition": plan["rows_per_partition"], "records": result["records"],
            "partitions": len(result["files"]), "files": result["files"], "job_id": status.get("job_id"),
            "tasks": plan.get("tasks", 1), "group_readable": group_readable(plan), "bundle": bundle(plan),
            **coverage(plan)}


def bundle(plan: Record, ref: Record | None = None) -> Record | None:
    """The `bundle` key: null for a collection planned without --upload; else its prefix and generation, the
    digest of its manifest and whether it is uploaded, from `ref` (its RUN/bundles/G.json; None: not yet)."""
    upload = plan.get("upload")
    if upload is None:
        return None
    return {"url": upload["url"], "generation": upload["generation"],
            "manifest_sha256": None if ref is None else ref["manifest_sha256"], "uploaded": ref is not None}


def coverage(plan: Record) -> Record:
    missing = plan.get("missing", [])
    return {"complete": not missing, "missing": missing}
