"""Talking to the Kubernetes API server: configuration, and every read classified.

`Session(environ)` builds a client from the kubeconfig (`KUBECONFIG`, else `~/.kube/config`) or, without one, the
in-cluster service account, and learns the current context's namespace. `get` and `list_` read through the real
`kubernetes` client without deserialising into its models (they would drop the fields of custom resources), and
return a `Read`: `observed` with the object or the items; `notFound` (404 for that object, or the resource type is
not installed: the reason says which); or `unavailable` with a reason: access denied (401/403; a denied read says
nothing about existence, so it is never "not found"), an HTTP error (5xx, 429), a timeout, or no connection. Nothing
is cached: each call asks again, so a CRD installed meanwhile is seen. Reads only; contacts nothing but the API
server. This is the only module that imports `kubernetes`.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from taulib import env
from taulib.errors import BadInput, Unavailable

if TYPE_CHECKING:
    from taulib.jsonio import Record

OBSERVED, NOT_FOUND, UNAVAILABLE = "observed", "notFound", "unavailable"
NOT_INSTALLED = "resource type not installed"
DEFAULT_TIMEOUT = 10.0  # seconds per request; connecting gets at most half of it
IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
_V = TypeVar("_V", covariant=True)


class Read(NamedTuple, Generic[_V]):
    """A classified read; `Read[Record]` from `get` (the object), `Read[list[Record]]` from `list_` (its items)."""

    state: str  # observed | notFound | unavailable
    value: _V | None = None  # the object (get) or its items (list) when observed
    reason: str | None = None
    denied: bool = False  # 401/403
    unreachable: str | None = None  # why there was no answer at all: "connection refused", "timed out", ...

    @property
    def not_installed(self) -> bool:
        """The API server does not serve the type at all (a CRD not installed): not found, and why."""
        return self.state == NOT_FOUND and (self.reason or "").startswith(NOT_INSTALLED)


class Resource(NamedTuple):
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True  # False: cluster-scoped (read with namespace None)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def full_name(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


JOBS = Resource("batch", "v1", "jobs", "Job")
RAYJOBS = Resource("ray.io", "v1", "rayjobs", "RayJob")
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")  # Kueue 0.15 and later (only it from 0.20)
WORKLOADS_V1BETA1 = Resource("kueue.x-k8s.io", "v1beta1", "workloads", "Workload")  # Kueue before 0.20
PODS = Resource("", "v1", "pods", "Pod")
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
PVS = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
ADMISSION_CHECKS = Resource("kueue.x-k8s.io", "v1beta2", "admissionchecks", "AdmissionCheck", namespaced=False)
ADMISSION_CHECKS_V1BETA1 = Resource("kueue.x-k8s.io", "v1beta1", "admissionchecks", "AdmissionCheck",
                                    namespaced=False)


class Session:
    """An ApiClient, the namespace of the current context, and the per-request timeout."""

    def __init__(self, environ: Record | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        from kubernetes import client, config

        kubeconfig = env.get("KUBECONFIG", environ)
        configuration = client.Configuration()
        path = kubeconfig or os.path.expanduser("~/.kube/config")
        namespace = "default"
        if kubeconfig or os.path.exists(path):
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
                raise Unavailable("no Kubernetes configuration: set KUBECONFIG, create ~/.kube/config, or run "
                                  "inside a cluster") from None
            try:
                with open(IN_CLUSTER_NAMESPACE) as fh:
                    namespace = fh.read().strip() or namespace
            except OSError:
                pass
        configuration.retries = 1
        self.client = client.ApiClient(configuration)
        self.namespace = namespace
        self.timeout = (min(5.0, timeout / 2), timeout)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def get(self, resource: Resource, namespace: str | None, name: str) -> Read[Record]:
        """The object NAME, classified (namespace None for a cluster-scoped resource)."""
        what = f"{resource.kind} {name!r}" + (f" in namespace {namespace!r}" if resource.namespaced else "")
        path = self._path(resource, namespace) + "/" + _quote(name)
        read = self._call(path, {}, what)
        if read.state == NOT_FOUND and not _status_names(read.value, name):
            # a 404 that does not name the object: the group, version or resource is not served
            return self._not_installed(resource, what)
        return read._replace(value=None) if read.state == NOT_FOUND else read

    def list_(self, resource: Resource, namespace: str | None, selector: str = "") -> Read[list[Record]]:
        """The items matching a label selector (every item for ""), classified (a 404 can only mean the type is not
        installed). Namespace None for a cluster-scoped resource."""
        scope = f" in namespace {namespace!r}" if resource.namespaced else ""
        what = f"{resource.kind} list{scope}" + (f" ({selector})" if selector else "")
        query = {"labelSelector": selector} if selector else {}
        read = self._call(self._path(resource, namespace), query, what)
        if read.state == NOT_FOUND:
            return self._not_installed(resource, what)
        if read.state == OBSERVED:
            items = read.value.get("items") if isinstance(read.value, dict) else None
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                return Read(UNAVAILABLE, None, f"the API server answered a {resource.kind} list without items "
                            f"reading the {what}")
            return read._replace(value=items)
        return read

    def _path(self, resource: Resource, namespace: str | None) -> str:
        base = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
        if not resource.namespaced:
            return f"{base}/{resource.plural}"
        return f"{base}/namespaces/{_quote(namespace or '')}/{resource.plural}"

    def _not_installed(self, resource: Resource, what: str) -> Read[Any]:
        """notFound when discovery confirms the API server does not serve the type, else unavailable."""
        base = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
        discovery = self._call(base, {}, f"API discovery of {resource.api_version}")
        reason = f"{NOT_INSTALLED}: the API server does not serve {resource.full_name}/{resource.version}"
        if discovery.state == NOT_FOUND:
            return Read(NOT_FOUND, None, reason)
        if discovery.state == OBSERVED:
            served = {r.get("name") for r in (discovery.value or {}).get("resources") or [] if isinstance(r, dict)}
            if resource.plural not in served:
                return Read(NOT_FOUND, None, reason)
            return Read(NOT_FOUND, None, None)
        return discovery._replace(reason=f"{discovery.reason} (after a 404 reading the {what})")

    def _call(self, path: str, query: dict[str, str], what: str) -> Read[Any]:
        """The body of the answer: the object (observed), the 404's body as parsed (notFound), else nothing."""
        import urllib3

        try:
            request = self.client.param_serialize(
                "GET", path, query_params=list(query.items()), header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"])
            response = self.client.call_api(*request, _request_timeout=self.timeout)
            raw = response.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            cause = _cause(exc)
            return Read(UNAVAILABLE, None, f"the API server cannot be reached reading the {what} ({cause})",
                        unreachable=cause)
        status = response.status
        if status == 404:
            try:
                return Read(NOT_FOUND, json.loads(raw or b"null"))
            except ValueError:
                return Read(NOT_FOUND, None)
        if status in (401, 403):
            return Read(UNAVAILABLE, None, f"access denied by Kubernetes RBAC reading the {what} (HTTP {status}): "
                        f"{_message(raw) or response.reason}", denied=True)
        if not 200 <= status <= 299:
            return Read(UNAVAILABLE, None, f"the API server answered HTTP {status} reading the {what}: "
                        f"{_message(raw) or response.reason}")
        try:
            body = json.loads(raw)
        except ValueError:
            return Read(UNAVAILABLE, None, f"the API server answered something that is not JSON reading the {what}")
        if not isinstance(body, dict):
            return Read(UNAVAILABLE, None, f"the API server answered something that is not a JSON object reading "
                        f"the {what}")
        return Read(OBSERVED, body)


def _quote(segment: str) -> str:
    from urllib.parse import quote

    return quote(segment, safe="")


def _status_names(body: object, name: str) -> bool:
    """Whether a 404 body is the API server's Status for the object NAME (not for an unserved path)."""
    return isinstance(body, dict) and body.get("kind") == "Status" \
        and isinstance(body.get("details"), dict) and body["details"].get("name") == name


def _message(body: object) -> str | None:
    try:
        doc = json.loads(body) if isinstance(body, (bytes, str)) else None
    except ValueError:
        return None
    message = doc.get("message") if isinstance(doc, dict) else None
    return message[:300] if isinstance(message, str) and message else None


def _cause(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    inner = reason if isinstance(reason, BaseException) else exc
    text = str(inner)
    if "Connection refused" in text or isinstance(inner, ConnectionRefusedError):
        return "connection refused"
    if "timed out" in text.lower() or "timeout" in type(inner).__name__.lower():
        return "timed out"
    return type(inner).__name__
