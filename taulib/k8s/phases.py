"""Where along its way a workload is: the `phases` of the status snapshot, by Tau's rules.

`phases(primary, obj, lifecycle, wls, wl_read, pods, pod_read, lookup=, manager_view=)` reads the workload whose
verdict is the snapshot's (`primary`, "Job" or "RayJob", and its object `obj`; None when neither was found, with
`lookup` the reason a read of them failed), tau's lifecycle word for it, the `workloads[]` entries it owns with the
read they came from, and the Pod objects it owns (as `taulib.k8s.api` returns them) with the read they came from.
It returns the phases in Tau's order, each `{name, status, detail, hint}`, status pending, active, done, warning or
skipped, in Tau's words: Tau's `startupPhasesAt` (core/status/phases.go in Azure/taugrid), and Tau's words for a
read that failed (its v1alpha1 observations): Submitted, Kueue admission, MultiKueue placement (`manager_view`: a
MultiKueue workload with no pods here), RayCluster (a RayJob), Pod scheduling, DRA allocation, Image pull, Init
containers, Container start, Ready (these six skipped in the manager's view), RayJob status and Compute release (a
RayJob).

tau reads no Events, no ResourceClaim and no RayCluster objects, so the branches of Tau's rules that need them never
fire: Image pull never quotes kubelet's Pulling message, an eviction is read from the Workload's Evicted condition
rather than Kueue's Evicted or Preempted event, and a pod's ResourceClaims are referenced but their allocation is not
observed. What tau decides otherwise on purpose is listed in tau-status(7), "Differences from Tau": Kueue admission
without a Workload (`_kueue`), an ended Job whose pods are gone (`podphases.pod_phases`).

Pure functions of the objects read: no I/O, no clock. Where Tau's reading depends on the order of a list, the pods
are read by name and their containers by name, so the same objects give the same phases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib.k8s import v1alpha1
from taulib.k8s.api import NOT_FOUND, OBSERVED, UNAVAILABLE, Read
from taulib.k8s.kueue import QUEUE_LABEL
from taulib.k8s.objects import condition, meta, status_of
from taulib.k8s.podphases import POD_PHASES, dash as _dash, first as _first, phase as _phase, pod_phases, pod_view

if TYPE_CHECKING:
    from taulib.jsonio import Record

KUEUE_TIP = f"check the {QUEUE_LABEL} label if this stays empty"
MANAGER_VIEW = "manager view only; worker-cluster pod lifecycle is not visible here"


def phases(primary: str | None, obj: Record | None, lifecycle: str, wls: list[Record], wl_read: Read[list[Record]],
           pods: list[Record], pod_read: Read[list[Record]], *, lookup: str | None = None,
           manager_view: bool = False) -> list[Record]:
    """The phases of the primary workload, or, when nothing was found, the phases still to come."""
    job = obj if primary == "Job" else None
    ray = obj if primary == "RayJob" else None
    views = sorted((pod_view(p) for p in pods), key=lambda p: (p["name"], p["uid"]))
    out = [_submitted(primary, lookup), _kueue(obj, lifecycle, wls, wl_read)]
    if manager_view:
        out.append(_placement(job, ray, wls))
    if ray is not None:
        out.append(_raycluster(ray))
    if manager_view:
        out.extend(_phase(name, "skipped", MANAGER_VIEW) for name in POD_PHASES)
    else:
        out.extend(pod_phases(job, ray, lifecycle, views, pod_read))
    if ray is not None:
        out.extend([_rayjob_status(ray), _release(ray, views, pod_read, wls, manager_view)])
    return out


# -- Submitted, Kueue admission, MultiKueue placement --------------------------------------------------------------

def _submitted(primary: str | None, lookup: str | None) -> Record:
    if primary == "Job":
        return _phase("Submitted", "done", "batch/v1 Job created")
    if primary == "RayJob":
        return _phase("Submitted", "done", "RayJob created")
    if lookup:
        return _phase("Submitted", "warning", f"workload lookup unavailable: {lookup}",
                      "request read access for the workload kind or use a context with existing viewer permissions")
    return _phase("Submitted", "pending", "no batch/v1 Job or RayJob found")


def _kueue(obj: Record | None, lifecycle: str, wls: list[Record], wl_read: Read[list[Record]]) -> Record:
    name = "Kueue admission"
    if not wls:
        if wl_read.state == UNAVAILABLE:
            return _phase(name, "warning", f"workload status unavailable: {wl_read.reason or 'unknown'}",
                          "request get/list access to workloads.kueue.x-k8s.io")
        if obj is None:
            return _phase(name, "pending", "workload not observed", KUEUE_TIP)
        # tau's, not Tau's (which says "waiting for Kueue Workload"): skipped where no Workload will come
        queue = (meta(obj).get("labels") or {}).get(QUEUE_LABEL)
        if wl_read.state == NOT_FOUND and queue:
            return _phase(name, "warning", f"it names queue {queue!r}, but Kueue is not installed",
                          f"install Kueue, or remove the {QUEUE_LABEL} label")
        if wl_read.state == NOT_FOUND:
            return _phase(name, "skipped", "not queued by Kueue (Kueue is not installed)")
        if not queue:
            return _phase(name, "skipped", f"not queued by Kueue (no {QUEUE_LABEL} label)")
        if lifecycle in ("succeeded", "failed"):
            return _phase(name, "skipped", f"queue {queue!r}: no Kueue Workload is left")
        return _phase(name, "active", "waiting for Kueue Workload", KUEUE_TIP)
    admitted = finished = pending = 0
    warning = ""
    for wl in wls:
        if (wl["phase"] or "").lower() == "finished":
            finished += 1
        elif wl["admitted"]:
            admitted += 1
        else:
            pending += 1
            evicted = wl["evicted"] or {}  # Tau's Preemption, from the Evicted condition
            warning = warning or _first(evicted.get("reason"), evicted.get("message"), "Evicted" if evicted else "",
                                        wl["reason"])
    total = len(wls)
    detail = f"{finished}/{total} finished; quota released" if finished == total else f"{admitted}/{total} admitted"
    queues = sorted({wl["queue"] for wl in wls if wl["queue"]})
    if queues:
        detail += " queue=" + ",".join(queues)
    if admitted + finished == total:
        return _phase(name, "done", detail)
    status, hint = "active", None
    if warning:
        detail += f" reason={warning}"
        if "quota" in warning.lower():
            hint = "quota is reserved per LocalQueue/ClusterQueue; check queue capacity and borrowing"
    if pending == total and any(wl["evicted"] for wl in wls):  # Tau: an Evicted or Preempted event
        status, hint = "warning", "Kueue reported eviction/preemption; check Workload conditions"
    return _phase(name, status, detail, hint)


def _placement(job: Record | None, ray: Record | None, wls: list[Record]) -> Record:
    name = "MultiKueue placement"
    if job is not None and condition(job, "Failed") or v1alpha1.ray_failed(ray):
        return _phase(name, "warning", "workload failed")
    if job is not None and condition(job, "Complete") or v1alpha1.ray_succeeded(ray):
        return _phase(name, "done", "workload completed")
    state = v1alpha1.multikueue_state(job, ray, wls) or "Pending"
    worker = _placement_worker(wls, state)
    if state == "Rejected":
        return _phase(name, "warning", _check_message(wls, state, "worker-cluster placement rejected"))
    if state == "Retry":
        return _phase(name, "active", _check_message(wls, state, "retrying worker-cluster placement"))
    if state == "Ready":
        return _phase(name, "done", "worker-cluster placement ready" + (f" on {worker}" if worker else ""))
    if state == "Selected":
        return _phase(name, "active", f"selected worker cluster {_dash(worker)}")
    if state == "Nominated":
        nominated = sorted({n for wl in wls for n in wl["nominatedClusters"] if n})
        return _phase(name, "active", "nominated worker clusters: " + ", ".join(nominated))
    return _phase(name, "active", _check_message(wls, state, "waiting for worker-cluster placement"))


def _mk_checks(wl: Record) -> list[Record]:
    return [c for c in wl["admissionChecks"] if v1alpha1.is_multikueue_check(c)]


def _check_message(wls: list[Record], state: str, fallback: str) -> str:
    """The message of the first MultiKueue check in `state`, by workload and check name."""
    for wl in sorted(wls, key=lambda w: str(w["name"])):
        for check in _mk_checks(wl):
            if str(check["state"]).lower() == state.lower() and (check["message"] or "").strip():
                return str(check["message"])
    return fallback


def _placement_worker(wls: list[Record], state: str) -> str:
    """Tau's PlacementWorkerCluster: the one worker cluster of the placement ("" when they disagree)."""
    worker = ""
    for wl in wls:
        if not wl["workerCluster"]:
            continue
        checks = _mk_checks(wl)
        if state != "Ready" and checks and all(c["state"] == "Ready" for c in checks):
            continue
        if worker and worker != wl["workerCluster"]:
            return ""
        worker = wl["workerCluster"]
    return worker


# -- the RayJob: its RayCluster, its status, the release of its compute --------------------------------------------

def _ray_status(ray: Record) -> tuple[str, str, str, str]:
    st = status_of(ray)
    return (_first(st.get("jobDeploymentStatus")), _first(st.get("jobStatus")), _first(st.get("reason")),
            _first(st.get("message")))


def _raycluster(ray: Record) -> Record:
    cluster = _first(status_of(ray).get("rayClusterName"))
    if not cluster:
        return _phase("RayCluster", "active", "waiting for KubeRay to create RayCluster")
    return _phase("RayCluster", "warning" if v1alpha1.ray_failed(ray) else "done", f"created {cluster}")


def _rayjob_status(ray: Record) -> Record:
    deployment, job_status, reason, message = _ray_status(ray)
    detail = _first(deployment, job_status, "waiting for RayJob status")
    if v1alpha1.ray_failed(ray):
        said = _first(reason, message)
        return _phase("RayJob status", "warning", detail + (f" reason={said}" if said else ""))
    if v1alpha1.ray_started(ray):
        return _phase("RayJob status", "done", detail)
    return _phase("RayJob status", "pending" if detail.lower() == "waiting for rayjob status" else "active", detail)


def _release(ray: Record, views: list[Record], pod_read: Read[list[Record]], wls: list[Record],
             manager_view: bool) -> Record:
    name = "Compute release"
    if not v1alpha1.ray_succeeded(ray) and not v1alpha1.ray_failed(ray):
        return _phase(name, "pending", "waiting for RayJob terminal status")
    if manager_view:
        return _phase(name, "skipped", "manager view only; Kueue quota can be released before worker-cluster GPUs "
                      "are reusable", "check worker-cluster RayCluster and pod teardown before resubmitting into "
                      "constrained capacity")
    if pod_read.state != OBSERVED and not views:
        return _phase(name, "warning", "Ray pod state unavailable; physical resource reusability unknown",
                      "retry status with permission to list pods before resubmitting into constrained capacity")
    active = [p for p in views if p["phase"] not in ("Succeeded", "Failed")]
    nodes = sorted({p["node"] for p in active if p["node"]})
    released = bool(wls) and all((wl["phase"] or "").lower() == "finished" for wl in wls)
    if active:
        detail = f"{len(active)} Ray pod(s) still hold {len(nodes)} node(s)" + (f": {', '.join(nodes)}" if nodes
                                                                                 else "")
        detail = ("quota released; " if released else "") + "resources NOT reusable; " + detail
        return _phase(name, "active", detail,
                      "wait for KubeRay to delete the RayCluster and for all node-bound Ray pods to terminate")
    detail = "resources reusable; no active Ray pods remain"
    if released:
        return _phase(name, "done", "quota released; " + detail)
    if wls:
        return _phase(name, "active", detail + "; waiting for Kueue quota release")
    return _phase(name, "done", detail)
