"""A small Kubernetes API server on 127.0.0.1 for tests: recorded objects served as the API server serves them.

`KubeAPI()` serves, from a thread, Jobs (batch/v1), Pods (v1), RayJobs (ray.io/v1) and Kueue Workloads
(kueue.x-k8s.io/v1beta2 and v1beta1, from one store, as the API server converts between versions):
PersistentVolumeClaims (v1) and the cluster-scoped PersistentVolumes (v1) and Kueue AdmissionChecks (v1beta2,
v1beta1; served without `namespaces/NS`, stored under namespace ""):
`GET .../namespaces/NS/PLURAL/NAME` answers the object (200) or a `Status` NotFound naming it (404);
`GET .../namespaces/NS/PLURAL?labelSelector=...` answers a `{"kind": "PodList", "items": [...]}`-style list
filtered by the selector (equality `k=v`, `k==v`, `k!=v`, set-based `k in (a,b)`, `k notin (a,b)`, `k`, `!k`,
comma-joined); `GET /apis/GROUP/VERSION` answers the discovery `APIResourceList`. A group (or a "group/version")
listed in `absent` (a CRD, or a version of it, not installed) answers every path under it with the API server's
plain `404 page not found`. A plural in `deny` answers a `Status` Forbidden (403), one in `broken` a `Status`
InternalError (500). `requests` lists the paths (with query) asked for. `kubeconfig(path)` writes a kubeconfig (no
auth) pointing at it; pass it with
KUBECONFIG. Use it as a context manager.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

NAMESPACE = "team-a"
# (group, version, plural) -> kind; group "" is the core group, served under /api
RESOURCES = {("batch", "v1", "jobs"): "Job", ("", "v1", "pods"): "Pod", ("ray.io", "v1", "rayjobs"): "RayJob",
             ("kueue.x-k8s.io", "v1beta2", "workloads"): "Workload",
             ("kueue.x-k8s.io", "v1beta1", "workloads"): "Workload",
             ("", "v1", "persistentvolumeclaims"): "PersistentVolumeClaim",
             ("", "v1", "persistentvolumes"): "PersistentVolume",
             ("kueue.x-k8s.io", "v1beta2", "admissionchecks"): "AdmissionCheck",
             ("kueue.x-k8s.io", "v1beta1", "admissionchecks"): "AdmissionCheck"}
PLURALS = {kind: key for key, kind in RESOURCES.items()}  # (the last version listed of a kind)
CLUSTER_SCOPED = frozenset({"persistentvolumes", "admissionchecks"})  # stored under namespace ""


def status(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details or {}, "code": code}


def closed_port() -> int:
    """A loopback port that was free a moment ago and that nothing listens on: an API server that is down."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def job(name: str, annotations: dict, namespace: str = NAMESPACE) -> dict:
    return {"kind": "Job", "apiVersion": "batch/v1",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "1",
                         "labels": {"tau.azure.com/managed-by": "tau"}, "annotations": annotations},
            "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "busybox", "command": ["true"]}]}}},
            "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}


def rayjob(name: str, annotations: dict, namespace: str = NAMESPACE) -> dict:
    return {"kind": "RayJob", "apiVersion": "ray.io/v1",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-ray-{name}", "resourceVersion": "1",
                         "annotations": annotations},
            "spec": {"entrypoint": "python train.py"},
            "status": {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}}


_REQUIREMENT = re.compile(r"^\s*(?:(?P<not>!)\s*(?P<nkey>[^\s,!=()]+)|(?P<key>[^\s,!=()]+)\s*"
                          r"(?:(?P<op>==|=|!=)\s*(?P<value>[^\s,()]*)|\s(?P<setop>in|notin)\s*\((?P<set>[^)]*)\))?)"
                          r"\s*(?:,|$)")


def selector_matches(selector: str, labels: dict) -> bool:
    """Whether labels satisfy a Kubernetes label selector (the grammar of apimachinery's labels.Parse)."""
    rest = selector.strip()
    while rest:
        m = _REQUIREMENT.match(rest)
        if not m:
            raise ValueError(f"unable to parse requirement: {rest!r}")
        rest = rest[m.end():].strip()
        if m["not"]:
            if m["nkey"] in labels:
                return False
        elif m["op"]:
            present = labels.get(m["key"]) == m["value"]
            if present == (m["op"] == "!="):
                return False
        elif m["setop"]:
            values = {v.strip() for v in m["set"].split(",") if v.strip()}
            inside = labels.get(m["key"]) in values
            if inside != (m["setop"] == "in"):
                return False
        elif m["key"] not in labels:
            return False
    return True


class KubeAPI:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}  # (plural, namespace, name) -> object
        self.deny: set[str] = set()  # plurals whose reads are forbidden
        self.broken: set[str] = set()  # plurals whose reads fail with 500
        self.absent: set[str] = set()  # API groups not installed (their CRDs are missing)
        self.requests: list[str] = []
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
                with api.lock:
                    api.requests.append(self.path)
                    code, body = api.answer(self.path)
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8" if isinstance(body, str)
                                 else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        # shutdown() waits for the loop to look again: every 0.05 s, not the default 0.5 s (half a second per test)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> "KubeAPI":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    # the old switch for the RayJob CRD, kept for the bundle tests
    @property
    def ray_crd(self) -> bool:
        return "ray.io" not in self.absent

    @ray_crd.setter
    def ray_crd(self, installed: bool) -> None:
        (self.absent.discard if installed else self.absent.add)("ray.io")

    def add(self, obj: dict) -> None:
        with self.lock:
            plural = PLURALS[obj["kind"]][2]
            namespace = "" if plural in CLUSTER_SCOPED else obj["metadata"]["namespace"]
            self.objects[(plural, namespace, obj["metadata"]["name"])] = obj

    def remove(self, kind: str, namespace: str, name: str) -> None:
        with self.lock:
            plural = PLURALS[kind][2]
            self.objects.pop((plural, "" if plural in CLUSTER_SCOPED else namespace, name), None)

    def load(self, objects: list[dict]) -> None:
        for obj in objects:
            self.add(obj)

    def stage(self, scene: dict) -> None:
        """Serve a scene of tests/k8s_fixtures.py: its objects, and the resources it denies, breaks or lacks."""
        self.load(scene["objects"])
        self.deny |= set(scene.get("deny", ()))
        self.absent |= set(scene.get("absent", ()))
        self.broken |= set(scene.get("broken", ()))

    def answer(self, raw_path: str) -> tuple[int, dict | str]:
        url = urlsplit(raw_path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        query = parse_qs(url.query)
        if parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return 404, "404 page not found\n"
        served = {plural: kind for (g, v, plural), kind in RESOURCES.items() if g == group and v == version}
        if group in self.absent or f"{group}/{version}" in self.absent or not served:
            return 404, "404 page not found\n"
        if not rest:
            return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion":
                         f"{group}/{version}" if group else version,
                         "resources": [{"name": plural, "singularName": kind.lower(),
                                        "namespaced": plural not in CLUSTER_SCOPED,
                                        "kind": kind, "verbs": ["get", "list", "watch"]}
                                       for plural, kind in sorted(served.items())]}
        if rest[0] in served and rest[0] in CLUSTER_SCOPED and len(rest) in (1, 2):
            namespace, plural, name = "", rest[0], (rest[1] if len(rest) == 2 else None)
        elif len(rest) in (3, 4) and rest[0] == "namespaces" and rest[2] in served and rest[2] not in CLUSTER_SCOPED:
            namespace, plural, name = rest[1], rest[2], (rest[3] if len(rest) == 4 else None)
        else:
            return 404, "404 page not found\n"
        kind = served[plural]
        resource = f"{plural}.{group}" if group else plural
        if plural in self.deny:
            verb = "get" if name else "list"
            who = f'{resource} "{name}"' if name else resource
            scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
            user = f"system:serviceaccount:{namespace or NAMESPACE}:reader"
            return 403, status(403, "Forbidden", f'{who} is forbidden: User "{user}" cannot {verb} resource '
                               f'"{plural}" in API group "{group}" {scope}',
                               {"name": name, "group": group, "kind": plural} if name
                               else {"group": group, "kind": plural})
        if plural in self.broken:
            return 500, status(500, "InternalError", "Internal error occurred: etcdserver: request timed out")
        if name is not None:
            obj = self.objects.get((plural, namespace, name))
            if obj is None:
                return 404, status(404, "NotFound", f'{resource} "{name}" not found',
                                   {"name": name, "group": group, "kind": plural})
            return 200, obj
        selector = query.get("labelSelector", [""])[0]
        try:
            items = [obj for (p, ns, _), obj in sorted(self.objects.items())
                     if p == plural and ns == namespace
                     and selector_matches(selector, obj["metadata"].get("labels") or {})]
        except ValueError as exc:
            return 400, status(400, "BadRequest", str(exc))
        return 200, {"kind": f"{kind}List", "apiVersion": f"{group}/{version}" if group else version,
                     "metadata": {"resourceVersion": "100"},
                     "items": [{k: v for k, v in obj.items() if k not in ("kind", "apiVersion")} for obj in items]}

    def kubeconfig(self, path: Path, namespace: str = NAMESPACE, port: int | None = None) -> Path:
        """A kubeconfig (JSON is YAML) for this server, or for `port` (a closed one), with no auth."""
        server = f"http://127.0.0.1:{self.port if port is None else port}"
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "loop",
               "clusters": [{"name": "loop", "cluster": {"server": server}}],
               "users": [{"name": "tester", "user": {}}],
               "contexts": [{"name": "loop", "context": {"cluster": "loop", "user": "tester",
                                                         "namespace": namespace}}]}
        path.write_text(json.dumps(doc))
        return path


def main(argv: list[str]) -> int:
    """`python tests/kubeapi.py SCENE KUBECONFIG`: serve a scene of tests/k8s_fixtures.py until SIGTERM, after
    writing a kubeconfig for it (for shell tests: tests/bats/kubernetes.bats)."""
    import signal
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import k8s_fixtures

    scene = k8s_fixtures.FIXTURES[argv[0]]()
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with KubeAPI() as api:
        api.stage(scene)
        api.kubeconfig(Path(argv[1]))
        print(api.port, flush=True)
        stopped.wait()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
