"""The six pod phases of a workload's `phases`, by Tau's rules: Pod scheduling, DRA allocation, Image pull, Init
containers, Container start and Ready (Tau's `podLifecyclePhases`, core/status/phases.go in Azure/taugrid), read from
the pods as Tau hydrates them (`pod_view`: only the containers the kubelet reports, by name).

Pure functions of the objects read: no I/O, no clock. `taulib.k8s.phases` puts them in their place among the
workload's phases; the helpers `phase`, `first` and `dash` are shared with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib.k8s import v1alpha1
from taulib.k8s.api import OBSERVED, UNAVAILABLE, Read
from taulib.k8s.objects import conditions, count, meta, status_of

if TYPE_CHECKING:
    from taulib.jsonio import Record

POD_PHASES = ("Pod scheduling", "DRA allocation", "Image pull", "Init containers", "Container start", "Ready")
IMAGE_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
CONTAINER_FAILURES = frozenset({"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError",
                                "RunContainerError", "Error"})
RAY_FAILED_TORN_DOWN = "RayJob failed; post-run RayCluster teardown removed pod evidence"
RAY_FAILED_UNREAD = "pod state unavailable after terminal RayJob failure"
RAY_TEARDOWN = "RayJob completed successfully; post-run RayCluster teardown"
JOB_PODS_GONE = "the Job ended and none of its pods is left"  # tau's, not Tau's: see pod_phases


def phase(name: str, status: str, detail: str, hint: str | None = None) -> Record:
    return {"name": name, "status": status, "detail": detail, "hint": hint or None}


def first(*values: object) -> str:
    """Tau's firstNonEmpty: the first value that is not blank, else ""."""
    return next((v for v in values if isinstance(v, str) and v.strip()), "")


def dash(value: str) -> str:
    return value if value.strip() else "-"


# -- the pods, as Tau hydrates them: only the containers the kubelet reports ---------------------------------------

def pod_view(pod: Record) -> Record:
    spec, st = pod.get("spec") or {}, status_of(pod)
    apps = _containers(st.get("containerStatuses"))
    inits = _containers(st.get("initContainerStatuses"))
    by_name = {c.get("name"): c.get("resourceClaimName") for c in st.get("resourceClaimStatuses") or []
               if isinstance(c, dict) and c.get("name") and c.get("resourceClaimName")}
    claims: list[str] = []
    for claim in spec.get("resourceClaims") or []:
        if isinstance(claim, dict):
            name = first(by_name.get(claim.get("name")), claim.get("resourceClaimName"),
                          claim.get("resourceClaimTemplateName"), claim.get("name"))
            if name and name not in claims:
                claims.append(name)
    return {"name": str(meta(pod).get("name") or ""), "uid": str(meta(pod).get("uid") or ""),
            "phase": first(st.get("phase")), "node": first(spec.get("nodeName")),
            "conditions": conditions(pod), "apps": apps, "inits": inits, "claims": claims,
            "reason": first(*(c["reason"] for c in apps + inits))}  # Tau's ContainerReason


def _containers(statuses: object) -> list[Record]:
    out = []
    for cs in statuses if isinstance(statuses, list) else []:
        if not isinstance(cs, dict):
            continue
        state = cs.get("state") or {}
        view = {"name": first(cs.get("name")), "image": first(cs.get("image")), "ready": cs.get("ready") is True,
                "state": "", "reason": "", "message": "", "exitCode": None}
        for key in ("waiting", "running", "terminated"):  # in Tau's order
            detail = state.get(key) if isinstance(state, dict) else None
            if isinstance(detail, dict):
                view.update(state=key, reason=first(detail.get("reason")), message=first(detail.get("message")))
                if key == "terminated":
                    view["exitCode"] = count(detail.get("exitCode"))
                break
        out.append(view)
    return sorted(out, key=lambda c: c["name"])


def _waiting_on(c: Record, reasons: frozenset[str]) -> bool:
    return c["state"] == "waiting" and c["reason"] in reasons


# -- the pods' lifecycle -------------------------------------------------------------------------------------------

def pod_phases(job: Record | None, ray: Record | None, lifecycle: str, views: list[Record],
                pod_read: Read[list[Record]]) -> list[Record]:
    out = [_scheduling(views), _dra(views), _image(views), _init(views), _start(views), _ready(views)]
    if not views and pod_read.state == UNAVAILABLE:
        unread = f"pod status unavailable: {pod_read.reason or 'unknown'}"
        return [phase(out[0]["name"], "warning", unread, "request list access to pods in the run namespace")] + [
            phase(p["name"], "skipped", unread) for p in out[1:]]
    gone = None
    if ray is not None and v1alpha1.ray_failed(ray) and not views:
        gone = RAY_FAILED_TORN_DOWN if pod_read.state == OBSERVED else RAY_FAILED_UNREAD
    elif job is not None and lifecycle in ("succeeded", "failed") and not views:
        gone = JOB_PODS_GONE  # tau's: Tau's rule for a failed RayJob's teardown, for a Job whose pods are deleted
    if gone:
        return [p if p["status"] == "warning" else phase(p["name"], "skipped", gone) for p in out]
    if ray is not None and v1alpha1.ray_succeeded(ray):
        return [p if p["status"] in ("done", "skipped") else phase(p["name"], "done", RAY_TEARDOWN) for p in out]
    return out


def _scheduling(views: list[Record]) -> Record:
    name = "Pod scheduling"
    if not views:
        return phase(name, "pending", "no pods observed yet")
    assigned = sum(1 for p in views if p["node"])
    detail = f"{assigned}/{len(views)} assigned to nodes"
    if assigned == len(views):
        return phase(name, "done", detail)
    blocked = next((first(c.get("reason"), c.get("message")) for p in views for c in p["conditions"]
                    if c.get("type") == "PodScheduled" and c.get("status") == "False"), "")
    if blocked:
        return phase(name, "warning", f"{detail} reason={blocked}",
                      "check node selectors, queue admission, and DRA ResourceClaim allocation")
    return phase(name, "active", detail)


def _dra(views: list[Record]) -> Record:
    claims = sorted({c for p in views for c in p["claims"]})
    if not claims:
        return phase("DRA allocation", "skipped", "no ResourceClaims requested")
    return phase("DRA allocation", "active", f"{len(claims)} ResourceClaim(s) referenced; allocation not observed",
                  "if this stays pending, check ResourceClaim objects and ResourceSlice availability")


def _image(views: list[Record]) -> Record:
    name = "Image pull"
    if not views:
        return phase(name, "pending", "waiting for pods")
    failing = next((f"{c['name']}={c['reason']}" for p in views for c in p["apps"] + p["inits"]
                    if _waiting_on(c, IMAGE_FAILURES)), "")
    if failing:
        return phase(name, "warning", failing, "verify the image name, tag, registry credentials, and node egress")
    if all(_past_image_pull(p) for p in views):
        images = sorted({c["image"] for p in views for c in p["apps"] + p["inits"] if c["image"]})
        if not images:
            return phase(name, "done", "images available")
        shown = ", ".join(images[:2]) + (f", +{len(images) - 2} more" if len(images) > 2 else "")
        return phase(name, "done", f"available: {shown}")
    return phase(name, "active", "waiting for kubelet image pull events")


def _past_image_pull(view: Record) -> bool:
    if view["phase"] == "Pending" and not view["reason"] and not view["apps"]:
        return False
    return not any(_waiting_on(c, IMAGE_FAILURES | {"ContainerCreating", "PodInitializing"})
                   for c in view["inits"] + view["apps"])


def _init(views: list[Record]) -> Record:
    name = "Init containers"
    inits = [c for p in views for c in p["inits"]]
    if not inits:
        return phase(name, "skipped", "no init containers")
    done = [c for c in inits if c["state"] == "terminated" and c["exitCode"] == 0]
    detail = f"{len(done)}/{len(inits)} complete"
    if len(done) == len(inits):
        return phase(name, "done", detail)
    blocked = next((first(c["reason"], c["message"]) for c in inits if not any(c is d for d in done)), "")
    hint = "storage or blobfuse mount setup is still blocking init" if "mount" in blocked.lower() else None
    return phase(name, "active", detail + (f" reason={blocked}" if blocked else ""), hint)


def _start(views: list[Record]) -> Record:
    name = "Container start"
    if not views:
        return phase(name, "pending", "waiting for pods")
    apps = [c for p in views for c in p["apps"]]
    if not apps:
        return phase(name, "pending", "container statuses not available")
    started = [c for c in apps if c["state"] == "running" or c["state"] == "terminated" and c["exitCode"] == 0]
    failed = any(c["state"] == "terminated" and c["exitCode"] != 0 or _waiting_on(c, CONTAINER_FAILURES)
                 for c in apps)
    detail = f"{len(started)}/{len(apps)} started"
    if len(started) == len(apps):
        return phase(name, "done", detail)
    blocked = next((first(c["reason"], c["message"]) for c in apps if c["state"] == "waiting"), "")
    hint = None
    if blocked:
        detail += f" reason={blocked}"
        if blocked.lower() in ("containercreating", "podinitializing"):
            hint = "container startup is still waiting on image, volume, or runtime setup"
    return phase(name, "warning" if failed else "active", detail, hint)


def _ready(views: list[Record]) -> Record:
    name = "Ready"
    if not views:
        return phase(name, "pending", "waiting for pods")
    ready = sum(1 for p in views if _ready_or_succeeded(p))
    detail = f"{ready}/{len(views)} pods ready"
    if ready == len(views):
        return phase(name, "done", detail)
    failed = next((first(p["reason"], p["phase"]) for p in views if _pod_failed(p)), "")
    if failed:
        return phase(name, "warning", f"{detail} reason={failed}")
    return phase(name, "active", detail)


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
