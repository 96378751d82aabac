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
without a Workload (`_kueue`), an ended Job whose pods are gone (`_pod_phases`).

Pure functions of the objects read: no I/O, no clock. Where Tau's reading depends on the order of a list, the pods
are read by name and their containers by name, so the same objects give the same phases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib.k8s import v1alpha1
from taulib.k8s.api import NOT_FOUND, OBSERVED, UNAVAILABLE, Read
from taulib.k8s.kueue import QUEUE_LABEL
from taulib.k8s.objects import condition, conditions, count, meta, status_of

if TYPE_CHECKING:
    from taulib.jsonio import Record

POD_PHASES = ("Pod scheduling", "DRA allocation", "Image pull", "Init containers", "Container start", "Ready")
IMAGE_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
CONTAINER_FAILURES = frozenset({"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError",
                                "RunContainerError", "Error"})
KUEUE_TIP = f"check the {QUEUE_LABEL} label if this stays empty"
MANAGER_VIEW = "manager view only; worker-cluster pod lifecycle is not visible here"
RAY_FAILED_TORN_DOWN = "RayJob failed; post-run RayCluster teardown removed pod evidence"
RAY_FAILED_UNREAD = "pod state unavailable after terminal RayJob failure"
RAY_TEARDOWN = "RayJob completed successfully; post-run RayCluster teardown"
JOB_PODS_GONE = "the Job ended and none of its pods is left"  # tau's, not Tau's: see _pod_phases


def _phase(name: str, status: str, detail: str, hint: str | None = None) -> Record:
    return {"name": name, "status": status, "detail": detail, "hint": hint or None}


def _first(*values: object) -> str:
    """Tau's firstNonEmpty: the first value that is not blank, else ""."""
    return next((v for v in values if isinstance(v, str) and v.strip()), "")


def _dash(value: str) -> str:
    return value if value.strip() else "-"


def phases(primary: str | None, obj: Record | None, lifecycle: str, wls: list[Record], wl_read: Read[list[Record]],
           pods: list[Record], pod_read: Read[list[Record]], *, lookup: str | None = None,
           manager_view: bool = False) -> list[Record]:
    """The phases of the primary workload, or, when nothing was found, the phases still to come."""
    job = obj if primary == "Job" else None
    ray = obj if primary == "RayJob" else None
    views = sorted((_pod_view(p) for p in pods), key=lambda p: (p["name"], p["uid"]))
    out = [_submitted(primary, lookup), _kueue(obj, lifecycle, wls, wl_read)]
    if manager_view:
        out.append(_placement(job, ray, wls))
    if ray is not None:
        out.append(_raycluster(ray))
    if manager_view:
        out.extend(_phase(name, "skipped", MANAGER_VIEW) for name in POD_PHASES)
    else:
        out.extend(_pod_phases(job, ray, lifecycle, views, pod_read))
    if ray is not None:
        out.extend([_rayjob_status(ray), _release(ray, views, pod_read, wls, manager_view)])
    return out


# -- the pods, as Tau hydrates them: only the containers the kubelet reports ---------------------------------------

def _pod_view(pod: Record) -> Record:
    spec, st = pod.get("spec") or {}, status_of(pod)
    apps = _containers(st.get("containerStatuses"))
    inits = _containers(st.get("initContainerStatuses"))
    by_name = {c.get("name"): c.get("resourceClaimName") for c in st.get("resourceClaimStatuses") or []
               if isinstance(c, dict) and c.get("name") and c.get("resourceClaimName")}
    claims: list[str] = []
    for claim in spec.get("resourceClaims") or []:
        if isinstance(claim, dict):
            name = _first(by_name.get(claim.get("name")), claim.get("resourceClaimName"),
                          claim.get("resourceClaimTemplateName"), claim.get("name"))
            if name and name not in claims:
                claims.append(name)
    return {"name": str(meta(pod).get("name") or ""), "uid": str(meta(pod).get("uid") or ""),
            "phase": _first(st.get("phase")), "node": _first(spec.get("nodeName")),
            "conditions": conditions(pod), "apps": apps, "inits": inits, "claims": claims,
            "reason": _first(*(c["reason"] for c in apps + inits))}  # Tau's ContainerReason


def _containers(statuses: object) -> list[Record]:
    out = []
    for cs in statuses if isinstance(statuses, list) else []:
        if not isinstance(cs, dict):
            continue
        state = cs.get("state") or {}
        view = {"name": _first(cs.get("name")), "image": _first(cs.get("image")), "ready": cs.get("ready") is True,
                "state": "", "reason": "", "message": "", "exitCode": None}
        for key in ("waiting", "running", "terminated"):  # in Tau's order
            detail = state.get(key) if isinstance(state, dict) else None
            if isinstance(detail, dict):
                view.update(state=key, reason=_first(detail.get("reason")), message=_first(detail.get("message")))
                if key == "terminated":
                    view["exitCode"] = count(detail.get("exitCode"))
                break
        out.append(view)
    return sorted(out, key=lambda c: c["name"])


def _waiting_on(c: Record, reasons: frozenset[str]) -> bool:
    return c["state"] == "waiting" and c["reason"] in reasons


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


# -- the pods' lifecycle -------------------------------------------------------------------------------------------

def _pod_phases(job: Record | None, ray: Record | None, lifecycle: str, views: list[Record],
                pod_read: Read[list[Record]]) -> list[Record]:
    out = [_scheduling(views), _dra(views), _image(views), _init(views), _start(views), _ready(views)]
    if not views and pod_read.state == UNAVAILABLE:
        unread = f"pod status unavailable: {pod_read.reason or 'unknown'}"
        return [_phase(out[0]["name"], "warning", unread, "request list access to pods in the run namespace")] + [
            _phase(p["name"], "skipped", unread) for p in out[1:]]
    gone = None
    if ray is not None and v1alpha1.ray_failed(ray) and not views:
        gone = RAY_FAILED_TORN_DOWN if pod_read.state == OBSERVED else RAY_FAILED_UNREAD
    elif job is not None and lifecycle in ("succeeded", "failed") and not views:
        gone = JOB_PODS_GONE  # tau's: Tau's rule for a failed RayJob's teardown, for a Job whose pods are deleted
    if gone:
        return [p if p["status"] == "warning" else _phase(p["name"], "skipped", gone) for p in out]
    if ray is not None and v1alpha1.ray_succeeded(ray):
        return [p if p["status"] in ("done", "skipped") else _phase(p["name"], "done", RAY_TEARDOWN) for p in out]
    return out


def _scheduling(views: list[Record]) -> Record:
    name = "Pod scheduling"
    if not views:
        return _phase(name, "pending", "no pods observed yet")
    assigned = sum(1 for p in views if p["node"])
    detail = f"{assigned}/{len(views)} assigned to nodes"
    if assigned == len(views):
        return _phase(name, "done", detail)
    blocked = next((_first(c.get("reason"), c.get("message")) for p in views for c in p["conditions"]
                    if c.get("type") == "PodScheduled" and c.get("status") == "False"), "")
    if blocked:
        return _phase(name, "warning", f"{detail} reason={blocked}",
                      "check node selectors, queue admission, and DRA ResourceClaim allocation")
    return _phase(name, "active", detail)


def _dra(views: list[Record]) -> Record:
    claims = sorted({c for p in views for c in p["claims"]})
    if not claims:
        return _phase("DRA allocation", "skipped", "no ResourceClaims requested")
    return _phase("DRA allocation", "active", f"{len(claims)} ResourceClaim(s) referenced; allocation not observed",
                  "if this stays pending, check ResourceClaim objects and ResourceSlice availability")


def _image(views: list[Record]) -> Record:
    name = "Image pull"
    if not views:
        return _phase(name, "pending", "waiting for pods")
    failing = next((f"{c['name']}={c['reason']}" for p in views for c in p["apps"] + p["inits"]
                    if _waiting_on(c, IMAGE_FAILURES)), "")
    if failing:
        return _phase(name, "warning", failing, "verify the image name, tag, registry credentials, and node egress")
    if all(_past_image_pull(p) for p in views):
        images = sorted({c["image"] for p in views for c in p["apps"] + p["inits"] if c["image"]})
        if not images:
            return _phase(name, "done", "images available")
        shown = ", ".join(images[:2]) + (f", +{len(images) - 2} more" if len(images) > 2 else "")
        return _phase(name, "done", f"available: {shown}")
    return _phase(name, "active", "waiting for kubelet image pull events")


def _past_image_pull(view: Record) -> bool:
    if view["phase"] == "Pending" and not view["reason"] and not view["apps"]:
        return False
    return not any(_waiting_on(c, IMAGE_FAILURES | {"ContainerCreating", "PodInitializing"})
                   for c in view["inits"] + view["apps"])


def _init(views: list[Record]) -> Record:
    name = "Init containers"
    inits = [c for p in views for c in p["inits"]]
    if not inits:
        return _phase(name, "skipped", "no init containers")
    done = [c for c in inits if c["state"] == "terminated" and c["exitCode"] == 0]
    detail = f"{len(done)}/{len(inits)} complete"
    if len(done) == len(inits):
        return _phase(name, "done", detail)
    blocked = next((_first(c["reason"], c["message"]) for c in inits if not any(c is d for d in done)), "")
    hint = "storage or blobfuse mount setup is still blocking init" if "mount" in blocked.lower() else None
    return _phase(name, "active", detail + (f" reason={blocked}" if blocked else ""), hint)


def _start(views: list[Record]) -> Record:
    name = "Container start"
    if not views:
        return _phase(name, "pending", "waiting for pods")
    apps = [c for p in views for c in p["apps"]]
    if not apps:
        return _phase(name, "pending", "container statuses not available")
    started = [c for c in apps if c["state"] == "running" or c["state"] == "terminated" and c["exitCode"] == 0]
    failed = any(c["state"] == "terminated" and c["exitCode"] != 0 or _waiting_on(c, CONTAINER_FAILURES)
                 for c in apps)
    detail = f"{len(started)}/{len(apps)} started"
    if len(started) == len(apps):
        return _phase(name, "done", detail)
    blocked = next((_first(c["reason"], c["message"]) for c in apps if c["state"] == "waiting"), "")
    hint = None
    if blocked:
        detail += f" reason={blocked}"
        if blocked.lower() in ("containercreating", "podinitializing"):
            hint = "container startup is still waiting on image, volume, or runtime setup"
    return _phase(name, "warning" if failed else "active", detail, hint)


def _ready(views: list[Record]) -> Record:
    name = "Ready"
    if not views:
        return _phase(name, "pending", "waiting for pods")
    ready = sum(1 for p in views if _ready_or_succeeded(p))
    detail = f"{ready}/{len(views)} pods ready"
    if ready == len(views):
        return _phase(name, "done", detail)
    failed = next((_first(p["reason"], p["phase"]) for p in views if _pod_failed(p)), "")
    if failed:
        return _phase(name, "warning", f"{detail} reason={failed}")
    return _phase(name, "active", detail)


def _ready_or_succeeded(view: Record) -> bool:
    if view["phase"] == "Succeeded":
        return True
    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in view["conditions"]):
        return True
    return bool(view["apps"]) and all(c["ready"] for c in view["apps"])


def _pod_failed(view: Record) -> bool:
    if view["phase"] == "Failed":
        return True
    return any(c["state"] == "terminated" and c["exitCode"] != 0
               or _waiting_on(c, CONTAINER_FAILURES | IMAGE_FAILURES) for c in view["inits"] + view["apps"])
