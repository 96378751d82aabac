"""Kueue Workloads: where a queued workload stands in Kueue, and what Kueue did to it that a person must know.

`workload_section(wl, owner, controllers)` reads one Kueue Workload object (as `taulib.k8s.api` returns it) and
returns the `workloads[]` entry of the status snapshot: its phase in Tau's v1alpha1 words (Finished, else Admitted,
else QuotaReserved, else Pending: where Tau's reading depends on the order of the conditions, the furthest one), the
condition that explains a workload still waiting or finished (`reason`, `message`), an eviction apart (`evicted`:
Kueue can leave Admitted and QuotaReserved True beside Evicted), its queues, requeues, MultiKueue placement and
admission checks (sorted by name), each with the controller its cluster-scoped AdmissionCheck object names
(`controllers`: check name -> the read of that object; a check whose object could not be read has
`controllerLookupFailed`, as in Tau). `workload_problems` reads such an entry and returns the issues it raises: an
eviction, and every rejected admission check, in order. `QUEUE_LABEL` is the label by which a Job or RayJob names
its Kueue queue.

Pure functions of the objects read: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib.k8s.api import OBSERVED, Read
from taulib.k8s.objects import condition, conditions, count, meta, status_of

if TYPE_CHECKING:
    from collections.abc import Mapping

    from taulib.jsonio import Record

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def workload_section(wl: Record, owner: str | None, controllers: Mapping[str, Read[Record]] | None = None
                     ) -> Record:
    """The Workload as reported, attributed to `owner` ("Job", "RayJob" or None)."""
    st = status_of(wl)
    finished, evicted = condition(wl, "Finished"), condition(wl, "Evicted")
    admitted, reserved = condition(wl, "Admitted"), condition(wl, "QuotaReserved")
    cond = None
    if finished:
        phase, cond = "Finished", finished
    elif admitted:
        phase = "Admitted"
    elif reserved:
        phase = "QuotaReserved"
    else:
        phase = "Pending"
        cond = next((c for c in conditions(wl) if c.get("type") == "QuotaReserved" and c.get("status") == "False"),
                    None)
    checks = sorted((_check(c, (controllers or {}).get(c["name"]))
                     for c in st.get("admissionChecks") or [] if isinstance(c, dict) and c.get("name")),
                    key=lambda c: c["name"])
    admission = st.get("admission") or {}
    return {"name": meta(wl).get("name"), "owner": owner, "queue": (wl.get("spec") or {}).get("queueName") or None,
            "clusterQueue": admission.get("clusterQueue") or None, "phase": phase,
            "admitted": admitted is not None, "reason": (cond or {}).get("reason") or None,
            "message": (cond or {}).get("message") or None,
            "evicted": None if evicted is None or finished else {"reason": evicted.get("reason") or None,
                                                                 "message": evicted.get("message") or None},
            "requeueCount": count((st.get("requeueState") or {}).get("count")),
            "workerCluster": st.get("clusterName") or None,
            "nominatedClusters": sorted(n for n in st.get("nominatedClusterNames") or [] if isinstance(n, str)),
            "admissionChecks": checks}


def _check(check: Record, read: Read[Record] | None) -> Record:
    """An admission check with its controller: from its AdmissionCheck object when it was read, null when it was
    not looked up, and `controllerLookupFailed` when the read failed (denied, missing, unanswered)."""
    controller, failed = None, False
    if read is not None:
        name = ((read.value or {}).get("spec") or {}).get("controllerName") if read.state == OBSERVED else None
        controller = name.strip() if isinstance(name, str) and name.strip() else None
        failed = controller is None
    return {"name": check.get("name"), "state": check.get("state") or "Pending", "controller": controller,
            "controllerLookupFailed": failed, "message": check.get("message") or None}


def workload_problems(wl: Record) -> list[str]:
    """What Kueue did to a workload that a person must know (a finished workload's end is its owner's state)."""
    out = []
    if wl["evicted"]:
        out.append(f"Kueue evicted workload {wl['name']}: " + ": ".join(
            p for p in (wl["evicted"]["reason"], wl["evicted"]["message"]) if p))
    for check in wl["admissionChecks"]:
        if check["state"] == "Rejected":
            out.append(f"admission check {check['name']} rejected workload {wl['name']}"
                       + (f": {check['message']}" if check["message"] else ""))
    return out
