"""The winner chain (tau-winner(1) "The chain"): whether a shard's attempt, its result and its candidate manifest
make a whole, consistent chain that may win, or that a published winner still stands on. Pure
(tests/test_rules_chain.py).

`problem(...)` returns the first thing wrong with a chain, in words, or None when the chain holds. Its inputs are
the records as read (validated against their schemas) and their digests; the caller reads them, and hashes the
dataset files afterwards (`lifecycle.candidate.verify`). The checks:
- every record names this run, shard and attempt; the attempt succeeded and belongs to this plan;
- the result is complete: it requested and holds exactly the shard's records, and names this manifest by path and
  sha256;
- the manifest's provenance is the plan digest, its ordinal and dataset folder are the attempt's, its record counts
  are the shard's, its files' rows add up, and no file is empty;
- for a candidate: it is the shard's newest attempt and the scheduler's evidence does not contradict its success;
- for a winner: the winner names this attempt, its ordinal, and the manifest and result by digest.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Chain(NamedTuple):
    """The records of a chain that holds, with their digests."""

    attempt: dict[str, Any]
    result: dict[str, Any]
    manifest: dict[str, Any]
    result_sha256: str
    manifest_sha256: str


def problem(*, ids: tuple[str, str, str], plan_sha256: str, requested: int, chain: Chain, manifest_rel: str,
            newest_attempt_id: str | None = None, verdict: tuple[str, str] | None = None,
            winner: dict[str, Any] | None = None) -> str | None:
    """What is wrong with `chain` (ids = (run id, shard id, attempt id)), or None. Without `winner`, the chain is a
    candidate: `newest_attempt_id` and the attempt's `verdict` (state, reason) are checked too."""
    attempt, result, manifest = chain.attempt, chain.result, chain.manifest
    manifest_ref = {"path": manifest_rel, "sha256": chain.manifest_sha256}
    checks = [
        ((attempt["run_id"], attempt["shard_id"], attempt["attempt_id"]) == ids, "attempt ids do not match"),
        ((result["run_id"], result["shard_id"], result["attempt_id"]) == ids, "result ids do not match"),
        ((manifest["run_id"], manifest["shard_id"], manifest["attempt_id"]) == ids, "manifest ids do not match"),
        (attempt["state"] == "succeeded" and (attempt["terminal"] or {}).get("classification") == "succeeded",
         f"the attempt is {attempt['state']}, not succeeded"),
        (attempt["plan_sha256"] == plan_sha256, "the attempt belongs to another plan"),
        (result["outcome"] == "complete", f"the result is {result['outcome']}, not complete"),
        (result["requested_records"] == requested,
         f"the result requested {result['requested_records']} records; the shard has {requested}"),
        (result["actual_records"] == requested,
         f"the result holds {result['actual_records']} of {requested} records"),
        (result["manifest"] == manifest_ref, "the result does not name this manifest by path and digest"),
        (manifest["provenance"] == plan_sha256, "the manifest's provenance is not the plan digest"),
        (manifest["ordinal"] == attempt["ordinal"], "the manifest's ordinal differs from the attempt's"),
        (manifest["requested_records"] == requested and manifest["actual_records"] == requested,
         "the manifest's record counts differ from the shard's range"),
        (sum(f["rows"] for f in manifest["files"]) == manifest["actual_records"],
         "the manifest's file row counts do not add up"),
        (manifest["dataset"] == attempt["dataset"], "the manifest names another dataset folder"),
        (all(f["size"] > 0 for f in manifest["files"]), "the manifest lists an empty file"),
    ]
    if winner is None:
        checks += [
            (newest_attempt_id == ids[2], "a newer attempt exists; this one is stale"),
            (verdict is not None and verdict[0] == "succeeded",
             f"scheduler evidence contradicts success: {verdict[1] if verdict else 'no verdict'}"),
        ]
    else:
        checks += [
            (winner["attempt_id"] == ids[2] and winner["ordinal"] == attempt["ordinal"], "winner ids do not match"),
            (winner["manifest"] == manifest_ref, "the winner does not name the manifest by path and digest"),
            (winner["result"]["sha256"] == chain.result_sha256, "the winner does not name the result by digest"),
        ]
    return next((message for ok, message in checks if not ok), None)
