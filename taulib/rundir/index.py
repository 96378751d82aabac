"""The sealed-shard index: what keeps finished shards cheap to read at 100,000 shards.

A winner is immutable and a shard with a winner is sealed forever, so the set of sealed shards only grows. The
index `RUN/index/sealed.json` records, per shard index, the ordinal of its winning attempt (0: not sealed), as one
compact string. Status, observation and retry read it once and then touch only the shards it does not list: their
cost grows with the unsealed (live or failed) shards, not with the run's history. tau-reconcile adds the shards it
found sealed, under `locks/index.lock`, with the revision rule of every mutable record.

Reads: index/sealed.json. Writes: index/sealed.json (under index.lock). Promises: a shard the index lists is
sealed; an index of another shape than the run's is ignored (every shard is read instead).

It is a cache of facts that cannot change: deleting it is safe (the next reconcile rebuilds it, reading every
shard once). Never delete a winner.json by hand: the index would keep calling its shard sealed.
"""

from __future__ import annotations

from taulib import jsonio
from taulib.rundir import locks

REL = "index/sealed.json"


def load(run) -> list[int]:
    """Winning ordinal per shard index (0: not sealed)."""
    record = run.dir.read(REL, "tau.sealed-index")
    if record is None or record["shard_count"] != run.shard_count:
        return [0] * run.shard_count
    values = [int(v) for v in record["ordinals"].split(",")] if record["ordinals"] else []
    if len(values) != run.shard_count:
        return [0] * run.shard_count
    return values


def add(run, sealed: dict[int, int]) -> None:
    """Record newly sealed shards {shard index: winning ordinal} (caller holds the run lock)."""
    if not sealed:
        return
    with locks.hold(run.dir, "index"):
        record = run.dir.read(REL, "tau.sealed-index")
        values = load(run)
        changed = False
        for index, ordinal in sealed.items():
            if values[index] == 0:
                values[index] = ordinal
                changed = True
        if not changed:
            return
        run.dir.replace(REL, {
            "kind": "tau.sealed-index", "schema_version": 1, "run_id": run.run_id, "shard_count": run.shard_count,
            "revision": 1 if record is None else record["revision"] + 1, "updated_at": jsonio.now_rfc3339(),
            "ordinals": ",".join(map(str, values))})
