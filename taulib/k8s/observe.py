"""Observing one Kubernetes workload: the reads behind a status snapshot (`tau-observe --kubernetes`).

`observe(NAME, NAMESPACE)` reads, in this order, the Job and the RayJob named NAME, the Kueue Workloads that belong to
them (label `kueue.x-k8s.io/job-uid` of either, and Tau's `tau.azure.com/job=NAME`; kueue.x-k8s.io/v1beta2, else
v1beta1 on a Kueue older than 0.15), and their pods (labels
`job-name=NAME`, `tau.azure.com/job=NAME`, and `ray.io/cluster=` the RayJob's cluster), merging lists by uid, and the
cluster-scoped AdmissionCheck object of every admission check those Workloads name (its `spec.controllerName`;
v1beta2, else v1beta1), then returns `taulib.k8s.status.snapshot` of those reads. Reads only.

Errors: an API server that cannot be reached at all (the first read gets no answer) is `Unavailable` (69) at once,
without trying the other reads; when every read is refused (401/403) it is `Refused` (77); when none gives an
answer (5xx, timeouts) `Unavailable`. Otherwise the snapshot is the answer, with each failed read classified in it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from taulib.errors import Refused, Unavailable
from taulib.k8s import api, status

if TYPE_CHECKING:
    from taulib.jsonio import Record


def observe(name: str, namespace: str | None = None, env: Record | None = None,
            timeout: float = api.DEFAULT_TIMEOUT) -> Record:
    with api.Session(env, timeout) as session:
        namespace = namespace or session.namespace
        reads = _read_all(session, name, namespace)
    where = f"{name!r} in namespace {namespace!r}"
    main: list[api.Read[object]] = [reads["job"], reads["rayjob"], reads["workloads"], reads["pods"]]
    if all(r.state == api.UNAVAILABLE for r in main):
        reasons = "; ".join(dict.fromkeys(r.reason for r in main if r.reason))
        if all(r.denied for r in main):
            raise Refused(f"every read of {where} was refused: {reasons}; ask for get and list on jobs.batch, "
                          "rayjobs.ray.io, workloads.kueue.x-k8s.io and pods in that namespace",
                          name=name, namespace=namespace)
        raise Unavailable(f"no read of {where} was answered: {reasons}; try again when the API server answers",
                          name=name, namespace=namespace)
    return status.snapshot(name, namespace, **reads)


class _Reads(TypedDict):
    """The reads of one workload, named as `status.snapshot` takes them."""

    job: api.Read[Record]
    rayjob: api.Read[Record]
    workloads: api.Read[list[Record]]
    pods: api.Read[list[Record]]
    admission_checks: dict[str, api.Read[Record]]


def _read_all(session: api.Session, name: str, namespace: str) -> _Reads:
    job = session.get(api.JOBS, namespace, name)
    if job.unreachable:
        server = session.client.configuration.host
        raise Unavailable(f"the Kubernetes API server {server} cannot be reached ({job.unreachable}); check "
                          "KUBECONFIG and the network, then try again", name=name, namespace=namespace)
    rayjob = session.get(api.RAYJOBS, namespace, name)
    uids = sorted(str(r.value["metadata"]["uid"]) for r in (job, rayjob)
                  if r.state == api.OBSERVED and r.value is not None and (r.value.get("metadata") or {}).get("uid"))
    selectors = [f"tau.azure.com/job={name}"]
    if uids:
        selectors.insert(0, f"kueue.x-k8s.io/job-uid in ({','.join(uids)})")
    workloads = _workloads(session, namespace, selectors)
    cluster = ((rayjob.value or {}).get("status") or {}).get("rayClusterName") if rayjob.state == api.OBSERVED else None
    selectors = [f"job-name={name}", f"tau.azure.com/job={name}"]
    if isinstance(cluster, str) and cluster:
        selectors.append(f"ray.io/cluster={cluster}")
    pods = _merged([session.list_(api.PODS, namespace, s) for s in selectors])
    return {"job": job, "rayjob": rayjob, "workloads": workloads, "pods": pods,
            "admission_checks": _admission_checks(session, workloads)}


def _admission_checks(session: api.Session, workloads: api.Read[list[Record]]) -> dict[str, api.Read[Record]]:
    """The read of the AdmissionCheck object of each check the Workloads name, by name (Tau's controller lookup)."""
    names = sorted({c["name"] for w in (workloads.value or []) if isinstance(w, dict)
                    for c in ((w.get("status") or {}).get("admissionChecks") or [])
                    if isinstance(c, dict) and isinstance(c.get("name"), str) and c["name"]}) \
        if workloads.state == api.OBSERVED else []
    out: dict[str, api.Read[Record]] = {}
    for name in names:
        for resource in (api.ADMISSION_CHECKS, api.ADMISSION_CHECKS_V1BETA1):
            out[name] = session.get(resource, None, name)
            if not out[name].not_installed:
                break
    return out


def _workloads(session: api.Session, namespace: str, selectors: list[str]) -> api.Read[list[Record]]:
    """Kueue Workloads in the newest API version the server has: v1beta2 (Kueue 0.15 and later; the only one from
    0.20), else v1beta1. The fields read are the same in both."""
    for resource in (api.WORKLOADS, api.WORKLOADS_V1BETA1):
        reads: list[api.Read[list[Record]]] = []
        for selector in selectors:
            reads.append(session.list_(resource, namespace, selector))
            if reads[-1].state == api.NOT_FOUND:  # a list is only ever not found when its type is not served
                break
        if reads[-1].state != api.NOT_FOUND:
            return _merged(reads)
    return api.Read(api.NOT_FOUND, None, f"{api.NOT_INSTALLED}: the API server serves neither "
                    f"{api.WORKLOADS.full_name}/{api.WORKLOADS.version} nor {api.WORKLOADS_V1BETA1.version}")


def _merged(reads: list[api.Read[list[Record]]]) -> api.Read[list[Record]]:
    """One read of several lists of one type: unavailable if any was, notFound if all were, else the union by uid."""
    for read in reads:
        if read.state == api.UNAVAILABLE:
            return read
    if all(read.state == api.NOT_FOUND for read in reads):
        return reads[0]
    items: dict[str, Record] = {}
    for read in reads:
        for item in read.value or []:
            meta = item.get("metadata") or {}
            items.setdefault(str(meta.get("uid") or meta.get("name")), item)
    return api.Read(api.OBSERVED, [items[k] for k in sorted(items)])
