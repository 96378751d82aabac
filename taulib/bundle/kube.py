"""Where a Kubernetes workload's bundle is: the annotations of a Job or a RayJob, read with the kubernetes client.

Tau's controllers stamp a workload with `tau.azure.com/artifact-bundle-id` (the generation),
`tau.azure.com/artifact-store` (JSON `{"schema_version": "tau.run.blob-volume.v1", "account_url": ..., "container":
...}`) and `tau.azure.com/result-path` (the output folder under `/data`; blob keys are paths relative to `/data`).
`resolve(NAME, NAMESPACE)` reads the Job and the RayJob of that name (kubeconfig from `KUBECONFIG` or
`~/.kube/config`, else the in-cluster service account; each read has a short timeout) and returns the bundle's URL
and generation. It reads, never writes, and contacts nothing but the API server.

Each read is classified: found; not found (404, which for the RayJob includes the ray.io CRD not being installed);
access denied (401/403: exit 77, never "not found", since a denied read says nothing about existence); unavailable
(no connection, a timeout, 5xx: exit 69). A Job owned by the RayJob of the same name is KubeRay's submitter: the
RayJob is the workload. An unrelated Job and RayJob of one name are ambiguous (exit 2: fetch by URL instead);
neither is 66. A
missing annotation is 1; a malformed store annotation 65; a result path that is `/data` itself or not strictly
below it 77. The annotations are data: the URL built from them passes `endpoint.parse` here and again in fetch.
The reads go through `taulib.k8s.api`, which alone imports `kubernetes`, and only when called.
"""

from __future__ import annotations

import json
import posixpath

from taulib.bundle import endpoint
from taulib.errors import BadInput, CheckFailed, NotFound, Refused, Unavailable, UsageError

GENERATION = "tau.azure.com/artifact-bundle-id"
STORE = "tau.azure.com/artifact-store"
RESULT_PATH = "tau.azure.com/result-path"
STORE_SCHEMA = "tau.run.blob-volume.v1"
DATA_ROOT = "/data"


def resolve(name: str, namespace: str | None = None, env: dict | None = None) -> dict:
    """{"url", "generation", "kind", "name", "namespace"} of the bundle the Job or RayJob NAME carries."""
    from taulib.k8s import api, status

    with api.Session(env, timeout=15.0) as session:
        namespace = namespace or session.namespace
        job = session.get(api.JOBS, namespace, name)
        rayjob = session.get(api.RAYJOBS, namespace, name) if not job.unreachable else job
    where = f"{name!r} in namespace {namespace!r}"
    for read in (job, rayjob):
        if read.denied:
            raise Refused(f"{read.reason}; a denied read says nothing about whether it exists: ask for get on "
                          "jobs.batch and rayjobs.ray.io in that namespace", name=name, namespace=namespace)
    for read in (job, rayjob):
        if read.state == api.UNAVAILABLE:
            raise Unavailable(f"{read.reason}; try again when it answers", name=name, namespace=namespace)
    if job.state == api.OBSERVED and rayjob.state == api.OBSERVED and status.owned_by(job.value, rayjob.value):
        job = api.Read(api.NOT_FOUND)  # KubeRay's submitter Job carries the RayJob's name: the RayJob is the workload
    if job.state == api.OBSERVED and rayjob.state == api.OBSERVED:
        raise UsageError(f"ambiguous: both a Job and a RayJob are named {where}; fetch by the Blob URL instead",
                         name=name, namespace=namespace)
    if job.state != api.OBSERVED and rayjob.state != api.OBSERVED:
        raise NotFound(f"no Job or RayJob named {where}", name=name, namespace=namespace)
    kind, obj = ("Job", job.value) if job.state == api.OBSERVED else ("RayJob", rayjob.value)
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return {**locate(annotations, f"{kind} {where}", env), "kind": kind, "name": name, "namespace": namespace}


def locate(annotations: dict, what: str, env: dict | None = None) -> dict:
    """{"url", "generation"} from a workload's annotations (pure: no request)."""
    missing = [key for key in (GENERATION, STORE, RESULT_PATH) if not annotations.get(key)]
    if missing:
        raise CheckFailed(f"the {what} carries no bundle annotation ({', '.join(missing)}): it was not submitted "
                          "with an artifact bundle, or the artifact-store controller has not stamped it yet")
    generation = annotations[GENERATION]
    store = _store(annotations[STORE], what)
    prefix = _prefix(annotations[RESULT_PATH], what)
    url = f"{store['account_url']}/{store['container']}/{prefix}"
    location = endpoint.parse(url, env)  # the annotation is data: refused here, before any Blob request
    if (location.account_url, location.container, location.prefix) != (store["account_url"], store["container"],
                                                                        prefix):
        raise Refused(f"the {STORE} annotation of the {what} names account_url {store['account_url']!r}, which is "
                      "not the origin of a storage account (it must have no path but the account of a trusted "
                      "endpoint)")
    return {"url": location.url(), "generation": generation}


def _store(text: str, what: str) -> dict:
    try:
        store = json.loads(text)
    except ValueError:
        store = None
    if not isinstance(store, dict) or set(store) != {"schema_version", "account_url", "container"} \
            or store["schema_version"] != STORE_SCHEMA \
            or not all(isinstance(store[k], str) and store[k] for k in ("account_url", "container")):
        raise BadInput(f"the {STORE} annotation of the {what} is not a JSON object with exactly schema_version "
                       f"{STORE_SCHEMA!r}, account_url and container", annotation=str(text)[:200])
    if any(c in store["container"] for c in "/\\"):
        raise BadInput(f"the {STORE} annotation of the {what} names container {store['container']!r}, which holds "
                       "a path separator")
    return store


def _prefix(path: object, what: str) -> str:
    """The blob prefix of a result path: its path relative to /data, which it must be strictly below."""
    if not isinstance(path, str) or not path.startswith("/") or posixpath.normpath(path) != path.rstrip("/") \
            or path.startswith("//"):
        raise Refused(f"the {RESULT_PATH} annotation of the {what} is {path!r}, which is not a normalized absolute "
                      f"path under {DATA_ROOT}")
    path = path.rstrip("/")
    if path in ("", DATA_ROOT):
        raise Refused(f"the {RESULT_PATH} annotation of the {what} is {DATA_ROOT!r}: an empty or root prefix; a "
                      "bundle never spans a whole container")
    if not path.startswith(DATA_ROOT + "/"):
        raise Refused(f"the {RESULT_PATH} annotation of the {what} is {path!r}, which is not under {DATA_ROOT}")
    return path[len(DATA_ROOT) + 1:]
