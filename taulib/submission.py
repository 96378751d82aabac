"""Submissions: the journal that gives shards new attempts and hands them to an executor (tau-submit, tau-retry).

Protocol, under `run.lock` (shared) then `submit.lock`:
  1. settle the newest journal: a folder without status.json never reached the executor and is removed; a
     PREPARED one is finished (local) or resolved (Slurm, by exact job name, see `_resolve`) before anything new
     is planned;
  2. publish `submissions/submission-NNNN/plan.json` (the shards, their next attempt ids, task indices, the job
     name derived from the run id, the digest of run.json and the submission number);
  3. publish status PREPARED (revision 1) with a visibility deadline;            failpoint submit.prepared
  4. hand the tasks to the executor and learn the job id: the local executor's job id is the submission id; for
     Slurm, the rendered script is published as `job.sh` and submitted with `sbatch --parsable` as one job array.
     A definite refusal marks the journal FAILED (exit 69); an ambiguous outcome (timeout, lost reply, unparsable
     reply) leaves it PREPARED and exits 75: the next call resolves it, and never submits blindly again;
  5. publish each attempt.json (state submitted, bound to the job id and task) under its shard lock;
                                                                                  failpoint submit.attempts_published
  6. replace status with SUBMITTED (revision 2);                                 failpoint submit.submitted
  7. local executor: start the supervisor.
A crash at any step is finished by the next tau-submit or tau-retry; no step is ever done twice with a different
outcome: attempts are published with bytes derived from the plan, so re-publishing them is idempotent.

Resolving a PREPARED Slurm journal (`_resolve`): ask squeue (all states) and sacct for jobs of this user with the
exact job name submitted since the plan was made. One job whose tasks are exactly the planned indices is adopted.
No job, or only some of its tasks visible: wait (exit 75) until the visibility deadline, then retire the journal
(FAILED) so that the caller submits a replacement; allocations of a retired job are fenced by tau-attempt. More
than one job, or a job of another shape, is a conflict (73) for a person to look at.
"""

from __future__ import annotations

import os
import sys

from taulib import failpoints, jsonio, layout, local, locks, state
from taulib.errors import Busy, Conflict


def _journal_ids(run) -> list[str]:
    names = [n for n in run.dir.listdir("submissions") if n.startswith("submission-")]
    return sorted(names, key=lambda n: int(n.split("-")[1]))


def job_name(run, number: str) -> str:
    """`tau-<run id>-<sha256 of run.json, 8 hex>-<number>`: derived from persisted records only, and different for
    two runs made from the same plan in folders of the same name (run.json holds its creation time)."""
    return f"tau-{run.run_id[:100]}-{jsonio.digest(run.record)[:8]}-{number}"


def _job_name(run, sub_id: str) -> str:
    return job_name(run, sub_id.split("-")[1])


def read_journal(run, sub_id: str) -> tuple[dict, dict | None]:
    plan = run.dir.require(f"submissions/{sub_id}/plan.json", "tau.submission-plan")
    status = run.dir.read(f"submissions/{sub_id}/status.json", "tau.submission-status")
    return plan, status


def journals(run) -> list[tuple[dict, dict | None]]:
    out = []
    for sub_id in _journal_ids(run):
        if run.dir.exists(f"submissions/{sub_id}/plan.json"):
            out.append(read_journal(run, sub_id))
    return out


def _settle(run) -> None:
    """Finish, resolve or discard the newest journal (caller holds submit.lock)."""
    ids = _journal_ids(run)
    if not ids:
        return
    newest = ids[-1]
    if not run.dir.exists(f"submissions/{newest}/status.json"):
        run.dir.remove_tree(f"submissions/{newest}")  # never reached PREPARED, so never reached the executor
        return
    plan, status = read_journal(run, newest)
    if status is None or status["state"] != "prepared":
        return
    _resolve(run, plan, status)


def _status_path(plan: dict) -> str:
    return f"submissions/{plan['submission_id']}/status.json"


def _render(run, plan: dict) -> str:
    from taulib.slurm import script

    return script.render(job_name=plan["job_name"], run_dir=run.path, submission_id=plan["submission_id"],
                         task_indices=[t["task_index"] for t in plan["tasks"]], python=sys.executable,
                         profile=run.plan["scheduler"]["slurm"])


def _hand_off(run, plan: dict, status: dict, text: str | None) -> dict:
    """Step 4 for a new PREPARED journal (the script was rendered before the journal was written), then bind."""
    if plan["executor"] == "local":
        return _bind(run, plan, status, plan["submission_id"])
    from taulib.slurm import commands

    try:
        job_id = commands.sbatch_script(run, f"submissions/{plan['submission_id']}/job.sh", text)
    except commands.SubmitRefused as exc:
        _retire(run, plan, status, exc.message)
        raise
    return _bind(run, plan, status, job_id)


def _retire(run, plan: dict, status: dict, reason: str) -> dict:
    status = dict(status, revision=status["revision"] + 1, state="failed", updated_at=jsonio.now_rfc3339(),
                  reason=reason[:500])
    run.dir.replace(_status_path(plan), status)
    return status


def _resolve(run, plan: dict, status: dict) -> dict:
    """Settle a PREPARED journal: local ones are finished; Slurm ones are found by exact name or retired."""
    if plan["executor"] == "local":
        return _bind(run, plan, status, plan["submission_id"])
    from taulib.slurm import commands

    found = commands.find_by_name(plan["job_name"], os.getuid(), jsonio.parse_time(plan["created_at"]))
    expected = {t["task_index"] for t in plan["tasks"]}
    deadline = status["deadline"]
    past_deadline = jsonio.now_rfc3339() > deadline
    if len(found) > 1:
        raise Conflict(f"{len(found)} Slurm jobs are named {plan['job_name']!r} (ids {sorted(found)}); tau adopts "
                       "only one: cancel the extra ones, then run tau-submit again", job_ids=sorted(found))
    if len(found) == 1:
        job_id, seen = next(iter(found.items()))
        if None in seen or not seen <= expected:
            raise Conflict(f"Slurm job {job_id} is named {plan['job_name']!r} but its tasks {sorted(map(str, seen))} "
                           "are not the submission's; refusing to adopt it", job_id=job_id)
        if seen == expected:
            return _bind(run, plan, status, job_id)
        if not past_deadline:
            raise Busy(f"only some tasks of Slurm job {job_id} are visible yet; the submission is resolved by "
                       f"{deadline}: try again", job_id=job_id)
        return _retire(run, plan, status, f"only tasks {sorted(seen)} of job {job_id} were visible by the deadline")
    if not past_deadline:
        raise Busy(f"submission {plan['submission_id']} is not visible in Slurm yet (its sbatch reply was lost); "
                   f"it is resolved by {deadline}: try again", submission_id=plan["submission_id"])
    return _retire(run, plan, status, "no job with its name was visible in Slurm by the visibility deadline")


def _bind(run, plan: dict, status: dict, job_id: str) -> dict:
    """Steps 5-7."""
    _publish_attempts(run, plan, job_id)
    failpoints.hit("submit.attempts_published")
    status = dict(status, revision=status["revision"] + 1, state="submitted", job_id=job_id,
                  updated_at=jsonio.now_rfc3339())
    run.dir.replace(_status_path(plan), status)
    failpoints.hit("submit.submitted")
    if plan["executor"] == "local":
        local.spawn_supervisor(run, plan["submission_id"])
    return status


def _publish_attempts(run, plan: dict, job_id: str) -> None:
    windows = run.plan["windows"]
    for task in sorted(plan["tasks"], key=lambda t: t["shard_id"]):
        sid, aid = task["shard_id"], task["attempt_id"]
        dataset = (layout.shard_dataset(sid) if run.plan["resume"] == "always"
                   else layout.attempt_file(sid, aid, "dataset"))
        record = {
            "kind": "tau.attempt", "schema_version": 1, "run_id": run.run_id, "shard_id": sid, "attempt_id": aid,
            "ordinal": task["ordinal"], "plan_sha256": run.plan_sha256, "submission_id": plan["submission_id"],
            "scheduler": {"executor": plan["executor"], "job_id": job_id, "task_index": task["task_index"]},
            "windows": windows, "state": "submitted", "terminal": None, "dataset": dataset, "revision": 1,
            "created_at": plan["created_at"], "updated_at": plan["created_at"], "started_at": None,
            "restarts": 0}
        rel = layout.attempt_file(sid, aid, "attempt.json")
        with locks.hold(run.dir, locks.shard_lock_name(sid)):
            existing = run.dir.read(rel, "tau.attempt")
            if existing is None:
                run.dir.publish(rel, record)
            elif (existing["submission_id"], existing["scheduler"]) != (plan["submission_id"], record["scheduler"]):
                raise Conflict(f"{rel} is bound to another submission", path=rel)


def submit(run, purpose: str, select) -> dict:
    """Create and hand off a submission for the shards `select(run)` returns (each gets its next attempt).

    `select` runs under the submit lock, so concurrent callers see each other's attempts and converge.
    """
    with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "submit"):
        _settle(run)
        if purpose == "initial":
            for plan, status in journals(run):
                if plan["purpose"] == "initial" and status is not None and status["state"] == "submitted":
                    _ensure_supervisor(run, plan)
                    return dict(_summary(plan, status, created=False), skipped=[])
        shard_ids, skipped = select(run)
        if not shard_ids:
            return {"submission_id": None, "skipped": skipped, "purpose": purpose, "job_id": None,
                    "created": False, "tasks": []}
        tasks = []
        for sid in shard_ids:
            ordinal = len(state.attempt_ids(run, sid)) + 1
            tasks.append({"shard_id": sid, "attempt_id": layout.attempt_id(ordinal), "ordinal": ordinal,
                          "task_index": layout.shard_index(sid)})
        ids = _journal_ids(run)
        sub_id = layout.submission_id(int(ids[-1].split("-")[1]) + 1 if ids else 1)
        now = jsonio.now_rfc3339()
        plan = {"kind": "tau.submission-plan", "schema_version": 1, "run_id": run.run_id,
                "submission_id": sub_id, "purpose": purpose, "plan_sha256": run.plan_sha256, "created_at": now,
                "executor": run.plan["scheduler"]["profile"], "job_name": _job_name(run, sub_id),
                "tasks": tasks}
        plan_bytes = jsonio.canonical(plan)
        text = _render(run, plan) if plan["executor"] == "slurm" else None  # refuse bad fields before the journal
        run.dir.publish(f"submissions/{sub_id}/plan.json", plan)
        deadline = jsonio.format_time(jsonio.parse_time(now) + run.plan["windows"]["submission_visibility_seconds"])
        status = {"kind": "tau.submission-status", "schema_version": 1, "run_id": run.run_id,
                  "submission_id": sub_id, "plan": {"path": f"submissions/{sub_id}/plan.json",
                                                    "sha256": jsonio.sha256_hex(plan_bytes)},
                  "revision": 1, "state": "prepared", "updated_at": now, "deadline": deadline,
                  "job_id": None, "reason": None}
        run.dir.replace(f"submissions/{sub_id}/status.json", status)
        failpoints.hit("submit.prepared")
        status = _hand_off(run, plan, status, text)
        return dict(_summary(plan, status, created=True), skipped=skipped)


def _ensure_supervisor(run, plan: dict) -> None:
    """Restart the local supervisor of a submission whose tasks did not all start (it was killed, or tau-submit
    crashed before starting it)."""
    sub_id = plan["submission_id"]
    if plan["executor"] == "local" and not all(
            run.dir.exists(layout.local_task(sub_id, t["task_index"])) for t in plan["tasks"]):
        local.spawn_supervisor(run, sub_id)


def _summary(plan: dict, status: dict, created: bool) -> dict:
    return {"submission_id": plan["submission_id"], "purpose": plan["purpose"], "job_id": status["job_id"],
            "job_name": plan["job_name"], "state": status["state"], "created": created,
            "tasks": plan["tasks"]}
