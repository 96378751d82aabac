"""Slurm as tau's executor (`taulib.executors.Executor`): every submission one sbatch job array, observed with one
batched squeue and one batched sacct, stopped with scancel of exact array tasks; a collection is a CPU job of its
own without GPUs.

Reads: squeue, sacct and the process environment (an allocation's SLURM_* variables) through `slurm.commands` and
`taulib.env`. Writes: the job scripts `submissions/<id>/job.sh` and `collections/<id>/job.sh`, through the run
directory's one writer (`slurm.commands.sbatch_script`). Promises: sbatch is asked for exactly the rendered script
(`slurm.script`, every field validated first); an outcome that may have submitted a job is never taken for a
refusal (Ambiguous), and a PREPARED submission is resolved by the job's exact name, never submitted blindly again
(`rules.journal.resolve`); scancel is called only by tau-cancel, for the exact tasks of the attempts it stops.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from taulib import env, failpoints, jsonio
from taulib.errors import BadInput, Refused, Unavailable, UsageError
from taulib.executors.roles import (Capacity, CollectionJobs, Collects, Executor, Limits, Measured, Observed, Queue,
                                    Requeue, Resolved, Stopped, TaskEnd)
from taulib.executors.slurm import commands, parse, records, script, variables
from taulib.rules import journal as journal_rules
from taulib.rules.services import DEVICE_VARIABLES  # the allocation's variables a client gets beside Slurm's own
from taulib.rundir.journal import task_indices
from taulib.rundir.run import Run



ENGINE = journal_rules.Engine("Slurm", "sbatch")  # how the journal's reasons name Slurm


class SlurmCollectionJobs(CollectionJobs):
    """A collection's CPU job: an array of one task per collection task (or per task rerun), no GPU
    (`slurm.script.render_collection`), submitted without the caller's SBATCH_* variables."""

    engine = ENGINE

    def request(self, plan: dict[str, Any]) -> dict[str, str | None]:
        return script.collection_request(plan["scheduler"]["slurm"])

    def submit(self, run: Run, plan: dict[str, Any], job_name: str, task_indices: list[int], rerun: int = 0,
               request: dict[str, str | None] | None = None) -> str:
        collection_id = plan["collection_id"]
        text = script.render_collection(job_name=job_name, run_dir=run.path, collection_id=collection_id,
                                        python=sys.executable, profile=run.plan["scheduler"]["slurm"],
                                        task_indices=task_indices, request=request)
        rel = records.collection_script(collection_id, rerun)
        job_id = commands.sbatch_script(run, rel, text, pinned=True, resolved_by="tau-collect")
        failpoints.hit("collect.handed_off")  # the job exists, nothing records it: the lost reply
        return job_id

    def find(self, job_name: str, created: float) -> dict[str, set[int | None]]:
        return commands.find_by_name(job_name, os.getuid(), created)

    def queued(self, job_id: str) -> bool:
        return any(row.job_id == job_id for row in commands.squeue([job_id]))

    def accounted(self, run: Run, collection_id: str, job_id: str,
                  request: dict[str, str | None]) -> dict[int, TaskEnd] | None:
        """From one sacct call, each task's newest row (`parse.accounting_by_task`, as attempts are read); where it
        says FAILED or CANCELLED, what the task's own output says killed it (`slurm.kills`, as `_explain_kills` reads
        an attempt's): Slurm's memory enforcement without cgroups ends a task FAILED, and only slurmstepd's line
        names the memory kill. A task still pending or running in accounting, or in a state tau does not know, has
        no final word yet."""
        from taulib.errors import NotFound
        from taulib.executors.slurm import kills
        from taulib.rules.escalation import mem_mib

        rows = [r for r in commands.sacct([job_id], arrays={job_id}) if r.job_id == job_id]
        if not rows:
            return None
        latest, _unknown = parse.accounting_by_task(rows)
        limit = None if not request.get("mem") else int(mem_mib(str(request["mem"])) * 1024 * 1024)
        ends = {}
        for (_, task), (row, _restarts) in latest.items():
            if task is None or row.state in ("pending", "running", "requeued"):
                continue
            end = TaskEnd(row.state, row.raw)
            if row.state in ("failed", "cancelled"):
                try:
                    tail = run.dir.read_tail(records.collection_task_output(collection_id, job_id, task), kills.TAIL)
                except (NotFound, Refused):  # never written (it never started), or not a file of ours
                    tail = b""
                found = kills.cause(tail, row.state, limit)
                if found is not None:
                    end = TaskEnd(found.state, row.raw, found.evidence)
            ends[task] = end
        return ends

    def identity(self, environ: dict[str, str]) -> str | None:
        if not env.read(variables.JOB_ID, environ):
            return None
        job = env.read(variables.ARRAY_JOB_ID, environ) or env.read(variables.JOB_ID, environ) or ""
        try:
            return parse.job_id(job)
        except parse.ParseError:
            raise Refused(f"SLURM_ARRAY_JOB_ID/SLURM_JOB_ID ({parse.short_text(job)!r}) is not a Slurm job id") \
                from None

    def cpus(self, environ: dict[str, str]) -> int | None:
        given = env.read(variables.CPUS_PER_TASK, environ) or ""
        return int(given) if given.isascii() and given.isdigit() and 0 < len(given) <= 4 else None

    def task(self, environ: dict[str, str]) -> int | None:
        task = env.read(variables.ARRAY_TASK_ID, environ)
        if not task:
            return None
        try:
            return parse.task_index(task)
        except parse.ParseError:
            raise Refused(f"SLURM_ARRAY_TASK_ID ({parse.short_text(task)!r}) is not an array task index") from None


class Slurm(Queue, Requeue, Collects, Executor):
    variables = variables.VARIABLES
    name = "slurm"
    request_fields = {"mem": "mem", "time": "time"}

    def section(self, asked: dict[str, Any]) -> dict[str, Any]:
        return dict(asked)

    def check_section(self, section: dict[str, Any]) -> None:
        script.validate_profile(section)

    def check_site(self, section: dict[str, Any]) -> list[str]:
        from taulib.executors.slurm import limits

        return limits.missing_partitions([section[k] for k in ("partition", "collect_partition") if k in section])

    def preflight(self, plan: dict[str, Any], run_dir: str, python: str) -> None:
        """Every Slurm field is checked as the scripts will render it, from this run directory."""
        try:
            script.check_path(run_dir, "run directory")
        except BadInput as exc:
            raise UsageError(f"{exc.message}: use a path of letters, digits and ._-/ only, as sbatch needs") from None
        profile = plan["scheduler"]["slurm"]
        script.render(job_name="tau-check", run_dir=run_dir, submission_id="submission-0001", task_indices=[0],
                      python=python, profile=profile)
        script.render_collection(job_name="tau-check", run_dir=run_dir, collection_id="collection-0001",
                                 python=python, profile=profile, task_indices=[0])

    def request(self, section: dict[str, Any]) -> dict[str, str | None]:
        return {"mem": section.get("mem") or None, "time": section.get("time") or None}

    def check_request(self, run: Run, request: dict[str, str]) -> None:
        from taulib.executors.slurm import limits

        limits.check_request(request, run.plan["scheduler"]["slurm"].get("partition"))

    def gpus(self, section: dict[str, Any]) -> int:
        return int(section.get("gpus") or 0)

    def limits(self, plan: dict[str, Any]) -> Limits:
        return Limits(parallel=plan["scheduler"]["slurm"].get("max_parallel"))

    def capacity(self, run: Run) -> Capacity:
        from taulib.rundir.journal import SUBMISSIONS, Journal
        from taulib.executors.slurm import limits

        run_jobs = {status["job_id"] for _, status in Journal(run, SUBMISSIONS).entries()
                    if status is not None and status["job_id"]}
        return limits.read(run.plan["scheduler"]["slurm"], run_jobs)

    def render(self, run: Run, plan: dict[str, Any]) -> str | None:
        profile = dict(run.plan["scheduler"]["slurm"])
        for key, value in (plan.get("resources") or {}).items():  # a window's grown request (retry.escalate)
            if value is not None:
                profile[key] = value
        return script.render(job_name=plan["job_name"], run_dir=run.path, submission_id=plan["submission_id"],
                             task_indices=task_indices(plan), python=sys.executable, profile=profile)

    def hand_off(self, run: Run, plan: dict[str, Any], text: str | None) -> str:
        if text is None:
            raise BadInput(f"submission {plan['submission_id']} has no job script to hand to sbatch")
        return commands.sbatch_script(run, records.submission_script(plan["submission_id"]), text)

    def resolve(self, run: Run, plan: dict[str, Any], status: dict[str, Any]) -> Resolved:
        found = commands.find_by_name(plan["job_name"], os.getuid(), jsonio.parse_time(plan["created_at"]))
        verdict = journal_rules.resolve(found, set(task_indices(plan)), jsonio.now_rfc3339() > status["deadline"],
                                        plan["job_name"], ENGINE)
        return Resolved(verdict, sorted(found))

    def observe(self, run: Run, attempts: list[dict[str, Any]]) -> Observed:
        from taulib.executors.slurm import observe

        views, sources = observe.observe(attempts)
        _explain_kills(run, attempts, views)
        return Observed(views, sources)

    def usage(self, run: Run, submissions: list[tuple[dict[str, Any], str, set[int]]]) -> Measured:
        """From one sacct call (per 500 jobs) over the submissions' jobs: Elapsed, TotalCPU, the batch step's
        MaxRSS, AllocCPUS, the GPUs of AllocTRES, ReqMem and Timelimit of each finished task."""
        try:
            rows = commands.sacct_usage(sorted({job for _, job, _ in submissions}, key=int))
        except Unavailable as exc:
            return Measured({}, exc.message)
        found: dict[str, dict[int, dict[str, Any]]] = {}
        for plan, job, _ in submissions:
            for index in task_indices(plan):
                figures = rows.get((job, index))
                if figures is not None:
                    found.setdefault(plan["submission_id"], {})[index] = dict(figures, source="sacct")
        return Measured(found, None)

    def running(self, run: Run, attempt: dict[str, Any]) -> bool | None:
        sched = attempt["scheduler"]
        try:
            rows = commands.squeue([sched["job_id"]])
        except Unavailable:
            return None
        return any(r.job_id == sched["job_id"] and r.task in (sched["task_index"], None) for r in rows)

    def stop(self, run: Run, attempts: list[dict[str, Any]], whole_run: bool) -> Stopped:
        try:
            commands.scancel(sorted({f"{a['scheduler']['job_id']}_{a['scheduler']['task_index']}" for a in attempts}))
        except Unavailable as exc:
            return Stopped([], f"the cancellation is recorded, but stopping its Slurm tasks failed ({exc.message}); "
                               "they stop themselves when they next look, or run tau-cancel again")
        return Stopped(list(attempts), None)

    def output_path(self, attempt: dict[str, Any]) -> str:
        sched = attempt["scheduler"]
        return records.task_output(attempt["submission_id"], sched["job_id"], sched["task_index"])

    def identity(self, environ: dict[str, str]) -> dict[str, Any] | None:
        if not env.read(variables.JOB_ID, environ):
            return None
        job = env.read(variables.ARRAY_JOB_ID, environ)
        task = env.read(variables.ARRAY_TASK_ID, environ)
        if not job or not isinstance(task, str):
            raise Refused("this Slurm job is not an array task (SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID unset)")
        try:
            return {"executor": self.name, "job_id": parse.job_id(job), "task_index": parse.task_index(task)}
        except parse.ParseError:
            raise Refused(f"SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID ({parse.short_text(job)!r}, "
                          f"{parse.short_text(task)!r}) are not a Slurm job id and array task index") from None

    def restarts(self, environ: dict[str, str]) -> int:
        return env.read(variables.RESTART_COUNT, environ)

    def devices(self, environ: dict[str, str]) -> list[str] | None:
        """The devices Slurm bound (CUDA_VISIBLE_DEVICES, else SLURM_JOB_GPUS: the node's numbers, as Slurm sets
        them without cgroup renumbering)."""
        from taulib.rules.services import parse_devices

        found = parse_devices(env.get("CUDA_VISIBLE_DEVICES", environ))
        return found if found is not None else parse_devices(env.read(variables.JOB_GPUS, environ))

    def allocation_variables(self, environ: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in environ.items() if k.startswith("SLURM_") or k in DEVICE_VARIABLES}

    def collection_jobs(self) -> CollectionJobs:
        return _COLLECTION_JOBS


_COLLECTION_JOBS = SlurmCollectionJobs()
EXECUTOR = Slurm()


def _explain_kills(run: Run, attempts: list[dict[str, Any]], views: list[dict[str, Any]]) -> None:
    """Where accounting says a task FAILED or was CANCELLED, what its own output says killed it (`slurm.kills`:
    Slurm's memory enforcement without cgroups, a time limit) becomes its accounting state, slurmstepd's words
    added to the reason: the kill is named out_of_memory or timed_out, as escalation needs."""
    from taulib.errors import NotFound, Refused
    from taulib.executors.slurm import kills
    from taulib.rules.escalation import mem_mib
    from taulib.rundir import state

    plans: dict[str, Any] = {}
    for attempt, view in zip(attempts, views, strict=True):
        seen = view.get("accounting")
        if seen is None or seen["state"] not in ("failed", "cancelled"):
            continue
        try:
            tail = run.dir.read_tail(EXECUTOR.output_path(attempt), kills.TAIL)
        except (NotFound, Refused):  # not written yet, or not a file of ours: nothing it says is believed
            continue
        mem = state.attempt_request(run, attempt, plans).get("mem")
        found = kills.cause(tail, seen["state"], None if not mem else int(mem_mib(mem) * 1024 * 1024))
        if found is not None:
            view["accounting"] = dict(seen, state=found.state, reason=f"{seen['reason']}: {found.evidence}")
