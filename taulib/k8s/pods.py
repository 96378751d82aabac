"""Pods and their containers: what each pod and container is doing, and which of them is an issue.

`pod_section(pod, owner, role)` reads one Pod object (as `taulib.k8s.api` returns it) and returns the `pods[]` entry
of the status snapshot: its phase and observed state (`pod_state`, in the words of every tau observation,
tau-status(7)), node, readiness, restarts, conditions, and every container, init containers first, including the
declared ones that have not started yet. `pod_issues` reads such an entry and returns its issues, in order: every
container that `container_issue` finds wrong (`WAITING_ISSUES`, a non-zero exit), else the pod's own failure.
`issue_text` is how one container's issue reads. `IMAGE_ISSUES` are the waiting reasons of an image that cannot be
pulled.

Pure functions of the objects read: no I/O, no clock. Whose pod it is, and whether its issue counts, is decided by
`status`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib.k8s.objects import count, meta, reported_conditions, status_of

if TYPE_CHECKING:
    from taulib.jsonio import Record

WAITING_ISSUES = frozenset({"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError",
                            "RunContainerError", "Error", "ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
IMAGE_ISSUES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})


def _container(spec_kind: str, cs: Record) -> Record:
    state = cs.get("state") or {}
    last = (cs.get("lastState") or {}).get("terminated") or {}
    name = next((k for k in ("terminated", "waiting", "running") if k in state), "waiting")
    detail = state.get(name) or {}
    exit_code = detail.get("exitCode") if name == "terminated" else None
    return {"kind": spec_kind, "name": cs.get("name"), "state": name, "ready": bool(cs.get("ready")),
            "restartCount": count(cs.get("restartCount")), "reason": detail.get("reason") or None,
            "exitCode": exit_code if isinstance(exit_code, int) else None,
            "lastReason": last.get("reason") or None,
            "lastExitCode": last.get("exitCode") if isinstance(last.get("exitCode"), int) else None}


def container_issue(c: Record) -> bool:
    if c["state"] == "terminated":
        return c["exitCode"] not in (0, None) or (c["exitCode"] is None and c["reason"] not in (None, "Completed"))
    return c["state"] == "waiting" and c["reason"] in WAITING_ISSUES


def issue_text(pod: str, c: Record) -> str:
    """One container's issue as Tau's v1alpha1 `reason` reads: "POD/CTR STATE[ reason=R][ exit=N][ restarts=N]",
    the reason being the current one or else the last, the exit code the current one only."""
    text = f"{pod}/{c['name']} {c['state'] or '-'}"
    reason = c["reason"] or c["lastReason"]
    if reason:
        text += f" reason={reason}"
    if c["exitCode"] is not None:
        text += f" exit={c['exitCode']}"
    if c["restartCount"] > 0:
        text += f" restarts={c['restartCount']}"
    return text


def pod_state(phase: str, reason: str | None, containers: list[Record], conditions: list[Record]) -> str:
    """A pod in the observed-state words of every tau observation (tau-status(7))."""
    if phase == "Unknown":
        return "node_failed"
    if phase == "Pending":
        return "pending"
    if phase == "Running":
        return "running"
    if phase == "Succeeded":
        return "completed"
    if any(c["reason"] == "OOMKilled" for c in containers if c["state"] == "terminated"):
        return "out_of_memory"
    if reason == "DeadlineExceeded":
        return "timed_out"
    if reason in ("Evicted", "Preempted", "Preempting") or any(
            c["type"] == "DisruptionTarget" and c["status"] == "True" for c in conditions):
        return "preempted"
    return "failed"


def pod_section(pod: Record, owner: str | None, role: str | None) -> Record:
    """The pod as reported, attributed to `owner` ("Job", "RayJob" or None) in `role`; its health is still "ok"."""
    spec, st = pod.get("spec") or {}, status_of(pod)
    statuses = [("init", cs) for cs in st.get("initContainerStatuses") or [] if isinstance(cs, dict)] + \
        [("app", cs) for cs in st.get("containerStatuses") or [] if isinstance(cs, dict)]
    containers = [_container(kind, cs) for kind, cs in statuses]
    reported = {(c["kind"], c["name"]) for c in containers}
    for kind, key in (("init", "initContainers"), ("app", "containers")):  # declared but not started yet
        for ctr in spec.get(key) or []:
            if isinstance(ctr, dict) and (kind, ctr.get("name")) not in reported:
                containers.append({"kind": kind, "name": ctr.get("name"), "state": "waiting", "ready": False,
                                   "restartCount": 0, "reason": None, "exitCode": None, "lastReason": None,
                                   "lastExitCode": None})
    containers.sort(key=lambda c: (c["kind"] != "init", str(c["name"])))
    apps = [c for c in containers if c["kind"] == "app"]
    phase = st.get("phase") or "Pending"
    conditions = reported_conditions(pod)
    return {"name": meta(pod).get("name"), "uid": meta(pod).get("uid"), "owner": owner, "role": role,
            "phase": phase, "state": pod_state(phase, st.get("reason"), containers, conditions),
            "health": "ok", "node": spec.get("nodeName") or None,
            "ready": f"{sum(c['ready'] for c in apps)}/{len(apps)}",
            "restarts": sum(c["restartCount"] for c in containers),
            "reason": st.get("reason") or None, "message": st.get("message") or None,
            "conditions": conditions, "containers": containers}


def pod_issues(pod: Record) -> list[str]:
    """Every issue of a pod entry, in order: its containers' issues, else its own failure."""
    issues = [issue_text(pod["name"], c) for c in pod["containers"] if container_issue(c)]
    if not issues and pod["phase"] == "Failed":
        issues.append(f"{pod['name']} failed" + (f" reason={pod['reason']}" if pod["reason"] else "")
                      + (f": {pod['message']}" if pod["message"] else ""))
    return issues
