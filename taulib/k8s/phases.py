"""Where along its way a workload is: the `phases` of the status snapshot, from submission to the release of compute.

`phases(kind, primary, state, job, ray, wls, wl_read, pods, pod_read)` reads the workload that decides the state
(`primary`, "Job" or "RayJob", with its object), the top-level state already derived, and the `workloads[]` and
`pods[]` entries owned by that workload with the reads they came from. It returns the phases in order, each
`{name, status, detail, hint}` with status done, active, pending, warning or skipped: Submitted, Kueue admission,
MultiKueue placement (only when Kueue placed or nominated a worker cluster), RayCluster (a RayJob), Pod scheduling,
Image pull, Init containers, Container start, Ready, RayJob status (a RayJob), and Compute release (once the
workload ended). A read that failed is a warning "cannot tell", never "not admitted" or "no pods".

Pure functions of the entries read: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib.k8s.api import NOT_FOUND, UNAVAILABLE, Read
from taulib.k8s.jobs import TERMINAL
from taulib.k8s.kueue import QUEUE_LABEL
from taulib.k8s.objects import explain, meta, status_of
from taulib.k8s.pods import IMAGE_ISSUES, WAITING_ISSUES, container_issue, issue_text

if TYPE_CHECKING:
    from taulib.jsonio import Record


def _phase(name: str, status: str, detail: str, hint: str | None = None) -> Record:
    return {"name": name, "status": status, "detail": detail, "hint": hint}


def phases(kind: str, primary: str | None, state: str, job: Record | None, ray: Record | None, wls: list[Record],
           wl_read: Read[list[Record]], pods: list[Record], pod_read: Read[list[Record]]) -> list[Record]:
    """The phases of the primary workload (none when there is no workload)."""
    if primary is None:
        return []
    obj = job if primary == "Job" else ray
    if obj is None:  # the submitter of a RayJob that cannot be read
        return [_phase("Submitted", "warning", "the RayJob cannot be read")]
    out = [_phase("Submitted", "done", f"{primary} created {meta(obj).get('creationTimestamp') or ''}".strip()),
           _kueue_phase(obj, wls, wl_read, state)]
    if any(w["workerCluster"] or w["nominatedClusters"] for w in wls):
        out.append(_placement_phase(wls))
    if primary == "RayJob":
        out.append(_raycluster_phase(obj))
    out.extend(_pod_phases(pods, pod_read, state))
    if primary == "RayJob":
        out.append(_rayjob_status_phase(obj, state))
    if state in ("succeeded", "failed"):
        out.append(_release_phase(pods, pod_read, wls))
    return out


def _kueue_phase(obj: Record, wls: list[Record], wl_read: Read[list[Record]], state: str) -> Record:
    name = "Kueue admission"
    queue = (meta(obj).get("labels") or {}).get(QUEUE_LABEL)
    if wl_read.state == UNAVAILABLE:  # never "not admitted" from a read we could not make
        return _phase(name, "warning", f"cannot tell: {wl_read.reason}")
    if not wls:
        if wl_read.state == NOT_FOUND and queue:
            return _phase(name, "warning", f"it names queue {queue!r}, but Kueue is not installed",
                          "install Kueue, or remove the kueue.x-k8s.io/queue-name label")
        if wl_read.state == NOT_FOUND:
            return _phase(name, "skipped", "not queued by Kueue (Kueue is not installed)")
        if not queue:
            return _phase(name, "skipped", f"not queued by Kueue (no {QUEUE_LABEL} label)")
        if state in TERMINAL:
            return _phase(name, "skipped", f"queue {queue!r}: no Kueue Workload is left")
        return _phase(name, "active", f"queue {queue!r}: Kueue has not created a Workload yet",
                      "check that Kueue runs and that the LocalQueue exists in this namespace")
    wl = wls[-1]
    where = f"ClusterQueue {wl['clusterQueue']}" if wl["clusterQueue"] else f"queue {wl['queue']}"
    explained = ": ".join(p for p in (wl["reason"], wl["message"]) if p)
    if wl["evicted"]:
        evicted = ": ".join(p for p in (wl["evicted"]["reason"], wl["evicted"]["message"]) if p)
        return _phase(name, "warning", f"evicted from {where}" + (f": {evicted}" if evicted else ""))
    if wl["phase"] == "Pending":
        return _phase(name, "active", f"pending in queue {wl['queue']}" + (f": {explained}" if explained else ""),
                      "the ClusterQueue lacks free quota or the LocalQueue does not exist")
    if wl["phase"] == "QuotaReserved":
        waiting = [c["name"] for c in wl["admissionChecks"] if c["state"] != "Ready"]
        return _phase(name, "active", f"quota reserved in {where}; waiting for admission checks: "
                      f"{', '.join(waiting) or 'none'}")
    if any(c["state"] == "Rejected" for c in wl["admissionChecks"]):
        return _phase(name, "warning", "an admission check rejected it")
    detail = f"admitted to {where}" if wl["phase"] == "Admitted" else f"finished in {where}" + (
        f": {explained}" if explained else "")
    return _phase(name, "done", detail)


def _placement_phase(wls: list[Record]) -> Record:
    placed = next((w["workerCluster"] for w in wls if w["workerCluster"]), None)
    nominated = sorted({c for w in wls for c in w["nominatedClusters"]})
    return _phase("MultiKueue placement", "done" if placed else "active",
                  f"running on worker cluster {placed}" if placed else f"nominated: {', '.join(nominated)}")


def _raycluster_phase(ray: Record) -> Record:
    deployment = status_of(ray).get("jobDeploymentStatus") or ""
    cluster = status_of(ray).get("rayClusterName")
    if deployment in ("", "New", "Suspended", "Suspending", "Waiting"):
        return _phase("RayCluster", "pending", "not created yet")
    if deployment in ("Initializing", "Retrying"):
        return _phase("RayCluster", "active", f"{cluster or 'the RayCluster'} is starting")
    return _phase("RayCluster", "done", f"{cluster or 'the RayCluster'} was created")


def _rayjob_status_phase(ray: Record, state: str) -> Record:
    st = status_of(ray)
    status = {"succeeded": "done", "failed": "warning"}.get(state, "active")
    return _phase("RayJob status", status, f"jobDeploymentStatus {st.get('jobDeploymentStatus') or 'unset'}, "
                  f"jobStatus {st.get('jobStatus') or 'unset'}"
                  + (f", reason {st['reason']}" if st.get("reason") else ""))


def _pod_phases(pods: list[Record], pod_read: Read[list[Record]], state: str) -> list[Record]:
    if pod_read.state == UNAVAILABLE:
        return [_phase("Pod scheduling", "warning", f"cannot tell: {pod_read.reason}")]
    if not pods:
        status = "skipped" if state in TERMINAL else "pending"
        return [_phase("Pod scheduling", status, "no pods" + (" left" if state in TERMINAL else " yet"))]
    unscheduled = [p for p in pods if any(c["type"] == "PodScheduled" and c["status"] == "False"
                                          for c in p["conditions"])]
    containers = [(p, c) for p in pods for c in p["containers"]]
    apps = [(p, c) for p, c in containers if c["kind"] == "app"]
    return [_scheduling_phase(pods, unscheduled), _image_phase(containers, bool(unscheduled)),
            _init_phase(containers), _start_phase(apps), _ready_phase(pods, apps, state)]


def _scheduling_phase(pods: list[Record], unscheduled: list[Record]) -> Record:
    name = "Pod scheduling"
    if unscheduled:
        cond = next(c for c in unscheduled[0]["conditions"] if c["type"] == "PodScheduled")
        return _phase(name, "warning" if cond["reason"] == "Unschedulable" else "active",
                      f"{len(unscheduled)} pod(s) not scheduled: {explain(cond, 'waiting')}",
                      "check node selectors, tolerations and free capacity")
    nodes = sorted({p["node"] for p in pods if p["node"]})
    return _phase(name, "done" if nodes else "active",
                  f"on node{'s' if len(nodes) != 1 else ''} {', '.join(nodes)}" if nodes else "waiting")


def _image_phase(containers: list[tuple[Record, Record]], waiting_for_nodes: bool) -> Record:
    name = "Image pull"
    pulling = [f"{p['name']}/{c['name']} {c['reason']}" for p, c in containers
               if c["state"] == "waiting" and c["reason"] in IMAGE_ISSUES]
    started = [(p, c) for p, c in containers if c["state"] != "waiting" or c["restartCount"] or c["lastReason"]]
    if pulling:
        return _phase(name, "warning", "; ".join(pulling), "check the image name and the pull secret")
    if started:
        return _phase(name, "done", "images pulled")
    return _phase(name, "active" if not waiting_for_nodes else "pending", "waiting")


def _init_phase(containers: list[tuple[Record, Record]]) -> Record:
    name = "Init containers"
    inits = [(p, c) for p, c in containers if c["kind"] == "init"]
    if not inits:
        return _phase(name, "skipped", "no init containers")
    bad = [issue_text(p["name"], c) for p, c in inits if container_issue(c)]
    done = all(c["state"] == "terminated" and c["exitCode"] == 0 or c["state"] == "running" for _, c in inits)
    return _phase(name, "warning" if bad else "done" if done else "active",
                  "; ".join(bad) if bad else "done" if done else "running")


def _start_phase(apps: list[tuple[Record, Record]]) -> Record:
    name = "Container start"
    failing = [issue_text(p["name"], c) for p, c in apps if c["state"] == "waiting"
               and c["reason"] in WAITING_ISSUES - IMAGE_ISSUES - {"CrashLoopBackOff"}]
    begun = [c for _, c in apps if c["state"] != "waiting" or c["restartCount"]]
    if failing:
        return _phase(name, "warning", "; ".join(failing), "check the command, the config maps and secrets "
                      "it mounts, and its volumes")
    return _phase(name, "done" if apps and len(begun) == len(apps) else "active" if begun else "pending",
                  f"{len(begun)}/{len(apps)} containers started")


def _ready_phase(pods: list[Record], apps: list[tuple[Record, Record]], state: str) -> Record:
    name = "Ready"
    crashing = [issue_text(p["name"], c) for p, c in apps if c["state"] == "waiting"
                and c["reason"] == "CrashLoopBackOff"]
    live = [p for p in pods if p["phase"] == "Running"]
    ready = [p for p in live if p["ready"].split("/")[0] == p["ready"].split("/")[1]]
    if crashing:
        return _phase(name, "warning", "; ".join(crashing), "read its logs: kubectl logs --previous")
    if state in TERMINAL:
        return _phase(name, "done" if state == "succeeded" else "skipped", "finished")
    return _phase(name, "done" if live and len(ready) == len(live) else "active",
                  f"{len(ready)}/{len(live)} running pods ready")


def _release_phase(pods: list[Record], pod_read: Read[list[Record]], wls: list[Record]) -> Record:
    name = "Compute release"
    if pod_read.state == UNAVAILABLE:
        return _phase(name, "warning", f"cannot tell: {pod_read.reason}")
    holding = [p for p in pods if p["phase"] in ("Running", "Pending") and p["node"]]
    if holding:
        nodes = sorted({p["node"] for p in holding})
        return _phase(name, "warning", f"{len(holding)} pod(s) still hold {len(nodes)} node(s): {', '.join(nodes)}",
                      "resources are not reusable until they end")
    quota = any(w["phase"] in ("Admitted", "QuotaReserved") for w in wls)
    return _phase(name, "active" if quota else "done",
                  "pods ended; Kueue still holds the quota" if quota else "pods ended; resources released")
