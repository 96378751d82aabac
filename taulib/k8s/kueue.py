"""Kueue Workloads: where a queued workload stands in Kueue, and what Kueue did to it that a person must know.

`workload_section(wl, owner)` reads one Kueue Workload object (as `taulib.k8s.api` returns it) and returns the
`workloads[]` entry of the status snapshot: its phase (Finished, then Evicted, Admitted, QuotaReserved, else
Pending), the condition that explains it, its queues, requeues, MultiKueue placement and admission checks (sorted by
name). `workload_problems` reads such an entry and returns the issues it raises: an eviction, and every rejected
admission check, in order. `QUEUE_LABEL` is the label by which a Job or RayJob names its Kueue queue.

Pure functions of the objects read: no I/O, no clock.
"""

from __future__ import annotations

from taulib.k8s.objects import condition, conditions, count, meta, status_of

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def workload_section(wl: dict, owner: str | None) -> dict:
    """The Workload as reported, attributed to `owner` ("Job", "RayJob" or None)."""
    st = status_of(wl)
    finished, evicted = condition(wl, "Finished"), condition(wl, "Evicted")
    admitted, reserved = condition(wl, "Admitted"), condition(wl, "QuotaReserved")
    if finished:
        phase, cond = "Finished", finished
    elif evicted:  # Kueue can leave Admitted and QuotaReserved True beside Evicted: the eviction is the news
        phase, cond = "Evicted", evicted
    elif admitted:
        phase, cond = "Admitted", None
    elif reserved:
        phase, cond = "QuotaReserved", None
    else:
        phase = "Pending"
        cond = next((c for c in conditions(wl) if c.get("type") == "QuotaReserved" and c.get("status") == "False"),
                    None)
    checks = sorted(({"name": c.get("name"), "state": c.get("state") or "Pending", "message": c.get("message") or None}
                     for c in st.get("admissionChecks") or [] if isinstance(c, dict) and c.get("name")),
                    key=lambda c: c["name"])
    admission = st.get("admission") or {}
    return {"name": meta(wl).get("name"), "owner": owner, "queue": (wl.get("spec") or {}).get("queueName") or None,
            "clusterQueue": admission.get("clusterQueue") or None, "phase": phase,
            "admitted": admitted is not None, "reason": (cond or {}).get("reason") or None,
            "message": (cond or {}).get("message") or None,
            "requeueCount": count((st.get("requeueState") or {}).get("count")),
            "workerCluster": st.get("clusterName") or None,
            "nominatedClusters": sorted(n for n in st.get("nominatedClusterNames") or [] if isinstance(n, str)),
            "admissionChecks": checks}


def workload_problems(wl: dict) -> list[str]:
    """What Kueue did to a workload that a person must know (a finished workload's end is its owner's state)."""
    out = []
    if wl["phase"] == "Evicted":
        out.append(f"Kueue evicted workload {wl['name']}: " + ": ".join(
            p for p in (wl["reason"], wl["message"]) if p))
    for check in wl["admissionChecks"]:
        if check["state"] == "Rejected":
            out.append(f"admission check {check['name']} rejected workload {wl['name']}"
                       + (f": {check['message']}" if check["message"] else ""))
    return out
