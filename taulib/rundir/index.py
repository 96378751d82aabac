"""The sealed-shard index: what keeps finished shards cheap to read at 100,000 shards.

A winner is immutable and a shard with a winner is sealed forever, so the set of sealed shards only grows. The
index is kept in segments of SEGMENT (1,000) shards, `RUN/index/sealed-KKKK.json` (segment K holds shards 1000K to
1000K+999): per shard, the ordinal of its winning attempt (0: not sealed) and the seconds that attempt ran, as
compact strings. Whoever publishes a winner adds its shard to its segment right after (`lifecycle.winner`, waiting
at most NOTE_WAIT seconds for the index's lock: a busy index is left to the next reconcile), and tau-reconcile adds
the shards it found sealed that their segment does not list yet. So the first observe + reconcile of a big
run reads a hundred small records instead of every shard, like every later one; status, observation and retry
read the segments once and then touch only the shards they do not list: their cost grows with the unsealed (live
or failed) shards, not with the run's history.

Runs indexed by earlier versions of tau have one whole-run record instead, `index/sealed.json` (legacy, kind
tau.sealed-index): it is still read, its facts joined with the segments', and never written again.

Reads: index/sealed.json, index/sealed-KKKK.json. Writes: index/sealed-KKKK.json, under `locks/index.lock` (the one
lock that owns the folder, as it did the legacy record: a writer removes the folder's debris, so two writers of
different segments must take turns), with the revision rule of every mutable record. Promises: a shard the index
lists is sealed; a segment (or a legacy record) of another shape than the run's is ignored (its shards are read
instead) and rewritten whole by the next writer of that segment.

It is a cache of facts that cannot change: deleting it, or any file in it, is safe (the next reconcile adds back
what it finds sealed, reading those shards once). Never delete a winner.json by hand: the index would keep
calling its shard sealed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taulib import jsonio
from taulib.rundir import layout, locks

if TYPE_CHECKING:
    from collections.abc import Mapping

    from taulib.jsonio import Record
    from taulib.rundir.run import Run

SEGMENT = 1000  # shards a segment holds: a winner's publisher rewrites a few kB, a reader reads N/1000 records
NOTE_WAIT = 2.0  # seconds a winner's publisher waits for the index's lock before leaving the shard to reconcile


def segment_count(shard_count: int) -> int:
    return -(-shard_count // SEGMENT)


def load(run: Run) -> list[int]:
    """Winning ordinal per shard index (0: not sealed)."""
    return load_all(run)[0]


def load_all(run: Run) -> tuple[list[int], list[int | None]]:
    """(winning ordinal, seconds the winning attempt ran) per shard index; (0, None) when not sealed, None for a
    duration tau does not know (an index written before durations were kept)."""
    values: list[int] = [0] * run.shard_count
    durations: list[int | None] = [None] * run.shard_count
    legacy = _legacy(run)
    if legacy is not None:
        values, durations = legacy
    for k in range(segment_count(run.shard_count)):
        parsed = _parse(run, k, run.dir.read(layout.sealed_segment(k), "tau.sealed-segment"))
        if parsed is None:
            continue
        first = k * SEGMENT
        for offset, ordinal in enumerate(parsed[0]):
            if ordinal and (not values[first + offset] or durations[first + offset] is None):
                values[first + offset] = ordinal
                durations[first + offset] = parsed[1][offset]
    return values, durations


def _legacy(run: Run) -> tuple[list[int], list[int | None]] | None:
    """The whole-run index of earlier versions of tau, when it has the run's shape."""
    record = run.dir.read(layout.SEALED_LEGACY, "tau.sealed-index")
    if record is None or record["shard_count"] != run.shard_count:
        return None
    values = [int(v) for v in record["ordinals"].split(",")] if record["ordinals"] else []
    if len(values) != run.shard_count:
        return None
    durations: list[int | None] = [None] * run.shard_count
    text = record.get("durations")
    if text is not None and text.count(",") == run.shard_count - 1:
        durations = [int(v) if v else None for v in text.split(",")]
    return values, durations


def _count(run: Run, k: int) -> int:
    return min(SEGMENT, run.shard_count - k * SEGMENT)


def _unsealed(count: int) -> tuple[list[int], list[int | None]]:
    """(ordinals, durations) of `count` shards none of which is sealed."""
    return [0] * count, [None] * count


def _parse(run: Run, k: int, record: Record | None) -> tuple[list[int], list[int | None]] | None:
    """(ordinals, durations) of segment `k`'s record, or None when it is missing or not of the run's shape."""
    if record is None or record["first"] != k * SEGMENT or record["count"] != _count(run, k):
        return None
    ordinals = record["ordinals"].split(",")
    if len(ordinals) != record["count"]:
        return None
    durations = record["durations"].split(",")
    if len(durations) != record["count"]:
        durations = [""] * record["count"]
    return [int(v) for v in ordinals], [int(v) if v else None for v in durations]


def add(run: Run, sealed: dict[int, tuple[int, int | None]], timeout: float | None = None) -> None:
    """Record newly sealed shards {shard index: (winning ordinal, seconds it ran)} in their segments, under the
    index's lock (the caller holds the run lock and no shard lock). Busy (75) when the lock is not granted within
    `timeout` (default: TAU_LOCK_TIMEOUT)."""
    if not sealed:
        return
    by_segment: dict[int, dict[int, tuple[int, int | None]]] = {}
    for index, value in sealed.items():
        by_segment.setdefault(index // SEGMENT, {})[index] = value
    with locks.hold(run.dir, "index", timeout=timeout):
        for k in sorted(by_segment):
            _add_to_segment(run, k, by_segment[k])


def _add_to_segment(run: Run, k: int, entries: dict[int, tuple[int, int | None]]) -> None:
    rel = layout.sealed_segment(k)
    record = run.dir.read(rel, "tau.sealed-segment")
    first, count = k * SEGMENT, _count(run, k)
    parsed = _parse(run, k, record)
    values, durations = parsed if parsed is not None else _unsealed(count)
    changed = parsed is None
    for index, (ordinal, seconds) in entries.items():
        if values[index - first] == 0:
            values[index - first] = ordinal
            durations[index - first] = seconds
            changed = True
    if not changed:
        return
    run.dir.replace(rel, {
        "kind": "tau.sealed-segment", "schema_version": 1, "run_id": run.run_id, "first": first, "count": count,
        "revision": 1 if record is None else record["revision"] + 1, "updated_at": jsonio.now_rfc3339(),
        "ordinals": ",".join(map(str, values)),
        "durations": ",".join("" if d is None else str(d) for d in durations)})


def seconds(attempt: Mapping[str, Any] | None) -> int | None:
    """How long an attempt ran (both ends by the clock of the machine it ran on, so no skew between machines)."""
    if attempt is None or not attempt.get("started_at"):
        return None
    return max(0, round(jsonio.parse_time(attempt["updated_at"]) - jsonio.parse_time(attempt["started_at"])))
