"""What tau-collect -o table shows of a collection: a few lines about the dataset, then a row per file.

Pure: a function of tau-collect's result document (`collect.report`'s summary, or the state of a collection whose
CPU job has not finished); nothing is read or written. Promises: the rows are the dataset's files in their order,
each its path, rows, size in bytes and sha256, under `HEADERS`.
"""

from __future__ import annotations

from typing import Any, Mapping

HEADERS = ["FILE", "ROWS", "BYTES", "SHA256"]


def rows(result: Mapping[str, Any]) -> list[list[object]]:
    """One row per file of the dataset, in order, under `HEADERS`."""
    return [[f["path"], f["rows"], f["size"], f["sha256"]] for f in result["files"]]


def text(result: Mapping[str, Any]) -> str:
    """The whole text: where the dataset is and what it holds, whether the user's group may read it, the shards
    left out of a partial one, the bundle it was uploaded as, then the table of its files; for a collection whose
    job has not finished, the sentence that says so."""
    from taulib import table

    if result["state"] != "succeeded":
        return (f"collection {result['collection_id']}: {result['state']} as Slurm job {result['job_id']}; run "
                "tau-collect again (or with --wait) to follow it")
    missing = "".join(f"missing: {m['shard_id']} ({m['state']}: {m['reason']})\n" for m in result["missing"])
    return (f"collection {result['collection_id']}: {result['records']} records in {result['partitions']} "
            f"{result['format']} file(s) at {result['destination']}\n"
            + ("group-readable: folders 0750, files 0640\n" if result.get("group_readable") else "")
            + (f"partial: {len(result['missing'])} shard(s) without a winner left out\n{missing}" if missing else "")
            + (f"uploaded: generation {result['bundle']['generation']} to {result['bundle']['url']}\n"
               if result["bundle"] else "") + "\n"
            + table.render(HEADERS, rows(result)))
