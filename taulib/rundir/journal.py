"""The journal: one protocol for submissions (`submissions/submission-NNNN/`) and collections
(`collections/collection-NNNN/`), so that work handed to a scheduler is recorded before it is handed over.

Reads and Writes: the entry folders of one journal, each holding `plan.json` (immutable: what was asked) and
`status.json` (mutable, revision + 1 on every change: prepared -> submitted/running -> succeeded/failed). The caller
holds the journal's lock (`submit.lock` or `collect.lock`).
Promises:
- an entry is opened by publishing its plan, then its status PREPARED with a visibility deadline (its creation time
  plus the run's submission-visibility window), before anything is handed to a scheduler;
- only the newest entry can be unfinished: `newest()` removes a newest folder that never reached PREPARED (plan or
  status missing: nothing was handed over), so the next id is never skipped or reused;
- `advance` changes a status by exactly one revision, stamped with the time of the change; `retire` marks an entry
  failed with its reason (a replacement is then a new entry, never a second try of the same one).
How an ambiguous PREPARED entry is resolved (by the job's exact name) is the pure rule `rules.journal.resolve`.

A submission's tasks (each one shard's next attempt: shard id, attempt id, ordinal, array task index, granted) are
written in its plan as `task_ranges`, runs of consecutive shards with one ordinal: a task's shard and attempt ids
follow from the range's first shard and the ordinal, and its array task index is its shard's index unless the range
says otherwise (`task`: the index of its first task, when a submission's array must stay below the scheduler's
largest index), so 100,000 first attempts are one range and the plan stays a few hundred bytes whatever the run's
size. An allocation learns its shard from the plan (`find_task`), never by arithmetic of its own. Plans written by
earlier versions of tau list every task (`tasks`); `tasks`, `task_count`, `task_indices` and `find_task` read both
the same way.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NamedTuple

from taulib import jsonio
from taulib.rundir import layout

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run


class Kind(NamedTuple):
    folder: str  # "submissions"
    prefix: str  # "submission"
    id_field: str  # "submission_id"
    plan_kind: str
    status_kind: str


SUBMISSIONS = Kind("submissions", "submission", "submission_id", "tau.submission-plan", "tau.submission-status")
COLLECTIONS = Kind("collections", "collection", "collection_id", "tau.collection-plan", "tau.collection-status")


def compact_tasks(tasks: list[Record]) -> list[Record]:
    """The `task_ranges` of tasks in ascending shard order: {first, count, ordinal} (and granted, when true; and
    task, the array task index of the range's first task, when it is not the shard's index) per run of consecutive
    shards, with consecutive task indices, of one ordinal and grant."""
    ranges: list[Record] = []
    for task in tasks:
        shard, index = layout.shard_index(task["shard_id"]), task["task_index"]
        last = ranges[-1] if ranges else None
        granted = bool(task.get("granted"))
        if (last is not None and last["first"] + last["count"] == shard
                and _first_task(last) + last["count"] == index
                and last["ordinal"] == task["ordinal"] and bool(last.get("granted")) == granted):
            last["count"] += 1
            continue
        if last is not None and (shard < last["first"] + last["count"] or index < _first_task(last) + last["count"]):
            raise ValueError("tasks must be in ascending task order (their shards and array task indices both)")
        ranges.append({"first": shard, "count": 1, "ordinal": task["ordinal"],
                       **({"task": index} if index != shard else {}), **({"granted": True} if granted else {})})
    return ranges


def _first_task(task_range: Record) -> int:
    """The array task index of a range's first task: its own `task`, else its shard's index (plans that do not
    say, and every plan written before windows, give each task its shard's index)."""
    return int(task_range["task"] if "task" in task_range else task_range["first"])


def _task(shard: int, ordinal: int, granted: bool, index: int) -> Record:
    task: Record = {"shard_id": layout.shard_id(shard), "attempt_id": layout.attempt_id(ordinal),
                    "ordinal": ordinal, "task_index": index}
    return dict(task, granted=True) if granted else task


def tasks(plan: Record) -> list[Record]:
    """Every task of a submission plan, in its order (either form)."""
    if "tasks" in plan:
        listed: list[Record] = plan["tasks"]
        return listed
    return [_task(r["first"] + k, r["ordinal"], bool(r.get("granted")), _first_task(r) + k)
            for r in plan["task_ranges"] for k in range(r["count"])]


def task_count(plan: Record) -> int:
    return len(plan["tasks"]) if "tasks" in plan else sum(r["count"] for r in plan["task_ranges"])


def task_indices(plan: Record) -> list[int]:
    """The array task indices of a submission's tasks, in its order."""
    if "tasks" in plan:
        return [t["task_index"] for t in plan["tasks"]]
    return [_first_task(r) + k for r in plan["task_ranges"] for k in range(r["count"])]


def find_task(plan: Record, task_index: int) -> Record | None:
    """The plan's task of that array task index, or None: an allocation learns its shard here, from the plan."""
    if "tasks" in plan:
        return next((t for t in plan["tasks"] if t["task_index"] == task_index), None)
    for r in plan["task_ranges"]:
        offset = task_index - _first_task(r)
        if 0 <= offset < r["count"]:
            return _task(r["first"] + offset, r["ordinal"], bool(r.get("granted")), task_index)
    return None


def range_task_index(task_range: Record, shard: int) -> int:
    """The array task index a range gives shard `shard` (which the range holds)."""
    return _first_task(task_range) + shard - int(task_range["first"])


def job_name(run: Run, number: str) -> str:
    """The scheduler's job name of entry `number` ("0002", "c0001"): `tau-<run id>-<sha256 of run.json, 8
    hex>-<number>`, derived from persisted records only, so an ambiguous submission can be found again by it, and
    different for two runs made from the same plan in folders of the same name (run.json holds its creation time)."""
    return f"tau-{run.run_id[:100]}-{jsonio.digest(run.record)[:8]}-{number}"


class Entry(NamedTuple):
    plan: Record
    status: Record | None


class Journal:
    """The journal of one kind in an open run (a `taulib.rundir.run.Run`)."""

    def __init__(self, run: Run, kind: Kind) -> None:
        self.run = run
        self.kind = kind
        self._name = re.compile(rf"^{kind.prefix}-([0-9]{{4,}})\Z")

    def plan_rel(self, entry_id: str) -> str:
        return f"{self.kind.folder}/{entry_id}/plan.json"

    def status_rel(self, entry_id: str) -> str:
        return f"{self.kind.folder}/{entry_id}/status.json"

    def ids(self) -> list[str]:
        """Entry ids in order (names that are not entries are no part of the journal)."""
        found = [(int(m.group(1)), n) for n in self.run.dir.listdir(self.kind.folder) if (m := self._name.match(n))]
        return [name for _, name in sorted(found)]

    def next_id(self) -> str:
        ids = self.ids()
        number = int(ids[-1].removeprefix(f"{self.kind.prefix}-")) + 1 if ids else 1
        return f"{self.kind.prefix}-{number:04d}"

    def read(self, entry_id: str) -> Entry:
        plan = self.run.dir.require(self.plan_rel(entry_id), self.kind.plan_kind)
        return Entry(plan, self.run.dir.read(self.status_rel(entry_id), self.kind.status_kind))

    def entries(self) -> list[Entry]:
        return [self.read(i) for i in self.ids() if self.run.dir.exists(self.plan_rel(i))]

    def newest(self) -> Entry | None:
        """The newest entry that reached PREPARED; a newest folder that did not is removed (nothing was handed to
        a scheduler from it)."""
        ids = self.ids()
        if not ids:
            return None
        newest = ids[-1]
        if not (self.run.dir.exists(self.plan_rel(newest)) and self.run.dir.exists(self.status_rel(newest))):
            self.run.dir.remove_tree(f"{self.kind.folder}/{newest}")
            return None
        return self.read(newest)

    def open(self, plan: Record, **fields: object) -> Record:
        """Publish `plan` (its id field names the entry, its created_at the time), then its status PREPARED
        (revision 1, with `fields` and the visibility deadline). Returns the status."""
        entry_id = plan[self.kind.id_field]
        self.run.dir.publish(self.plan_rel(entry_id), plan)
        now = plan["created_at"]
        status = {"kind": self.kind.status_kind, "schema_version": 1, "run_id": self.run.run_id,
                  self.kind.id_field: entry_id,
                  "plan": {"path": self.plan_rel(entry_id), "sha256": jsonio.digest(plan)},
                  "revision": 1, "state": "prepared", "updated_at": now,
                  "deadline": self.deadline(now), "job_id": None, "reason": None,
                  **fields}
        self.run.dir.replace(self.status_rel(entry_id), status)
        return status

    def deadline(self, now: str) -> str:
        """The visibility deadline of a job handed to the scheduler at `now`: now + submission_visibility_seconds."""
        return jsonio.format_time(jsonio.parse_time(now) + self.run.plan["windows"]["submission_visibility_seconds"])

    def advance(self, status: Record, **changes: object) -> Record:
        """The status one revision on, with `changes`, stamped now."""
        status = dict(status, revision=status["revision"] + 1, updated_at=jsonio.now_rfc3339(), **changes)
        self.run.dir.replace(self.status_rel(status[self.kind.id_field]), status)
        return status

    def retire(self, status: Record, reason: str, **fields: object) -> Record:
        """Mark the entry failed, saying why (and with `fields`, what else its kind records of the end)."""
        return self.advance(status, state="failed", reason=reason[:500], **fields)

    def reread(self, status: Record) -> Record:
        """The stored status of the same entry (another process may have advanced it)."""
        return self.run.dir.require(self.status_rel(status[self.kind.id_field]), self.kind.status_kind)
