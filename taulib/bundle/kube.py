"""Where a Kubernetes workload's bundle is: the annotations of a Job or a RayJob, read with the kubernetes client.

Tau's controllers stamp a workload with `tau.azure.com/artifact-bundle-id` (the generation),
`tau.azure.com/artifact-store` (JSON `{"schema_version": "tau.run.blob-volume.v1", "account_url": ..., "container":
...}`) and `tau.azure.com/result-path` (the output folder under `/data`; blob keys are paths relative to `/data`).
`resolve(NAME, NAMESPACE)` reads the Job and the RayJob of that name (kubeconfig from `KUBECONFIG` or
`~/.kube/config`, else the in-cluster service account; each read has a short timeout) and returns the bundle's URL
and generation. It reads, never writes, and contacts nothing but the API server.

Each read is classified: found; not found (404, which for the RayJob includes the ray.io CRD not being installed);
access denied (401/403: exit 77, never "not found", since a denied read says nothing about existence); unavailable
(no connection, a timeout, 5xx: exit 69). Both found is ambiguous (exit 2: fetch by URL instead); neither is 66. A
missing annotation is 1; a malformed store annotation 65; a result path that is `/data` itself or not strictly
below it 77. The annotations are data: the URL built from them passes `endpoint.parse` here and again in fetch.
`kubernetes` is imported only inside these functions, so no other command pays for loading it.
"""

from __future__ import annotations

import json
import os
import posixpath

from taulib.bundle import endpoint
from taulib.errors import BadInput, CheckFailed, NotFound, Refused, Unavailable, UsageError

GENERATION = "tau.azure.com/artifact-bundle-id"
STORE = "tau.azure.com/artifact-store"
RESULT_PATH = "tau.azure.com/result-path"
STORE_SCHEMA = "tau.run.blob-volume.v1"
DATA_ROOT = "/data"
TIMEOUT = (5, 15)  # seconds to connect, seconds per read: a dead API server fails in seconds
IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

FOUND, NOT_FOUND, DENIED, UNAVAILABLE = "found", "not found", "access denied", "unavailable"


def _api_client(env: dict):
    """An ApiClient for the kubeconfig (KUBECONFIG or ~/.kube/config), else the in-cluster service account, and
    the namespace of the current context."""
    from kubernetes import client, config

    configuration = client.Configuration()
    path = env.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    namespace = "default"
    if env.get("KUBECONFIG") or os.path.exists(path):
        try:
            config.load_kube_config(config_file=path, client_configuration=configuration, persist_config=False)
            _, current = config.list_kube_config_contexts(config_file=path)
            namespace = (current or {}).get("context", {}).get("namespace") or namespace
        except config.ConfigException as exc:
            raise BadInput(f"the kubeconfig {path!r} cannot be used: {exc}") from None
        except OSError as exc:
            raise BadInput(f"the kubeconfig {path!r} cannot be read: {exc.strerror or exc}") from None
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            raise Unavailable("no Kubernetes configuration: set KUBECONFIG, create ~/.kube/config, or run inside "
                              "a cluster") from None
        try:
            with open(IN_CLUSTER_NAMESPACE) as fh:
                namespace = fh.read().strip() or namespace
        except OSError:
            pass
    configuration.retries = 1
    return client.ApiClient(configuration), namespace


def _read(what: str, call) -> tuple[str, object]:
    """(classification, the object or the reason) of one GET."""
    import urllib3
    from kubernetes.client.exceptions import ApiException

    try:
        response = call()
        return FOUND, json.loads(response.data)
    except ApiException as exc:
        if exc.status == 404:
            return NOT_FOUND, None
        if exc.status in (401, 403):
            return DENIED, f"access denied by Kubernetes RBAC reading the {what} (HTTP {exc.status})"
        return UNAVAILABLE, f"the API server answered HTTP {exc.status} {exc.reason or ''} reading the {what}".strip()
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        return UNAVAILABLE, f"the API server cannot be reached reading the {what} ({type(exc).__name__})"
    except ValueError:
        return UNAVAILABLE, f"the API server answered something that is not JSON reading the {what}"


def resolve(name: str, namespace: str | None = None, env: dict | None = None) -> dict:
    """{"url", "generation", "kind", "name", "namespace"} of the bundle the Job or RayJob NAME carries."""
    env = dict(os.environ) if env is None else env
    from kubernetes import client

    api, default_namespace = _api_client(env)
    namespace = namespace or default_namespace
    where = f"{name!r} in namespace {namespace!r}"
    with api:
        job = _read(f"Job {where}", lambda: client.BatchV1Api(api).read_namespaced_job(
            name, namespace, _request_timeout=TIMEOUT, _preload_content=False))
        rayjob = _read(f"RayJob {where}", lambda: client.CustomObjectsApi(api).get_namespaced_custom_object(
            "ray.io", "v1", namespace, "rayjobs", name, _request_timeout=TIMEOUT, _preload_content=False))
    for state, reason in (job, rayjob):
        if state == DENIED:
            raise Refused(f"{reason}; a denied read says nothing about whether it exists: ask for get on jobs.batch "
                          "and rayjobs.ray.io in that namespace", name=name, namespace=namespace)
    for state, reason in (job, rayjob):
        if state == UNAVAILABLE:
            raise Unavailable(f"{reason}; try again when it answers", name=name, namespace=namespace)
    if job[0] == FOUND and rayjob[0] == FOUND:
        raise UsageError(f"ambiguous: both a Job and a RayJob are named {where}; fetch by the Blob URL instead",
                         name=name, namespace=namespace)
    if job[0] != FOUND and rayjob[0] != FOUND:
        raise NotFound(f"no Job or RayJob named {where}", name=name, namespace=namespace)
    kind, obj = ("Job", job[1]) if job[0] == FOUND else ("RayJob", rayjob[1])
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
