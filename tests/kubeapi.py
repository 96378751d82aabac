"""A tiny Kubernetes API server on 127.0.0.1 for tests: Jobs and RayJobs served as the API serves them.

`KubeAPI()` answers, from a thread, `GET /apis/batch/v1/namespaces/NS/jobs/NAME` and
`GET /apis/ray.io/v1/namespaces/NS/rayjobs/NAME` with the object (200), a `Status` NotFound (404), a `Status`
Forbidden (403) for a kind listed in `deny`, the API server's answer for an absent CRD (404) when `ray_crd` is
False, or a `Status` InternalError for a kind listed in `broken`. `kubeconfig(path)` writes a kubeconfig (no auth)
pointing at it; pass it with KUBECONFIG. `requests` lists the paths asked for. Use it as a context manager.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

NAMESPACE = "team-a"
KINDS = {("batch", "v1", "jobs"): ("Job", "batch/v1"), ("ray.io", "v1", "rayjobs"): ("RayJob", "ray.io/v1")}


def status(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details or {}, "code": code}


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


class KubeAPI:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}  # (plural, namespace, name) -> object
        self.deny: set[str] = set()  # plurals whose reads are forbidden
        self.broken: set[str] = set()  # plurals whose reads fail with 500
        self.ray_crd = True
        self.requests: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
                api.requests.append(self.path)
                code, body = api.answer(self.path.split("?", 1)[0])
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "KubeAPI":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, obj: dict) -> None:
        plural = {"Job": "jobs", "RayJob": "rayjobs"}[obj["kind"]]
        self.objects[(plural, obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj

    def answer(self, path: str) -> tuple[int, dict]:
        parts = path.strip("/").split("/")
        if len(parts) != 7 or parts[0] != "apis" or parts[3] != "namespaces" \
                or (parts[1], parts[2], parts[5]) not in KINDS:
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        group, namespace, plural, name = parts[1], parts[4], parts[5], parts[6]
        details = {"name": name, "group": group, "kind": plural}
        if plural == "rayjobs" and not self.ray_crd:
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        if plural in self.deny:
            return 403, status(403, "Forbidden", f'{plural}.{group} "{name}" is forbidden: User '
                               f'"system:serviceaccount:{namespace}:reader" cannot get resource "{plural}" in API '
                               f'group "{group}" in the namespace "{namespace}"', details)
        if plural in self.broken:
            return 500, status(500, "InternalError", "Internal error occurred: etcdserver: request timed out")
        obj = self.objects.get((plural, namespace, name))
        if obj is None:
            return 404, status(404, "NotFound", f'{plural}.{group} "{name}" not found', details)
        return 200, obj

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
