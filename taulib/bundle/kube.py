"""Where a Kubernetes workload's bundle is: the annotations of a Job or a RayJob, or, for a legacy workload, its
result PersistentVolumeClaim and PersistentVolume, read with the kubernetes client.

Reads the Job and the RayJob named NAME (kubeconfig from `KUBECONFIG` or `~/.kube/config`, else the in-cluster
service account; each read has a short timeout) and, only for a legacy workload, one PersistentVolumeClaim and one
PersistentVolume. Writes nothing, and contacts nothing but the API server: `resolve` returns the bundle's URL and
generation, and what it was found from.

The workload. A Job owned by the RayJob of the same name is KubeRay's submitter: the RayJob is the workload. An
unrelated Job and RayJob of one name are ambiguous (exit 2: fetch by URL instead); neither is 66. Each read is
classified: found; not found (404, which for the RayJob includes the ray.io CRD not being installed); access denied
(401/403: exit 77, never "not found", since a denied read says nothing about existence; the message names the read
and the RBAC to ask for); unavailable (no connection, a timeout, 5xx: exit 69).

The store, discovered "annotation": Tau's controllers stamp `tau.azure.com/artifact-store` (JSON
`{"schema_version": "tau.run.blob-volume.v1", "account_url": ..., "container": ...}`; malformed is 65, and never
falls back to the volume) and `tau.azure.com/result-path` (the output folder under `/data`; blob keys are paths
relative to `/data`).

The store, discovered "pvc" (a workload without `tau.azure.com/artifact-store`, as Tau's CLI falls back to): the
claim is named by the `tau.azure.com/result-pvc` annotation and by nothing else. The pod template's volumes are
not read: a Job has several containers and a RayJob several pod templates, and a claim guessed from them need not
be the volume `result-path` is relative to. Then, read-only and in this order, Tau's artifact-store controller's
rules: `get persistentvolumeclaims` NAME in the workload's namespace, which must be `Bound` with a
`spec.volumeName` (else 75: not known until it is bound); `get persistentvolumes` of that name (cluster-scoped),
whose `claimRef` must be this claim (namespace, name, and uid when both carry one; else 77); its CSI driver must be
`blob.csi.azure.com` (any other driver, or no CSI source, is refused with 77, naming it). Its `volumeAttributes`
names are case-folded; two case variants of one name with different values are 65. The account is
`storageAccount`, else part 1 of a `volumeHandle` of the driver's `RESOURCEGROUP#ACCOUNT#CONTAINER[#...]` form
(a handle with fewer than three `#`-separated parts is an opaque id and gives nothing); the container is
`containerName`, else part 2, and holds no `/` or `\\` (65); the resource group (`resourceGroup`, else part 0) is
reported. The account URL is, from the `server` attribute when there is one: a bare host name (what the driver
documents, `ACCOUNT.blob.core.windows.net`) means `https://HOST`; a value with a scheme must be an origin (no
userinfo, query, fragment or path but `/`, else 77); an origin listed in `TAU_TRUSTED_BLOB_ENDPOINTS` is used
path-style, `ORIGIN/ACCOUNT` (Azurite), and any other must be https. Without `server`:
`https://ACCOUNT.blob.SUFFIX`, SUFFIX the `storageEndpointSuffix` attribute (a DNS name) or `core.windows.net`.

Either way the URL is the account URL, the container and the `result-path` prefix (strictly below `/data`: `/data`
itself or anything not below it is 77), and it passes `endpoint.parse` here, before any Blob request, and again in
fetch; it must name the very account, container and prefix it was built from (a `server` of another account is 77).
A missing annotation is 1 (no store annotation and no result-pvc, or no result-path); a missing claim or volume 66,
naming it.

The generation is `tau.azure.com/artifact-bundle-id` when the workload carries it: `--generation` must equal it
(else 73) and `--current` is a usage error. A workload that carries none (one that predates Tau's bundle
acknowledgement) names no generation, so none is chosen for it: `--generation G` names one, `--current` follows the
mutable pointer `.tau/current` explicitly, and neither is a usage error (2), as for a URL.

The reads go through `taulib.k8s.api`, which alone imports `kubernetes`, and only when called.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from taulib.bundle import endpoint
from taulib.errors import BadInput, Busy, CheckFailed, Conflict, NotFound, Refused, Unavailable, UsageError

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.k8s.api import Read, Session

GENERATION = "tau.azure.com/artifact-bundle-id"
STORE = "tau.azure.com/artifact-store"
RESULT_PATH = "tau.azure.com/result-path"
RESULT_PVC = "tau.azure.com/result-pvc"
STORE_SCHEMA = "tau.run.blob-volume.v1"
DATA_ROOT = "/data"
BLOB_DRIVER = "blob.csi.azure.com"
DEFAULT_ENDPOINT_SUFFIX = "core.windows.net"

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_DNS_NAME = re.compile(rf"^(?=.{{1,253}}\Z){_LABEL}(?:\.{_LABEL})*\Z")
_OBJECT_NAME = re.compile(r"^(?=.{1,253}\Z)[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?\Z")  # a DNS-1123 subdomain
# the fields of a PersistentVolume's spec that are not its volume source
_PV_SPEC_FIELDS = frozenset({"accessModes", "capacity", "claimRef", "mountOptions", "nodeAffinity",
                             "persistentVolumeReclaimPolicy", "storageClassName", "volumeAttributesClassName",
                             "volumeMode"})


def resolve(name: str, namespace: str | None = None, env: dict[str, str] | None = None, generation: str | None = None,
            current: bool = False) -> Record:
    """{"url", "generation" (None: follow .tau/current), "generation_from", "discovered", "pvc", "pv",
    "resource_group", "kind", "name", "namespace"} of the bundle of the Job or RayJob NAME."""
    from taulib.k8s import api

    with api.Session(env, timeout=15.0) as session:
        namespace = namespace or session.namespace
        kind, obj = _workload(session, name, namespace)
        what = f"{kind} {name!r} in namespace {namespace!r}"
        annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
        _require(annotations, what)
        chosen = choose_generation(annotations.get(GENERATION) or None, generation, current, kind, name, what)
        if annotations.get(STORE):
            found = {**locate(annotations, what, env), "discovered": "annotation", "pvc": None, "pv": None,
                     "resource_group": None}
        else:
            found = discover(session, annotations[RESULT_PVC], namespace, annotations[RESULT_PATH], what, env)
    return {**found, **chosen, "kind": kind, "name": name, "namespace": namespace}


def _workload(session: Session, name: str, namespace: str) -> tuple[str, Record | None]:
    from taulib.k8s import api
    from taulib.k8s.objects import owned_by

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
    if job.state == api.OBSERVED and rayjob.state == api.OBSERVED and owned_by(job.value, rayjob.value):
        job = api.Read(api.NOT_FOUND)  # KubeRay's submitter Job carries the RayJob's name: the RayJob is the workload
    if job.state == api.OBSERVED and rayjob.state == api.OBSERVED:
        raise UsageError(f"ambiguous: both a Job and a RayJob are named {where}; fetch by the Blob URL instead",
                         name=name, namespace=namespace)
    if job.state != api.OBSERVED and rayjob.state != api.OBSERVED:
        raise NotFound(f"no Job or RayJob named {where}", name=name, namespace=namespace)
    return ("Job", job.value) if job.state == api.OBSERVED else ("RayJob", rayjob.value)


def _require(annotations: Record, what: str) -> None:
    """A store annotation or a result PVC to discover one from, and a result path (pure)."""
    if not annotations.get(STORE) and not annotations.get(RESULT_PVC):
        missing = [key for key in (GENERATION, STORE) if not annotations.get(key)]
        raise CheckFailed(f"the {what} carries no bundle annotation ({', '.join(missing)}) and no {RESULT_PVC} "
                          "to discover its store from: it was not submitted with an artifact bundle, or the "
                          "artifact-store controller has not stamped it yet; fetch by the Blob URL instead")
    if not annotations.get(RESULT_PATH):
        raise CheckFailed(f"the {what} carries no {RESULT_PATH} annotation: where its bundle is under "
                          f"{DATA_ROOT} is unknown; fetch by the Blob URL instead")


def choose_generation(annotated: str | None, option: str | None, current: bool, kind: str, name: str,
                      what: str) -> Record:
    """{"generation" (None: follow .tau/current), "generation_from"} (pure)."""
    if annotated is not None:
        if current:
            raise UsageError(f"--current follows the mutable pointer .tau/current, but the {what} names its "
                             f"generation {annotated!r} ({GENERATION}): drop --current")
        if option is not None and option != annotated:
            raise Conflict(f"--generation {option!r} is not the generation {annotated!r} the {kind} {name!r} "
                           f"carries", generation=annotated)
        return {"generation": annotated, "generation_from": "annotation"}
    if option is not None and current:
        raise UsageError("--generation and --current exclude each other")
    if option is not None:
        return {"generation": option, "generation_from": "option"}
    if current:
        return {"generation": None, "generation_from": "current"}
    raise UsageError(f"the {what} names no generation (it carries no {GENERATION}: it predates Tau's bundle "
                     "acknowledgement): name one with --generation G, or follow the mutable pointer .tau/current "
                     "explicitly with --current")


def locate(annotations: Record, what: str, env: dict[str, str] | None = None) -> Record:
    """{"url"} from a workload's store and result-path annotations (pure: no request)."""
    store = _store(annotations[STORE], what)
    prefix = _prefix(annotations[RESULT_PATH], what)
    url = f"{store['account_url']}/{store['container']}/{prefix}"
    location = endpoint.parse(url, env)  # the annotation is data: refused here, before any Blob request
    if (location.account_url, location.container, location.prefix) != (store["account_url"], store["container"],
                                                                        prefix):
        raise Refused(f"the {STORE} annotation of the {what} names account_url {store['account_url']!r}, which is "
                      "not the origin of a storage account (it must have no path but the account of a trusted "
                      "endpoint)")
    return {"url": location.url()}


def discover(session: Session, claim: object, namespace: str, result_path: object, what: str,
             env: dict[str, str] | None = None) -> Record:
    """{"url", "discovered": "pvc", "pvc", "pv", "resource_group"}: read the claim, then its volume."""
    from taulib.k8s import api

    prefix = _prefix(result_path, what)
    if not isinstance(claim, str) or not _OBJECT_NAME.match(claim):
        raise BadInput(f"the {RESULT_PVC} annotation of the {what} is {str(claim)[:100]!r}, which is not a "
                       "PersistentVolumeClaim name")
    read = session.get(api.PVCS, namespace, claim)
    _check_read(read, f"ask for get on persistentvolumeclaims in namespace {namespace!r}", pvc=claim)
    if read.state != api.OBSERVED:
        raise NotFound(f"the PersistentVolumeClaim {claim!r} in namespace {namespace!r}, the {RESULT_PVC} of the "
                       f"{what}, does not exist", pvc=claim, namespace=namespace)
    assert read.value is not None, "an observed read carries its object"
    volume = bound_volume(read.value, claim, namespace)
    pv_read = session.get(api.PVS, None, volume)
    _check_read(pv_read, "ask for get on persistentvolumes (cluster-scoped: a ClusterRole and a "
                "ClusterRoleBinding), or for Tau's artifact-store controller to stamp the workload's "
                f"{STORE} annotation, which needs no PersistentVolume read", pv=volume)
    if pv_read.state != api.OBSERVED:
        raise NotFound(f"the PersistentVolume {volume!r} that PersistentVolumeClaim {claim!r} in namespace "
                       f"{namespace!r} is bound to does not exist", pv=volume, pvc=claim)
    assert pv_read.value is not None, "an observed read carries its object"
    found = volume_location(pv_read.value, read.value, claim, namespace, prefix, env)
    return {**found, "discovered": "pvc", "pvc": claim, "pv": volume}


def _check_read(read: Read[object], ask: str, **details: object) -> None:
    from taulib.k8s import api

    if read.denied:
        raise Refused(f"{read.reason}; a denied read says nothing about whether it exists: {ask}", **details)
    if read.state == api.UNAVAILABLE:
        raise Unavailable(f"{read.reason}; try again when it answers", **details)


def bound_volume(pvc: Record, claim: str, namespace: str) -> str:
    """The name of the PersistentVolume a claim is bound to (pure)."""
    volume = (pvc.get("spec") or {}).get("volumeName")
    phase = (pvc.get("status") or {}).get("phase")
    if not isinstance(volume, str) or not volume or phase != "Bound":
        pending = f", spec.volumeName {volume!r}" if volume else ""
        raise Busy(f"the PersistentVolumeClaim {claim!r} in namespace {namespace!r} is not bound to a "
                   f"PersistentVolume (status.phase {phase!r}{pending}): its store is not known until it is "
                   "bound", pvc=claim, phase=phase if isinstance(phase, str) else None)
    return volume


def volume_location(pv: Record, pvc: Record, claim: str, namespace: str, prefix: str,
                    env: dict[str, str] | None = None) -> Record:
    """{"url", "resource_group"} of a Blob CSI PersistentVolume bound to the claim, by Tau's artifact-store
    controller's rules (pure: no request)."""
    name = (pv.get("metadata") or {}).get("name")
    spec = pv.get("spec") or {}
    claim_ref = spec.get("claimRef")
    ref = claim_ref if isinstance(claim_ref, dict) else {}
    uid = (pvc.get("metadata") or {}).get("uid")
    if (ref.get("namespace"), ref.get("name")) != (namespace, claim) or (ref.get("uid") and uid
                                                                          and ref["uid"] != uid):
        bound = f"claim {ref.get('namespace')}/{ref.get('name')}" if ref else "no claim"
        raise Refused(f"the PersistentVolume {name!r} that PersistentVolumeClaim {claim!r} in namespace "
                      f"{namespace!r} names is bound to {bound}, not to that claim: refusing a volume that is not "
                      "the claim's", pv=name, pvc=claim)
    csi = spec.get("csi")
    if not isinstance(csi, dict):
        sources = sorted(key for key in spec if key not in _PV_SPEC_FIELDS)
        raise Refused(f"the PersistentVolume {name!r} of PersistentVolumeClaim {claim!r} is not a CSI volume (its "
                      f"source: {', '.join(sources) or 'none'}): only the Azure Blob CSI driver {BLOB_DRIVER!r} is "
                      "supported", pv=name, driver=None)
    driver = csi.get("driver")
    if driver != BLOB_DRIVER:
        raise Refused(f"the PersistentVolume {name!r} of PersistentVolumeClaim {claim!r} uses CSI driver "
                      f"{driver!r}: only the Azure Blob CSI driver {BLOB_DRIVER!r} is supported", pv=name,
                      driver=driver if isinstance(driver, str) else None)
    attributes = fold_attributes(csi.get("volumeAttributes") or {}, name)
    handle = csi.get("volumeHandle")
    parts = handle.split("#") if isinstance(handle, str) and handle.count("#") >= 2 else []
    account = attributes.get("storageaccount") or (parts[1] if parts else "")
    container = attributes.get("containername") or (parts[2] if parts else "")
    resource_group = attributes.get("resourcegroup") or (parts[0] if parts else "") or None
    for value, attribute, part in ((account, "storageAccount", "ACCOUNT"), (container, "containerName",
                                                                              "CONTAINER")):
        if not value:
            raise BadInput(f"the PersistentVolume {name!r} names no storage {part.lower()}: no {attribute} volume "
                           f"attribute, and no volumeHandle RESOURCEGROUP#ACCOUNT#CONTAINER", pv=name)
    if any(c in container for c in "/\\"):
        raise BadInput(f"the PersistentVolume {name!r} names container {container!r}, which holds a path "
                       "separator", pv=name)
    account_url = _account_url(attributes, account, name, env)
    url = f"{account_url}/{container}/{prefix}"
    try:
        location = endpoint.parse(url, env)  # the volume is data: refused here, before any Blob request
    except Refused as exc:
        raise Refused(f"{exc.message} (discovered from PersistentVolume {name!r} of PersistentVolumeClaim "
                      f"{claim!r})", **{**exc.details, "pv": name}) from None
    if location.account != account:
        raise Refused(f"the PersistentVolume {name!r} names storage account {account!r}, but its endpoint "
                      f"{account_url!r} is that of account {location.account!r}", pv=name)
    if (location.account_url, location.container, location.prefix) != (account_url, container, prefix):
        raise Refused(f"the Blob URL {url!r} built from PersistentVolume {name!r} is not account {account!r}, "
                      f"container {container!r} and prefix {prefix!r}", pv=name)
    return {"url": location.url(), "resource_group": resource_group}


def fold_attributes(attributes: object, pv: object) -> dict[str, str]:
    """volumeAttributes with lowercased names, as the driver reads them; conflicting case variants are 65."""
    if not isinstance(attributes, dict):
        raise BadInput(f"the volumeAttributes of PersistentVolume {pv!r} are not an object", pv=pv)
    folded: dict[str, str] = {}
    spelled: dict[str, str] = {}
    for key in sorted(attributes):
        value = attributes[key]
        if not isinstance(value, str):
            raise BadInput(f"the volume attribute {key!r} of PersistentVolume {pv!r} is not a string", pv=pv)
        lower = key.lower()
        if lower in folded and folded[lower] != value:
            raise BadInput(f"the volumeAttributes of PersistentVolume {pv!r} hold {spelled[lower]!r} "
                           f"({folded[lower]!r}) and {key!r} ({value!r}): case variants of one attribute, which "
                           "the driver reads case-insensitively, that conflict", pv=pv)
        folded[lower], spelled[lower] = value, key
    return folded


def _account_url(attributes: dict[str, str], account: str, pv: object, env: dict[str, str] | None) -> str:
    """The account URL from the `server` attribute, else from the account and the endpoint suffix."""
    server = attributes.get("server")
    if not server:
        suffix = attributes.get("storageendpointsuffix") or DEFAULT_ENDPOINT_SUFFIX
        if not _DNS_NAME.match(suffix.lower()):
            raise Refused(f"the PersistentVolume {pv!r} has storageEndpointSuffix {suffix!r}, which is not a DNS "
                          f"suffix such as {DEFAULT_ENDPOINT_SUFFIX!r}", pv=pv)
        return f"https://{account}.blob.{suffix.lower()}"
    if "://" not in server:
        if not _DNS_NAME.match(server.lower()):
            raise Refused(f"the PersistentVolume {pv!r} has server {server!r}, which is neither a host name (such "
                          "as ACCOUNT.blob.core.windows.net) nor an https origin", pv=pv)
        return f"https://{server.lower()}"
    try:
        parts = urlsplit(server)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        raise Refused(f"the PersistentVolume {pv!r} has server {server!r}, which is not a URL", pv=pv) from None
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise Refused(f"the PersistentVolume {pv!r} has server {server!r}, which carries user information", pv=pv)
    if parts.query or parts.fragment or "?" in server or "#" in server:
        raise Refused(f"the PersistentVolume {pv!r} has server {server!r}, which has a query or a fragment", pv=pv)
    if parts.path not in ("", "/"):
        raise Refused(f"the PersistentVolume {pv!r} has server {server!r}, which has a path: it must be an origin",
                      pv=pv)
    origin = f"{parts.scheme.lower()}://{parts.netloc.lower()}"
    if origin in endpoint.trusted_origins(env):
        return f"{origin}/{account}"  # a trusted endpoint (Azurite) is path-style: ORIGIN/ACCOUNT/CONTAINER
    if parts.scheme.lower() != "https":
        raise Refused(f"the PersistentVolume {pv!r} has server {server!r}, which is not https; only https, or an "
                      "origin listed in TAU_TRUSTED_BLOB_ENDPOINTS, is contacted", pv=pv)
    return origin


def _store(text: str, what: str) -> Record:
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
