"""Kueue Workloads: where a queued workload stands in Kueue, and what Kueue did to it that a person must know.

`workload_section(wl, owner, controllers)` reads one Kueue Workload object (as `taulib.k8s.api` returns it) and
returns the `workloads[]` entry of the status snapshot, by Tau's `hydrateWorkloads` (core/status/hydrate_workloads.go
in Azure/taugrid): its phase in Tau's v1alpha1 words (Finished, else Admitted, else QuotaReserved, else Pending:
where Tau's reading depends on the order of the conditions, the furthest one), `reason` and `message` as Tau sets
them (a workload still waiting, neither admitted nor finished: `pending_cause`; a finished one: its Finished
condition's reason and no message; an admitted one: neither), an eviction apart (`evicted`: Kueue can leave Admitted
and QuotaReserved True beside Evicted), its queues, requeues, MultiKueue placement (the nominated clusters
deduplicated and sorted, empty names dropped) and admission checks (sorted by name), each with the controller its
cluster-scoped AdmissionCheck object names (`controllers`: check name -> the read of that object; a check whose
object could not be read has `controllerLookupFailed`, as in Tau). `workload_problems` reads such an entry and
returns the issues it raises: an eviction, and every rejected admission check, in order. `QUEUE_LABEL` is the
label by which a Job or RayJob names its Kueue queue.

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
    reason = message = None
    if finished:
        phase, reason = "Finished", finished.get("reason") or None
    elif admitted:
        phase = "Admitted"
    else:
        phase = "QuotaReserved" if reserved else "Pending"
        reason, message = pending_cause(conditions(wl))
    checks = sorted((_check(c, (controllers or {}).get(c["name"]))
                     for c in st.get("admissionChecks") or [] if isinstance(c, dict) and c.get("name")),
                    key=lambda c: c["name"])
    admission = st.get("admission") or {}
    return {"name": meta(wl).get("name"), "owner": owner, "queue": (wl.get("spec") or {}).get("queueName") or None,
            "clusterQueue": admission.get("clusterQueue") or None, "phase": phase,
            "admitted": admitted is not None, "reason": reason, "message": message,
            "evicted": None if evicted is None or finished else {"reason": evicted.get("reason") or None,
                                                                 "message": evicted.get("message") or None},
            "requeueCount": count((st.get("requeueState") or {}).get("count")),
            "workerCluster": st.get("clusterName") or None,
            "nominatedClusters": sorted({n for n in st.get("nominatedClusterNames") or [] if isinstance(n, str) and n}),
            "admissionChecks": checks}


def pending_cause(conds: list[Record]) -> tuple[str | None, str | None]:
    """(reason, message) of why Kueue has not admitted a workload, by Tau's `PendingCause` (core/kueueapi): both from
    one condition that is not True, QuotaReserved's first (its reason and message say which flavors were tried and
    why), else Admitted's, else another's (Deactivated, Requeued; the first by type that says anything), skipping
    one that says nothing."""
    quota: tuple[str, str] | None = None
    admitted: tuple[str, str] | None = None
    other: tuple[str, str] | None = None
    for cond in sorted(conds, key=lambda c: str(c.get("type"))):  # by type: Tau's list order, made stable
        if cond.get("status") == "True":
            continue
        said = (_text(cond.get("reason")), _text(cond.get("message")))
        if cond.get("type") == "QuotaReserved":
            quota = said
        elif cond.get("type") == "Admitted":
            admitted = said
        elif other is None or not any(other):
            other = said
    for found in (quota, admitted, other):
        if found and any(found):
            return found[0] or None, found[1] or None
    return None, None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


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
