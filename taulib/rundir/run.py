"""An existing run, opened: its directory, its run record and its plan, read and verified once.

Reads: run.json and plan.json (the plan's sha256 must be the one run.json names); in runs made by earlier versions
of tau, a shard's shards/shard-NNNNN/shard.json. Writes: nothing.
Promises: a `Run` exists only for a directory that is a complete tau run (run.json is published last by tau-init),
whose plan is the one it was created with; a plan written before a field existed is read with that field's
default (`rules.plan.with_defaults`).

The run's format (run.json `run_format`, tau-run(5)): a run made by this version is format 2, whose bookkeeping is
derived rather than written per shard: a shard's record range comes from the plan (`rules.shards.shard_range`),
its submissions' plans hold `task_ranges`, and an attempt of a bound submission is recorded by that submission
until the first process that changes it publishes its attempt.json (`rundir.state.Submitted`). A run made by an
earlier version (no `run_format`: format 1) has a shard.json per shard, which `shard` reads exactly as before,
and keeps the per-shard records of format 1 in every later submission, so earlier versions can still work on it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from taulib import jsonio
from taulib.errors import Conflict, NotFound
from taulib.rules.plan import with_defaults
from taulib.rules.shards import shard_range
from taulib.rundir import layout
from taulib.rundir.records import RunDir

if TYPE_CHECKING:
    from taulib.jsonio import Record

INPUT_LIMIT = 256 << 20  # bytes of an input index at most (about a million pieces)
RUN_FORMAT = 2  # what tau-init writes now; a run.json without `run_format` is format 1
_SHARD_ID = r"^shard-[0-9]{5,12}\Z"  # compiled on first use (re caches it): most commands never check one


class Run:
    """An existing run: `dir` (its RunDir), `record` (run.json), `plan`, `run_id`, `plan_sha256`, `shard_count`,
    `format`."""

    def __init__(self, run_dir: str) -> None:
        self.dir = RunDir(run_dir)
        try:
            record = self.dir.read(layout.RUN, "tau.run")
            if record is None:
                raise NotFound(f"{self.dir.path!r} is not a tau run (no run.json); create it with tau-init",
                               run_dir=self.dir.path)
            plan_bytes = self.dir.read_bytes(layout.PLAN)
            if plan_bytes is None or jsonio.sha256_hex(plan_bytes) != record["plan"]["sha256"]:
                raise Conflict(f"plan.json of run {record['run_id']!r} does not match the digest in run.json",
                               run_dir=self.dir.path)
            self.plan = with_defaults(self.dir.decode(layout.PLAN, plan_bytes, "tau.plan"))
        except BaseException:
            self.dir.close()
            raise
        self.record = record
        self.run_id: str = record["run_id"]
        self.plan_sha256: str = record["plan"]["sha256"]
        self.shard_count: int = record["shard_count"]
        self.format: int = record.get("run_format", 1)
        self.environment: Record | None = record.get("environment")  # None for runs made before the pre-flight
        self.path = self.dir.path
        self._input: Record | None = None

    def close(self) -> None:
        self.dir.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def input_index(self) -> Record | None:
        """The run's input index (input.json: `inputs.index`), verified against the digest run.json names; None for
        a run without an input."""
        ref = self.record.get("input")
        if ref is None:
            return None
        if self._input is None:
            data = self.dir.read_bytes(layout.INPUT, limit=INPUT_LIMIT)
            if data is None or jsonio.sha256_hex(data) != ref["sha256"]:
                raise Conflict(f"input.json of run {self.run_id!r} does not match the digest in run.json",
                               run_dir=self.dir.path)
            self._input = self.dir.decode(layout.INPUT, data, "tau.input-index")
        return self._input

    def shard_ids(self) -> list[str]:
        return [layout.shard_id(i) for i in range(self.shard_count)]

    def check_shard(self, sid: str) -> int:
        if not re.match(_SHARD_ID, sid) or layout.shard_index(sid) >= self.shard_count:
            raise NotFound(f"run {self.run_id!r} has no shard {sid!r}", shard_id=sid)
        return layout.shard_index(sid)

    def shard(self, sid: str) -> Record:
        """The shard's record ({index, record_start, record_end, ...}, as shard.json holds it)."""
        index = self.check_shard(sid)
        if self.format >= 2:
            start, end = shard_range(self.plan, index)
            return {"kind": "tau.shard", "schema_version": 1, "run_id": self.run_id, "shard_id": sid, "index": index,
                    "record_start": start, "record_end": end}
        return self.dir.require(layout.shard_record(sid), "tau.shard")
