"""Tau's v1alpha1 status values, by Tau's own rules: the `state`, `kind` and container-issue words Tau's users script.

`tau run status -o json` (Tau, schemaVersion v1alpha1) says `state` in its own words; tau's snapshot keeps that
field exactly and carries its own cross-engine word in `lifecycle` (tau-status(7) gives the mapping). The rules:
- `state(job, ray, wls, pods_seen, job_read, ray_read)` (Tau's `deriveState`/`outputState`): with a Job found, the
  Job decides, even beside a RayJob of the same name: Failed=True -> "Failed" (before Complete), Complete=True ->
  "Complete", active > 0 -> "Running", spec.suspend -> "Pending (suspended; Kueue not yet admitted)", else
  "Admitted (no active pods yet)". A RayJob alone: `ray_failed` -> "Failed", `ray_succeeded` -> "Complete", else by
  jobDeploymentStatus (or jobStatus when it is unset), upper-cased: RUNNING -> "Running", SUSPENDED -> "Pending
  (suspended; Kueue not yet admitted)", INITIALIZING -> "Initializing", NEW or unset -> "New", anything else the
  raw value. A MultiKueue workload seen only from the manager (no pods here) takes terminal conditions first, then
  the manager's Job or RayJob where it says, then the placement state (`multikueue_state`). Neither found: both
  not found (or the RayJob type not installed) -> "NotFound", else "Unknown".
- `ray_failed`: jobStatus, jobDeploymentStatus or reason contains fail, error, stop or cancel (any case);
  `ray_succeeded`: not failed, and jobStatus or jobDeploymentStatus contains succeed or complete; `ray_started`:
  jobDeploymentStatus (else jobStatus) contains succeed, complete or running.
- `kind(job_found, ray_found)`: what was found: "Job+RayJob", "RayJob", "Job" or "Unknown".
- `manager_view`: a MultiKueue workload (`is_multikueue`) with no pods here; its phases (`phases`) list the placement
  and skip the pods'.
Tau's `reason` (a container's issue first, in `pods.issue_text`'s words, else the failure as "reason message",
`jobs`) is the first of the snapshot's issues (`status`).

Pure functions of the objects read: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib.k8s.objects import condition, count

if TYPE_CHECKING:
    from taulib.jsonio import Record

SUSPENDED = "Pending (suspended; Kueue not yet admitted)"
ADMITTED = "Admitted (no active pods yet)"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
MULTIKUEUE_CHECK = "multikueue"  # the check's name Tau falls back to when its controller cannot be looked up
# MultiKueue placement, in Tau's precedence
MULTIKUEUE_STATES = ("Rejected", "Retry", "Ready", "Selected", "Nominated", "Pending")


def _ray_fields(ray: Record | None) -> tuple[str, str, str]:
    st = (ray or {}).get("status") or {}
    job_status, deployment, reason = (v if isinstance(v, str) else "" for v in (st.get("jobStatus"),
                                                                              st.get("jobDeploymentStatus"),
                                                                              st.get("reason")))
    return job_status, deployment, reason


def ray_failed(ray: Record | None) -> bool:
    if ray is None:
        return False
    return any(word in value.strip().lower() for value in _ray_fields(ray)
               for word in ("fail", "error", "stop", "cancel"))


def ray_succeeded(ray: Record | None) -> bool:
    if ray is None or ray_failed(ray):
        return False
    job_status, deployment, _ = _ray_fields(ray)
    return any(word in value.strip().lower() for value in (job_status, deployment) for word in ("succeed", "complete"))


def ray_started(ray: Record | None) -> bool:
    """Tau's `rayJobStatusComplete`: jobDeploymentStatus (jobStatus when it is unset) contains succeed, complete or
    running: the RayJob's startup is done."""
    job_status, deployment, _ = _ray_fields(ray)
    value = (deployment if deployment.strip() else job_status).lower()
    return any(word in value for word in ("succeed", "complete", "running"))


def job_state(job: Record) -> str:
    """Tau's state of a batch Job alone."""
    if condition(job, "Failed"):
        return "Failed"
    if condition(job, "Complete"):
        return "Complete"
    if count(((job.get("status") or {}).get("active"))) > 0:
        return "Running"
    if ((job.get("spec") or {}).get("suspend")) is True:
        return SUSPENDED
    return ADMITTED


def rayjob_state(ray: Record) -> str:
    """Tau's state of a RayJob alone."""
    if ray_failed(ray):
        return "Failed"
    if ray_succeeded(ray):
        return "Complete"
    job_status, deployment, _ = _ray_fields(ray)
    raw = deployment or job_status
    return {"RUNNING": "Running", "SUSPENDED": SUSPENDED, "INITIALIZING": "Initializing", "NEW": "New",
            "": "New"}.get(raw.upper(), raw)


def is_multikueue_check(check: Record) -> bool:
    """A `workloads[].admissionChecks[]` entry of MultiKueue: by its controller, or by Tau's exact-name fallback
    when the controller could not be looked up."""
    controller: object = check.get("controller")
    if controller:
        return controller == MULTIKUEUE_CONTROLLER
    return bool(check.get("controllerLookupFailed")) and check.get("name") == MULTIKUEUE_CHECK


def is_multikueue(job: Record | None, ray: Record | None, wls: list[Record]) -> bool:
    if any(((obj or {}).get("spec") or {}).get("managedBy") == MULTIKUEUE_CONTROLLER for obj in (job, ray)):
        return True
    return any(w["workerCluster"] or w["nominatedClusters"] or any(is_multikueue_check(c) for c in
                                                                   w["admissionChecks"]) for w in wls)


def manager_view(job: Record | None, ray: Record | None, wls: list[Record], pod_count: int) -> bool:
    """Tau's `ManagerOnlyMultiKueueView`: a MultiKueue workload seen from the manager, with no pods here (they run on
    a worker cluster)."""
    return is_multikueue(job, ray, wls) and pod_count == 0


def multikueue_state(job: Record | None, ray: Record | None, wls: list[Record]) -> str | None:
    """The manager-visible MultiKueue placement state (None when the workload is not MultiKueue's)."""
    if not is_multikueue(job, ray, wls):
        return None
    found = set()
    ready_all = bool(wls)
    for w in wls:
        checks = [c for c in w["admissionChecks"] if is_multikueue_check(c)]
        found |= {c["state"] for c in checks if c["state"] in ("Rejected", "Retry")}
        ready = bool(checks) and all(c["state"] == "Ready" for c in checks)
        ready_all = ready_all and ready
        if ready:
            continue
        if w["workerCluster"]:
            found.add("Selected")
        elif w["nominatedClusters"]:
            found.add("Nominated")
    if ready_all:
        found.add("Ready")
    return next((s for s in MULTIKUEUE_STATES if s in found), "Pending")


def state(job: Record | None, ray: Record | None, wls: list[Record], pod_count: int, job_missing: bool,
          ray_missing: bool) -> str:
    """Tau's top-level `state`. `job_missing`/`ray_missing`: the read found nothing (for the RayJob, also: its type
    is not installed); a read that failed is neither found nor missing."""
    if job is None and ray is None:
        return "NotFound" if job_missing and ray_missing else "Unknown"
    if manager_view(job, ray, wls, pod_count):
        if job is not None and condition(job, "Failed") or ray_failed(ray):
            return "Failed"
        if job is not None and condition(job, "Complete") or ray_succeeded(ray):
            return "Complete"
        if job is not None and count((job.get("status") or {}).get("active")) > 0:
            return "Running"
        if ray is not None:
            job_status, deployment, _ = _ray_fields(ray)
            manager = {"Running": "Running", "Suspended": SUSPENDED, "Initializing": "Initializing",
                       "New": "New"}.get(deployment or job_status)
            if manager:
                return manager
        return multikueue_state(job, ray, wls) or "Pending"
    return job_state(job) if job is not None else rayjob_state(ray)  # type: ignore[arg-type]


def kind(job_found: bool, ray_found: bool) -> str:
    if job_found and ray_found:
        return "Job+RayJob"
    return "RayJob" if ray_found else "Job" if job_found else "Unknown"
