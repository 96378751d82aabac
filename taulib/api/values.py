"""The typed values the Python API returns: a run's status and each shard's, a submission, a cancellation, a drive's
result and a collection, each a frozen dataclass read from the JSON document the matching command prints.

Pure: every value is built from one document (kept whole as `raw`, the same JSON object `tau-status`, `tau-submit`,
`tau-retry`, `tau-cancel`, `tau-drive` or `tau-collect` prints, documented in tau-run(5) and each command's page);
nothing is read or written, and no rule is applied here: the states, reasons and counts are the library's.
The fields a program most often wants are typed attributes; anything else is in `raw`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

Document = Mapping[str, Any]


def _ids(entries: list[Any], key: str = "shard_id") -> tuple[str, ...]:
    return tuple(entry[key] if isinstance(entry, Mapping) else str(entry) for entry in entries)


@dataclass(frozen=True)
class ShardStatus:
    """One shard of a run's status (tau-status(1) "Shards"): its state and why, its newest attempt, its winner, the
    tries it used of its budget, the log of a failed attempt, and whether its running attempt is stalled and why."""

    id: str
    state: str
    reason: str | None
    attempt: str | None
    winner: str | None
    attempts: int
    max_attempts: int
    log: str | None
    stalled: str | None
    progress: Document | None
    raw: Document = field(repr=False, compare=False)

    @property
    def number(self) -> int:
        """The shard's number: 7 for shard-00007."""
        return int(self.id.removeprefix("shard-"))

    @property
    def deployments(self) -> tuple[Document, ...]:
        """The services of its running attempt (tau-status(1) `progress.deployments`): each one's name, state,
        ready and expected backends, endpoint and last probe; empty when it runs none."""
        return tuple((self.progress or {}).get("deployments") or ())

    @property
    def request(self) -> Document | None:
        """What its newest attempt asked for (tau-status(1) `request`: {mem, time}), None without one."""
        return self.raw.get("request")

    @property
    def next(self) -> Document | None:
        """What its next attempt does when its newest failed (tau-status(1) `next`: action submit, wait or
        exhausted, the request it asks, why and until when), else None."""
        return self.raw.get("next")

    @classmethod
    def of(cls, doc: Document) -> ShardStatus:
        return cls(id=doc["id"], state=doc["state"], reason=doc["reason"], attempt=doc["attempt"],
                   winner=doc["winner"], attempts=doc["attempts"], max_attempts=doc["max_attempts"], log=doc["log"],
                   stalled=doc["stalled"], progress=doc["progress"], raw=doc)


@dataclass(frozen=True)
class RunStatus:
    """A run's status (the `tau.status` document of tau-status and tau-reconcile): the run's state, its lifecycle
    word (pending, running, succeeded, failed), whether it is degraded and why, the count of shards in each state,
    the retryable shards, the retry budget, the estimated seconds left (None when nothing is at work), the
    collections made, and every shard.

    >>> status.state, status.counts["succeeded"], status.shard(1).attempts  # doctest: +SKIP
    ('succeeded', 4, 2)
    """

    run_id: str
    run_dir: str
    state: str
    lifecycle: str
    degraded: bool
    reason: str | None
    counts: Mapping[str, int]
    retryable: tuple[str, ...]
    budget: Document
    cancelled: Document | None
    eta_seconds: float | None
    collections: tuple[Document, ...]
    shards: tuple[ShardStatus, ...]
    raw: Document = field(repr=False, compare=False)

    @property
    def succeeded(self) -> bool:
        return self.state == "succeeded"

    def shard(self, shard: str | int) -> ShardStatus:
        """The status of one shard, named as the commands take it (`"shard-00007"`, `"7"`, `7`); KeyError for a shard
        the run does not have."""
        from taulib.rundir import layout

        wanted = layout.canonical_shard_id(str(shard))
        for entry in self.shards:
            if entry.id == wanted:
                return entry
        raise KeyError(shard)

    @classmethod
    def of(cls, doc: Document) -> RunStatus:
        return cls(run_id=doc["run_id"], run_dir=doc["run_dir"], state=doc["state"], lifecycle=doc["lifecycle"],
                   degraded=doc["degraded"], reason=doc["reason"], counts=dict(doc["counts"]),
                   retryable=tuple(doc["retryable"]), budget=doc["budget"], cancelled=doc["cancelled"],
                   eta_seconds=doc["eta_seconds"], collections=tuple(doc["collections"]),
                   shards=tuple(ShardStatus.of(s) for s in doc["shards"]), raw=doc)


@dataclass(frozen=True)
class Submission:
    """What a submission did (tau-submit's and tau-retry's document): its id and job (None when nothing was
    submitted), the shards given an attempt, the shards skipped, and, for a canary, how many shards wait for the
    next submit (`held_back`); for a retry, the exhausted shards and why nothing was submitted (`reason`)."""

    submission_id: str | None
    purpose: str
    job_id: str | None
    created: bool
    shards: tuple[str, ...]
    skipped: tuple[str, ...]
    held_back: int
    exhausted: tuple[str, ...]
    reason: str | None
    raw: Document = field(repr=False, compare=False)

    @classmethod
    def of(cls, doc: Document) -> Submission:
        return cls(submission_id=doc["submission_id"], purpose=doc["purpose"], job_id=doc["job_id"],
                   created=doc["created"], shards=_ids(doc["tasks"]), skipped=_ids(doc["skipped"]),
                   held_back=doc.get("held_back", 0), exhausted=_ids(doc.get("exhausted", [])),
                   reason=doc.get("reason"), raw=doc)


@dataclass(frozen=True)
class Cancellation:
    """What tau-cancel did: its scope (`run`, `shards`, or `attempts` for a stop without giving the shard up), when
    it was requested, the shards cancelled, those that kept their winner (`sealed`), those that had no live attempt
    (`ended`), the attempts stopped, and `noop` when there was nothing to do (the sentence that says so)."""

    scope: str
    requested_at: str | None
    cancelled: tuple[str, ...]
    sealed: tuple[str, ...]
    ended: tuple[str, ...]
    stopped: tuple[str, ...]
    noop: str | None
    raw: Document = field(repr=False, compare=False)

    @classmethod
    def of(cls, doc: Document) -> Cancellation:
        return cls(scope=doc["scope"], requested_at=doc["requested_at"], cancelled=tuple(doc["cancelled"]),
                   sealed=tuple(doc["sealed"]), ended=_ids(doc["ended"]), stopped=_ids(doc["stopped"]),
                   noop=doc["noop"], raw=doc)


@dataclass(frozen=True)
class DriveResult:
    """The result of driving a run (tau-drive's document): the run's state, why it is finished (`succeeded`, or why
    it stopped; None while a cycle may still move it), the cycles this call ran, what the last cycle did, the
    notifications sent, the run's status after it, and the collection made or found once it finished (`drive`'s
    `collect`; None without one)."""

    run_id: str
    state: str
    finished: str | None
    cycles: int
    actions: Document | None
    notified: tuple[Document, ...]
    status: RunStatus
    collection: Collection | None
    raw: Document = field(repr=False, compare=False)

    @property
    def succeeded(self) -> bool:
        return self.state == "succeeded"

    @classmethod
    def of(cls, doc: Document) -> DriveResult:
        collected = doc.get("collection")  # each cycle's result has none yet: only the last is collected
        return cls(run_id=doc["run_id"], state=doc["state"], finished=doc["finished"], cycles=doc["cycles"],
                   actions=doc["actions"], notified=tuple(doc["notified"]), status=RunStatus.of(doc["status"]),
                   collection=None if collected is None else Collection.of(collected), raw=doc)


@dataclass(frozen=True)
class CollectedFile:
    """One file of a collected dataset: its absolute path, rows, size in bytes and sha256."""

    path: str
    rows: int
    size: int
    sha256: str


@dataclass(frozen=True)
class Collection:
    """A collection (tau-collect's document): where the dataset is (`destination`, an absolute folder), its format,
    its files in order, the records in it, whether it is complete or which shards it left out (`missing`, with
    their state and reason), and its state (`succeeded`; under Slurm without waiting, `submitted` or `running`).

    >>> pyarrow.dataset.dataset(collection.paths, format=collection.format).to_table()  # doctest: +SKIP
    """

    collection_id: str
    state: str
    destination: str
    format: str
    records: int
    files: tuple[CollectedFile, ...]
    complete: bool
    missing: tuple[Document, ...]
    created: bool
    raw: Document = field(repr=False, compare=False)

    @property
    def paths(self) -> list[str]:
        """The absolute path of every file of the dataset, in order."""
        return [f.path for f in self.files]

    @classmethod
    def of(cls, doc: Document) -> Collection:
        where = doc["destination"]
        files = tuple(CollectedFile(path=os.path.join(where, f["path"]), rows=f["rows"], size=f["size"],
                                    sha256=f["sha256"]) for f in doc["files"])
        return cls(collection_id=doc["collection_id"], state=doc["state"], destination=where, format=doc["format"],
                   records=doc["records"], files=files, complete=doc["complete"], missing=tuple(doc["missing"]),
                   created=doc["created"], raw=doc)
