"""Step 1 of a collection: every planned shard's winner chain, validated from its records before any bulk data is
read (tau-collect(1) "Order of work", step 1).

Reads: each shard's winner.json and the records of its chain (`lifecycle.winner.check_chain`). Writes: nothing.
Promises: a collection starts only when every shard has exactly the winner its records describe, the winners share
one schema, and they hold exactly the plan's records; otherwise it is refused whole (exit 1) naming the shards or
the numbers. Attempt folders are never globbed and no "latest attempt" is ever picked.
"""

from __future__ import annotations

from typing import NamedTuple

from taulib import jsonio
from taulib.errors import CheckFailed, Conflict
from taulib.lifecycle import winner as winner_chain
from taulib.rules import fields
from taulib.rundir import layout


class Winner(NamedTuple):
    shard_id: str
    record: dict  # winner.json
    winner_sha256: str
    manifest: dict  # the winner's candidate manifest


def validate(run) -> list[Winner]:
    """Every shard's winner, in planned order (CheckFailed when any is missing or its chain does not hold)."""
    out = []
    missing = []
    for sid in run.shard_ids():
        data = run.dir.read_bytes(layout.winner(sid))
        if data is None:
            missing.append(sid)
            continue
        record = run.dir.decode(layout.winner(sid), data, "tau.winner")
        if record["shard_id"] != sid or record["run_id"] != run.run_id:
            raise CheckFailed(f"the winner of {sid} names another shard or run; refusing to collect", shard_id=sid)
        chain = winner_chain.check_chain(run, sid, record["attempt_id"], winner=record)
        out.append(Winner(sid, record, jsonio.sha256_hex(data), chain.manifest))
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise CheckFailed(f"{len(missing)} shard(s) have no winner ({shown}); collect needs every shard's winner",
                          shards=missing[:100])
    digests = {w.manifest["schema_digest"] for w in out}
    if len(digests) > 1:
        first = out[0].manifest["schema_digest"]
        raise CheckFailed(schema_refusal(out), shards=[w.shard_id for w in out if w.manifest["schema_digest"] != first])
    total = sum(w.manifest["actual_records"] for w in out)
    if total != run.plan["records"]:
        raise CheckFailed(f"the winners hold {total} records; the plan asks for {run.plan['records']}")
    return out


def schema_refusal(winners: list[Winner]) -> str:
    """Which winners have other columns than the first one, and how (for runs made before the output schema was
    fixed at the first candidate)."""
    first = winners[0]
    others = [w for w in winners if w.manifest["schema_digest"] != first.manifest["schema_digest"]]
    shown = ", ".join(w.shard_id for w in others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    text = (f"the winners have incompatible schemas: {shown} {'has' if len(others) == 1 else 'have'} other columns "
            f"than {first.shard_id}")
    if "fields" in first.manifest and "fields" in others[0].manifest:
        found = fields.differences(first.manifest["fields"], others[0].manifest["fields"], f"{first.shard_id}'s")
        text += f" ({others[0].shard_id}: {fields.describe(found)})"
    return text + "; refusing to collect"


def check_unchanged(plan: dict, winners: list[Winner]) -> None:
    """The winners are the ones the collection plan was made from (Conflict otherwise)."""
    for planned, w in zip(plan["shards"], winners, strict=True):
        if (planned["shard_id"], planned["winner_sha256"]) != (w.shard_id, w.winner_sha256):
            raise Conflict(f"the winner of {w.shard_id} changed since collection {plan['collection_id']} "
                           "was planned", shard_id=w.shard_id)
