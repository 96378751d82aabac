"""Observing recorded Slurm attempts: one batched squeue and one batched sacct per cycle.

Only the job ids recorded in live attempts are asked about (chunked), never the whole cluster. Each attempt gets
its queue view (squeue: pending/running while slurmctld holds it) and its accounting view (the newest sacct row of
its task, with its exit code, and how many requeued/preempted rows came before it). A source that cannot be asked
(slurmctld or slurmdbd down, a timeout, output tau cannot read, a row of a job tau did not ask about) is reported
as unavailable for this cycle, which reconcile treats as "nothing learned", never as "the job is absent". A task
whose own rows cannot be read (two queue rows, a state spelling tau does not know) is unavailable alone: its view
carries its own `sources`, and every other attempt's evidence still counts.
"""

from __future__ import annotations

from taulib.errors import BadInput, Unavailable
from taulib.jsonio import Record
from taulib.rundir import layout
from taulib.executors.slurm import commands, parse


def _view(row: parse.Row, restarts: int = 0, queue: bool = False) -> Record:
    """A row as one view: {state, raw, exit_code, reason}. The reason of a pending queue row is squeue's reason code
    alone ("Resources", "JobArrayTaskLimit"; its state when it gave none and the state is not plain PENDING, such
    as "CONFIGURING"; else None), which the verdict glosses (`rules.attempt.queued`); any other row's is its state
    with what the row adds: "FAILED, exit code 1", "RUNNING", "PENDING; requeued 1 time(s) before"."""
    code = row.reason if row.reason not in (None, "None", "") else None
    if queue and row.state == "pending":
        return {"state": row.state, "raw": row.raw, "exit_code": row.exit_code,
                "reason": code if code is not None or row.raw == "PENDING" else row.raw}
    reason = row.raw
    if row.signal:
        reason += f", signal {row.signal}"
    elif row.exit_code:
        reason += f", exit code {row.exit_code}"
    if code is not None:
        reason += f" ({code})"
    if restarts:
        reason += f"; requeued {restarts} time(s) before"
    return {"state": row.state, "raw": row.raw, "exit_code": row.exit_code, "reason": reason}


def observe(attempts: list[Record]) -> tuple[list[Record], Record]:
    """(views, sources) for Slurm attempts. A view whose task alone could not be read (two queue rows, a state tau
    does not know) has its own `sources`, with that source unavailable for it and the reason."""
    job_ids = sorted({_job_id(a) for a in attempts}, key=int)
    sources = {"queue": "observed", "accounting": "observed", "reason": None}
    reasons = []
    queue: dict[tuple[str, int | None], parse.Row] = {}
    accounting: dict[tuple[str, int | None], tuple[parse.Row, int]] = {}
    queue_problems: dict[tuple[str, int | None], str] = {}
    accounting_problems: dict[tuple[str, int | None], str] = {}
    try:
        queue, queue_problems = parse.queue_by_task(commands.squeue(job_ids))
    except Unavailable as exc:
        sources["queue"] = "unavailable"
        reasons.append(exc.message)
    try:
        accounting, accounting_problems = parse.accounting_by_task(commands.sacct(job_ids, arrays=set(job_ids)))
    except Unavailable as exc:
        sources["accounting"] = "unavailable"
        reasons.append(exc.message)
    views = []
    for attempt in attempts:
        sched = attempt["scheduler"]
        key = (sched["job_id"], sched["task_index"])
        q = queue.get(key)
        a = accounting.get(key)
        view = {"shard_id": attempt["shard_id"], "attempt_id": attempt["attempt_id"], "scheduler": sched,
                "queue": _view(q, queue=True) if q is not None else None,
                "accounting": _view(*a) if a is not None else None}
        problems = [p for p in (queue_problems.get(key), accounting_problems.get(key)) if p]
        if problems:
            view["sources"] = {"queue": "unavailable" if key in queue_problems else sources["queue"],
                               "accounting": "unavailable" if key in accounting_problems else sources["accounting"],
                               "reason": "; ".join(problems)}
            reasons.extend(problems)
        views.append(view)
    if reasons:
        sources["reason"] = "; ".join(dict.fromkeys(reasons))
    return views, sources


def _job_id(attempt: Record) -> str:
    """The attempt's recorded Slurm job id; BadInput naming its record when it is not one (tau records only what
    sbatch printed and `parse.sbatch_job_id` accepted)."""
    job = attempt["scheduler"]["job_id"]
    try:
        return parse.job_id(job)
    except parse.ParseError:
        raise BadInput(f"{layout.attempt_file(attempt['shard_id'], attempt['attempt_id'], 'attempt.json')} records "
                       f"Slurm job id {parse.short_text(job)!r}, which is not a Slurm job id",
                       shard_id=attempt["shard_id"]) from None
