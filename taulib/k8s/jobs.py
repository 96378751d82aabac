"""Jobs and RayJobs: the state a batch Job or a KubeRay RayJob is in, from its own status alone.

`job_state(job)` reads a batch/v1 Job and returns (state, detail, failure reason); `rayjob_state(rayjob)` reads a
ray.io/v1 RayJob and returns (state, detail, failure reason, app problem). `job_section` and `rayjob_section` return
the `job` and `rayJob` sections of the status snapshot, given the verdict (state, detail, problems) already derived.
`STATES` are the state words of every tau status (tau-status(7)); `TERMINAL` are those a workload does not leave.

The rules:
- Job: Failed (or FailureTarget) wins over Complete; then active pods, then suspension (waiting for Kueue).
- RayJob: `RAYJOB_DEPLOYMENT` maps the controller's `jobDeploymentStatus` to a lifecycle state; the Ray job's
  `jobStatus` (which may be stale) never ends a RayJob the controller has not ended, it can only mark it degraded
  (`RAYJOB_APP`); under a Complete controller `RAYJOB_COMPLETE` says how it ended; an unknown value is `unknown`,
  never guessed.

Pure functions of the object read: no I/O, no clock. Pods and Kueue Workloads are judged elsewhere (`pods`,
`kueue`); `status` composes them into the workload's verdict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib.k8s.kueue import QUEUE_LABEL
from taulib.k8s.objects import condition, count, meta, reported_conditions, status_of

if TYPE_CHECKING:
    from taulib.jsonio import Record

STATES = ("pending", "running", "succeeded", "failed", "unknown", "not_found")
TERMINAL = frozenset({"succeeded", "failed", "not_found"})

# jobDeploymentStatus (the KubeRay controller's lifecycle) -> (state, detail). "" is a RayJob nobody has acted on.
RAYJOB_DEPLOYMENT = {
    "": ("pending", "new: the RayJob controller has not acted on it yet"),
    "New": ("pending", "new: the RayJob controller has not acted on it yet"),
    "Initializing": ("pending", "initializing: the RayCluster is starting"),
    "Waiting": ("pending", "waiting for the Ray job to be submitted"),
    "Suspending": ("pending", "suspending: the RayCluster is being deleted"),
    "Suspended": ("pending", "suspended"),
    "Retrying": ("pending", "retrying: a new RayCluster is being created after a failed attempt"),
    "Running": ("running", "running on its RayCluster"),
    "Complete": ("succeeded", "complete"),  # refined by RAYJOB_COMPLETE: older KubeRay ends failed jobs Complete
    "Failed": ("failed", "the RayJob failed"),
    "ValidationFailed": ("failed", "the RayJob spec failed validation"),
}
# jobStatus when jobDeploymentStatus is Complete -> state
RAYJOB_COMPLETE = {"SUCCEEDED": "succeeded", "FAILED": "failed", "STOPPED": "failed"}
# jobStatus under a live controller: what the Ray job itself says
RAYJOB_APP = {
    "": None, "PENDING": None, "RUNNING": None,
    "SUCCEEDED": "the Ray job SUCCEEDED; the controller has not completed the RayJob yet",
    "FAILED": "the Ray job FAILED while the RayJob controller still reports {deployment}",
    "STOPPED": "the Ray job was STOPPED while the RayJob controller still reports {deployment}",
}


def _said(obj: Record) -> str | None:
    """"reason message" of a condition or a status, as Tau's v1alpha1 reason joins them."""
    return " ".join(p for p in (obj.get("reason"), obj.get("message")) if isinstance(p, str) and p) or None


def job_state(job: Record) -> tuple[str, str, str | None]:
    """(state, detail, failure reason) of a batch Job."""
    st = status_of(job)
    failed = condition(job, "Failed") or condition(job, "FailureTarget")
    if failed:
        why = failed.get("reason") or failed["type"]
        return "failed", f"the Job failed ({why})", _said(failed) or "the Job failed"
    if condition(job, "Complete") or condition(job, "SuccessCriteriaMet"):
        return "succeeded", "the Job completed", None
    active = count(st.get("active"))
    if active:
        ready = st.get("ready")
        suffix = f", {ready} ready" if isinstance(ready, int) else ""
        return "running", f"{active} active pod{'s' if active != 1 else ''}{suffix}", None
    if (job.get("spec") or {}).get("suspend") or condition(job, "Suspended"):
        queue = (meta(job).get("labels") or {}).get(QUEUE_LABEL)
        if queue:
            return "pending", f"suspended: waiting for Kueue to admit it (queue {queue!r})", None
        return "pending", "suspended", None
    return "pending", "created, no active pods yet", None


def rayjob_state(rayjob: Record) -> tuple[str, str, str | None, str | None]:
    """(state, detail, failure reason, app problem) of a RayJob, from the enumerated tables above."""
    st = status_of(rayjob)
    deployment = st.get("jobDeploymentStatus") or ""
    app = st.get("jobStatus") or ""
    app = app if isinstance(app, str) else repr(app)
    explained = _said(st)
    if not isinstance(deployment, str) or deployment not in RAYJOB_DEPLOYMENT:  # a newer KubeRay: never guessed
        return "unknown", f"unrecognised jobDeploymentStatus {deployment!r} (jobStatus {app!r})", None, None
    state, detail = RAYJOB_DEPLOYMENT[deployment]
    if deployment == "Complete":
        state = RAYJOB_COMPLETE.get(app, "unknown")
        if state == "unknown":
            return state, f"jobDeploymentStatus Complete with jobStatus {app!r}: cannot tell how it ended", \
                None, None
        detail = f"complete: the Ray job {app}"
        reason = None if state == "succeeded" else (explained or f"the Ray job {app}")
        return state, detail, reason, None
    if state == "failed":
        detail = f"{detail} ({st['reason']})" if st.get("reason") else detail
        return state, detail, explained or f"jobDeploymentStatus {deployment} (jobStatus {app or 'unset'})", None
    problem = RAYJOB_APP.get(app, "the Ray job reports an unrecognised jobStatus {app!r}")
    if deployment == "Retrying":
        said = ": ".join(p for p in (st.get("reason"), st.get("message")) if isinstance(p, str) and p)
        problem = "a previous attempt failed" + (f" ({said})" if said else "")
    if app and state == "running":
        detail = f"{detail}; the Ray job is {app}"
    return state, detail, None, None if problem is None else problem.format(deployment=deployment, app=app)


def job_section(job: Record, submitter_of: str | None, verdict: Record, tau_state: str) -> Record:
    """The Job as reported, with its verdict (lifecycle, detail, problems) and Tau's state of it alone."""
    st = status_of(job)
    return {"name": meta(job).get("name"), "uid": meta(job).get("uid"),
            "submitterOf": submitter_of,
            "state": tau_state, "lifecycle": verdict["state"], "stateDetail": verdict["detail"],
            "suspended": bool((job.get("spec") or {}).get("suspend")),
            "active": count(st.get("active")), "succeeded": count(st.get("succeeded")),
            "failed": count(st.get("failed")),
            "startTime": st.get("startTime") or None, "completionTime": st.get("completionTime") or None,
            "conditions": reported_conditions(job), "degraded": bool(verdict["problems"])}


def rayjob_section(rayjob: Record, verdict: Record, tau_state: str) -> Record:
    """The RayJob as reported, with its verdict (lifecycle, detail, problems) and Tau's state of it alone."""
    st = status_of(rayjob)
    return {"name": meta(rayjob).get("name"), "uid": meta(rayjob).get("uid"),
            "state": tau_state, "lifecycle": verdict["state"], "stateDetail": verdict["detail"],
            "deploymentStatus": st.get("jobDeploymentStatus") or None, "jobStatus": st.get("jobStatus") or None,
            "rayClusterName": st.get("rayClusterName") or None, "jobId": st.get("jobId") or None,
            "reason": st.get("reason") or None, "message": st.get("message") or None,
            "succeeded": count(st.get("succeeded")), "failed": count(st.get("failed")),
            "startTime": st.get("startTime") or None, "endTime": st.get("endTime") or None,
            "conditions": reported_conditions(rayjob), "degraded": bool(verdict["problems"])}
