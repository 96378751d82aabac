"""Step 1 of a collection: every planned shard's winner chain, validated from its records before any bulk data is
read (tau-collect(1) "Order of work", step 1, and "Missing shards").

Reads: each shard's winner.json and the records of its chain (`lifecycle.winner.check_chain`); for a shard without
a winner, when it may be missing, its state and reason as the run's records give them (`rundir.state`). Writes:
nothing. Promises: a collection starts only when every shard has exactly the winner its records describe (with
--allow-missing: every shard that has a winner, and at least one does), the winners share one schema, and they hold
exactly the records of their shards; otherwise it is refused whole (exit 1) naming the shards or the numbers. Only
absence is forgiven: a winner that is there and malformed or mismatched refuses the collection either way. Attempt
folders are never globbed and no "latest attempt" is ever picked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from taulib import jsonio
from taulib.errors import CheckFailed, Conflict
from taulib.lifecycle import winner as winner_chain
from taulib.rules import fields
from taulib.rundir import layout, state

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run


class Winner(NamedTuple):
    shard_id: str
    record: Record  # winner.json
    winner_sha256: str
    manifest: Record  # the winner's candidate manifest


class Found(NamedTuple):
    """What a collection collects: the winners in planned order, and the shards without one (each {shard_id,
    state, reason}, in planned order; empty unless missing shards were allowed)."""
    winners: list[Winner]
    missing: list[Record]


def validate(run: Run) -> list[Winner]:
    """Every shard's winner, in planned order (CheckFailed when any is missing or its chain does not hold)."""
    return gather(run).winners


def gather(run: Run, allow_missing: bool = False) -> Found:
    """The winners there are, in planned order, each chain checked; a shard without a winner refuses the
    collection (CheckFailed) unless `allow_missing`, which records it with its state and reason instead (and
    refuses only when no shard has a winner)."""
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
    if missing and not allow_missing:
        raise CheckFailed(f"{len(missing)} shard(s) have no winner ({shown(missing)}); collect needs every shard's "
                          "winner (--allow-missing collects the winners there are)", shards=missing[:100])
    if not out:
        raise CheckFailed(f"no shard of run {run.run_id!r} has a winner ({len(missing)} of {len(missing)} missing); "
                          "--allow-missing collects the winners there are, and there are none yet",
                          shards=missing[:100])
    digests = {w.manifest["schema_digest"] for w in out}
    if len(digests) > 1:
        first = out[0].manifest["schema_digest"]
        raise CheckFailed(schema_refusal(out), shards=[w.shard_id for w in out if w.manifest["schema_digest"] != first])
    total = sum(w.manifest["actual_records"] for w in out)
    expected = records_of(run, [w.shard_id for w in out])
    if total != expected:
        raise CheckFailed(f"the winners hold {total} records; the plan asks for {expected}"
                          + (f" from the {len(out)} shards that have one" if missing else ""))
    whole_run = state.run_cancel(run) if missing else None
    return Found(out, why_missing(run, missing, whole_run))


def shown(shard_ids: list[str]) -> str:
    """The first five of `shard_ids`, and how many more."""
    return ", ".join(shard_ids[:5]) + (f" and {len(shard_ids) - 5} more" if len(shard_ids) > 5 else "")


def records_of(run: Run, shard_ids: list[str]) -> int:
    """The records the plan gives the shards `shard_ids` (all of them: the plan's records)."""
    if len(shard_ids) == run.shard_count:
        return int(run.plan["records"])
    return sum(shard["record_end"] - shard["record_start"] for shard in map(run.shard, shard_ids))


def why_missing(run: Run, missing: list[str], whole_run: Record | None) -> list[Record]:
    """The shards without a winner, as a collection records them: each one's state and reason from the run's
    records (what tau-status says of it, without asking the scheduler), the journal and the figures read once."""
    submitted = state.Submitted(run)
    figures = None
    if missing and run.plan["retry"].get("escalate"):
        from taulib.rundir import usage

        figures = usage.load(run)
    out: list[Record] = []
    for sid in missing:
        decision = state.shard_view(run, sid, whole_run, submitted=submitted, figures=figures).decision
        out.append({"shard_id": sid, "state": decision.state, "reason": decision.reason})
    return out


def of_plan(run: Run, plan: Record) -> list[Winner]:
    """The winners a collection `plan` was made from, each still there and unchanged (Conflict otherwise): what
    its work reads, whatever has won since."""
    found = {w.shard_id: w for w in gather(run, allow_missing=True).winners}
    for planned in plan["shards"]:
        if planned["shard_id"] not in found:
            raise Conflict(f"the winner of {planned['shard_id']} is gone since collection {plan['collection_id']} "
                           "was planned", shard_id=planned["shard_id"])
    winners = [found[planned["shard_id"]] for planned in plan["shards"]]
    check_unchanged(plan, winners)
    return winners


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
        how = fields.describe(found) or "the same column names and types, with other field metadata (Parquet field ids)"
        text += f" ({others[0].shard_id}: {how})"
    return text + "; refusing to collect"


def check_unchanged(plan: Record, winners: list[Winner]) -> None:
    """The winners are the ones the collection plan was made from (Conflict otherwise)."""
    if [p["shard_id"] for p in plan["shards"]] != [w.shard_id for w in winners]:
        raise Conflict(f"the shards with a winner are not the ones collection {plan['collection_id']} was planned "
                       "from", collection_id=plan["collection_id"])
    for planned, w in zip(plan["shards"], winners, strict=True):
        if (planned["shard_id"], planned["winner_sha256"]) != (w.shard_id, w.winner_sha256):
            raise Conflict(f"the winner of {w.shard_id} changed since collection {plan['collection_id']} "
                           "was planned", shard_id=w.shard_id)
