"""The embedded local executor as tau's executor (`taulib.executors.Executor`): a detached supervisor per
submission runs its tasks on this machine, at most `max_parallel` at once (see `taulib.executors.local`).

Reads: the supervisor's and tasks' records (`local.observe`), /proc, the process environment (TAU_LOCAL_JOB_ID and
TAU_LOCAL_TASK_ID of a task). Writes: through `local.supervisor` only (its own folder `submissions/<id>/local/`).
Promises: a submission's job id is its submission id, so its hand-off is never ambiguous; only processes tau
recorded, known by pid and start time, are ever signalled; a collection runs inline, in tau-collect itself.
"""

from __future__ import annotations

from typing import Any

from taulib import env
from taulib.errors import BadInput, Refused
from taulib.executors.local import records, variables
from taulib.executors.roles import Executor, Limits, Measured, Observed, Resolved, Starter, Stopped
from taulib.rules import escalation
from taulib.rundir.journal import task_indices
from taulib.rundir.run import Run

MAX_PARALLEL = 4  # tasks of a submission that run at once when the plan does not say


class Local(Starter, Executor):
    variables = variables.VARIABLES
    name = "local"
    request_fields = {"mem": "mem", "time": "time_limit"}

    def section(self, asked: dict[str, Any]) -> dict[str, Any]:
        section = {"max_parallel": asked.get("max_parallel", MAX_PARALLEL)}
        if "time_limit" in asked:
            section["time_limit"] = asked["time_limit"]
        if "mem" in asked:
            section["mem"] = asked["mem"]
        if "gpus" in asked:
            section["gpus"] = [str(device) for device in asked["gpus"]]
        return section

    def check_section(self, section: dict[str, Any]) -> None:
        if escalation.limit_seconds(section.get("time_limit")) == 0:
            raise BadInput("scheduler.local.time_limit is zero; give the longest an attempt may run, at least 1 s")
        if "mem" in section and escalation.mem_mib(section["mem"]) < 1:
            raise BadInput("scheduler.local.mem is less than 1M; give the most memory a task may use, like 4G")

    def request(self, section: dict[str, Any]) -> dict[str, str | None]:
        limit = escalation.limit_seconds(section.get("time_limit"))
        return {"mem": section.get("mem") or None, "time": None if limit is None else escalation.format_time(limit)}

    def check_request(self, run: Run, request: dict[str, str]) -> None:
        """A granted --mem more than this machine has is refused; a time limit is anything."""
        if not request.get("mem"):
            return
        total = _mem_total()
        if total is not None and escalation.mem_mib(request["mem"]) * 1024 * 1024 > total:
            raise BadInput(f"cannot grant that: --mem {request['mem']} is more than this machine has "
                           f"({total // (1024 * 1024)}M)")

    def gpus(self, section: dict[str, Any]) -> int:
        return len(section.get("gpus", []))  # a task may be given any of them, one live task each

    def limits(self, plan: dict[str, Any]) -> Limits:
        return Limits(parallel=plan["scheduler"]["local"]["max_parallel"])

    def hand_off(self, run: Run, plan: dict[str, Any], text: str | None) -> str:
        return str(plan["submission_id"])  # the job is the submission: nothing to ask, nothing ambiguous

    def resolve(self, run: Run, plan: dict[str, Any], status: dict[str, Any]) -> Resolved:
        from taulib.rules.journal import Resolution

        job = str(plan["submission_id"])
        return Resolved(Resolution("adopt", job, "the local executor's job is its submission"), [job])

    def start(self, run: Run, plan: dict[str, Any]) -> None:
        from taulib.executors.local import supervisor

        supervisor.spawn(run, plan["submission_id"])

    def stalled(self, run: Run, plan: dict[str, Any]) -> bool:
        """Whether some task never started (its supervisor was killed, or tau-submit crashed before starting it):
        a task the supervisor started has a record."""
        sub_id = plan["submission_id"]
        return not all(run.dir.exists(records.task(sub_id, index)) for index in task_indices(plan))

    def observe(self, run: Run, attempts: list[dict[str, Any]]) -> Observed:
        from taulib.executors.roles import OBSERVED
        from taulib.executors.local import observe

        return Observed(observe.observe(run, attempts), dict(OBSERVED))

    def usage(self, run: Run, submissions: list[tuple[dict[str, Any], str, set[int]]]) -> Measured:
        """From the task records: the rusage the supervisor recorded when it reaped each task (one core: the
        local executor allots none), and nothing for a task never started."""
        from taulib.executors.local import memory, observe, supervisor

        found: dict[str, dict[int, dict[str, Any]]] = {}
        for plan, job, known in submissions:
            limit = supervisor.time_limit(run, plan)
            for index in task_indices(plan):
                if index in known:
                    continue  # measured already: its record is not read again
                task = run.dir.read(records.task(job, index), "tau.local-task")
                if task is None or task["state"] == "running" or (task["state"] == "finished" and "usage" not in task):
                    continue  # not finished, or finished under a tau that measured nothing
                used = task.get("usage") or {"elapsed_seconds": 0.0, "cpu_seconds": 0.0, "max_rss_bytes": None}
                state = "CANCELLED" if task["state"] == "skipped" else observe.finished(task)["raw"]
                found.setdefault(plan["submission_id"], {})[index] = {
                    "state": state, **used, "cpus": 1, "gpus": 0,
                    "mem_requested_bytes": memory.mem_limit(run, plan),
                    "time_limit_seconds": limit, "source": "rusage"}
        return Measured(found, None)

    def running(self, run: Run, attempt: dict[str, Any]) -> bool | None:
        from taulib.executors.local import observe

        return observe.observe(run, [attempt])[0]["queue"] is not None

    def stop(self, run: Run, attempts: list[dict[str, Any]], whole_run: bool) -> Stopped:
        from taulib.executors.local import supervisor

        return Stopped(supervisor.stop(run, attempts, whole_run), None)

    def sweep(self, run: Run) -> list[str]:
        from taulib.executors.local import supervisor

        return supervisor.sweep(run)

    def output_path(self, attempt: dict[str, Any]) -> str:
        return records.task_log(attempt["submission_id"], attempt["scheduler"]["task_index"])

    def identity(self, environ: dict[str, str]) -> dict[str, Any] | None:
        job = env.read(variables.JOB_ID, environ)
        if not job:
            return None
        try:
            task = int(env.read(variables.TASK_ID, environ) or "")
        except ValueError:
            raise Refused("TAU_LOCAL_TASK_ID is not a task index; tau-attempt runs only inside an allocation") \
                from None
        return {"executor": self.name, "job_id": job, "task_index": task}

    def devices(self, environ: dict[str, str]) -> list[str] | None:
        from taulib.rules.services import parse_devices

        return parse_devices(env.read(variables.GPUS, environ))  # the supervisor's, locked for this task

    def allocation_variables(self, environ: dict[str, str]) -> dict[str, str]:
        return {}  # a local task's environment is the submitter's: nothing of it passes but what the run names



EXECUTOR = Local()


def _mem_total() -> int | None:
    """This machine's memory in bytes (/proc/meminfo MemTotal), or None when it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
