"""Observing recorded Slurm attempts: one batched squeue and one batched sacct per cycle.

Only the job ids recorded in live attempts are asked about (chunked), never the whole cluster. Each attempt gets
its queue view (squeue: pending/running while slurmctld holds it) and its accounting view (the newest sacct row of
its task, with its exit code, and how many requeued/preempted rows came before it). A source that cannot be asked
(slurmctld or slurmdbd down, a timeout, output tau cannot read, a state spelling tau does not know) is reported as
unavailable for this cycle, which reconcile treats as "nothing learned", never as "the job is absent".
"""

from __future__ import annotations

from taulib.errors import Unavailable
from taulib.jsonio import Record
from taulib.slurm import commands, parse


def _view(row: parse.Row, restarts: int = 0) -> Record:
    reason = row.raw
    if row.signal:
        reason += f", signal {row.signal}"
    elif row.exit_code:
        reason += f", exit code {row.exit_code}"
    if row.reason and row.reason not in ("None", ""):
        reason += f" ({row.reason})"
    if restarts:
        reason += f"; requeued {restarts} time(s) before"
    return {"state": row.state, "raw": row.raw, "exit_code": row.exit_code, "reason": reason}


def observe(attempts: list[Record]) -> tuple[list[Record], Record]:
    """(views, sources) for Slurm attempts."""
    job_ids = sorted({a["scheduler"]["job_id"] for a in attempts}, key=int)
    sources = {"queue": "observed", "accounting": "observed", "reason": None}
    reasons = []
    queue: dict[tuple[str, int | None], parse.Row] = {}
    accounting: dict[tuple[str, int | None], tuple[parse.Row, int]] = {}
    try:
        rows = commands.squeue(job_ids)
        unknown = [r.raw for r in rows if r.state == "unknown"]
        if unknown:
            raise Unavailable(f"squeue reports states tau does not know: {sorted(set(unknown))}")
        queue = {(r.job_id, r.task): r for r in rows}
    except Unavailable as exc:
        sources["queue"] = "unavailable"
        reasons.append(exc.message)
    try:
        rows = commands.sacct(job_ids, arrays=set(job_ids))
        unknown = [r.raw for r in rows if r.state == "unknown"]
        if unknown:
            raise Unavailable(f"sacct reports states tau does not know: {sorted(set(unknown))}")
        accounting = parse.latest_by_task(rows)
    except Unavailable as exc:
        sources["accounting"] = "unavailable"
        reasons.append(exc.message)
    if reasons:
        sources["reason"] = "; ".join(reasons)
    views = []
    for attempt in attempts:
        sched = attempt["scheduler"]
        key = (sched["job_id"], sched["task_index"])
        q = queue.get(key)
        a = accounting.get(key)
        views.append({"shard_id": attempt["shard_id"], "attempt_id": attempt["attempt_id"], "scheduler": sched,
                      "queue": _view(q) if q is not None else None,
                      "accounting": _view(*a) if a is not None else None})
    return views, sources
