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
    return load_all(run)[0]


def load_all(run) -> tuple[list[int], list[int | None]]:
    """(winning ordinal, seconds the winning attempt ran) per shard index; (0, None) when not sealed, None for a
    duration tau does not know (an index written before durations were kept)."""
    record = run.dir.read(REL, "tau.sealed-index")
    empty = ([0] * run.shard_count, [None] * run.shard_count)
    if record is None or record["shard_count"] != run.shard_count:
        return empty
    values = [int(v) for v in record["ordinals"].split(",")] if record["ordinals"] else []
    if len(values) != run.shard_count:
        return empty
    durations: list[int | None] = [None] * run.shard_count
    text = record.get("durations")
    if text is not None and text.count(",") == run.shard_count - 1:
        durations = [int(v) if v else None for v in text.split(",")]
    return values, durations


def add(run, sealed: dict[int, tuple[int, int | None]]) -> None:
    """Record newly sealed shards {shard index: (winning ordinal, seconds it ran)} (caller holds the run lock)."""
    if not sealed:
        return
    with locks.hold(run.dir, "index"):
        record = run.dir.read(REL, "tau.sealed-index")
        values, durations = load_all(run)
        changed = False
        for index, (ordinal, seconds) in sealed.items():
            if values[index] == 0:
                values[index] = ordinal
                durations[index] = seconds
                changed = True
        if not changed:
            return
        run.dir.replace(REL, {
            "kind": "tau.sealed-index", "schema_version": 1, "run_id": run.run_id, "shard_count": run.shard_count,
            "revision": 1 if record is None else record["revision"] + 1, "updated_at": jsonio.now_rfc3339(),
            "ordinals": ",".join(map(str, values)),
            "durations": ",".join("" if d is None else str(d) for d in durations)})
