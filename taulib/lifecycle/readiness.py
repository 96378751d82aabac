"""Recording an attempt's readiness (readiness.json, tau-run(5)): replaced by its allocation, revision by revision.

A run without services keeps version 1: the allocation's phase (starting, running, restarting, stopped, failed), a
message, and the records its client reported done. A run with services writes version 2: the same, and its
deployments (`lifecycle.services`), from which its state follows, each revision checked against the one before
it by `rules.readiness.transition` before it is written.

Reads: the attempt's readiness.json. Writes: it (the caller holds the shard lock), and a line on standard error (the
allocation's log) for every revision of version 2 whose deployments changed.
Promises: revisions grow by one; `updated_at` never goes back; a version-2 revision that breaks a transition rule
is refused (Conflict), never written.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from taulib import jsonio
from taulib.errors import Conflict
from taulib.rules import readiness as rules
from taulib.rundir import layout

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.lifecycle.services import Services
    from taulib.rundir.run import Run


def rel(attempt: Record) -> str:
    return layout.attempt_file(attempt["shard_id"], attempt["attempt_id"], "readiness.json")


def write(run: Run, attempt: Record, phase: str, message: str | None, records_done: int | None = None,
          services: Services | None = None) -> Record:
    """Replace the attempt's readiness (the caller holds the shard lock): version 1 in `phase`, or with
    `services`, version 2 with their deployments."""
    path = rel(attempt)
    current = run.dir.read(path, "tau.readiness")
    now = jsonio.now_rfc3339()
    if current is not None:
        now = max(now, current["updated_at"])
    progressed = None  # when the client's count last changed: kept while it stands still (rules.stall)
    if records_done is not None:
        same = current is not None and current.get("records_done") == records_done
        progressed = (current.get("progress_at") or now) if same and current is not None else now
    record: Record = {
        "kind": "tau.readiness", "schema_version": 1, "run_id": attempt["run_id"], "shard_id": attempt["shard_id"],
        "attempt_id": attempt["attempt_id"], "revision": 1 if current is None else current["revision"] + 1,
        "updated_at": now, "state": phase, "restarts": attempt["restarts"],
        "message": message, "records_done": records_done, "progress_at": progressed}
    if services is not None:
        deployments = services.deployments()
        record.update(schema_version=2, state=rules.aggregate(deployments), client=services.client,
                      deployments=deployments, message=None if message is None else rules.clean(message))
        problem = rules.transition(current, record)
        if problem is not None:
            raise Conflict(f"{run.dir.show(path)}: {problem}; refusing to write revision {record['revision']}",
                           path=run.dir.show(path))
    run.dir.replace(path, record)
    if services is not None:
        services.changed = False
        if current is None or _shown(current) != _shown(record):
            print(f"tau-attempt: readiness revision {record['revision']}: {record['state']} ({services.summary()}; "
                  f"client {record['client']})"
                  + (f": {record['message']}" if record["message"] else ""), file=sys.stderr, flush=True)
    return record


def _shown(record: Record) -> tuple[object, ...]:
    """What a person reading the allocation's log is told of: the state, the client, each deployment's state and
    ready backends."""
    return (record["state"], record.get("client"),
            tuple((d["state"], d["ready_backends"]) for d in record.get("deployments", ())))
