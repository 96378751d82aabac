"""tau-observe's two paths: what observing a run costs without the kubernetes package, and what a workload costs.

Measures, interleaved in the same run (so machine noise hits all alike), against a loopback API server
(tests/kubeapi.py) holding the "Job running with a crash-looping sidecar" scene:
  baseline        python -c 'import click, orjson'          (the floor of any click+orjson command)
  help            tau-observe --help
  run             tau-observe RUN on a finished 8-shard local run
  kube-script     a plain kubernetes-client script making the same seven reads with the typed APIs (the named
                  baseline for the Kubernetes path: what a hand-written status script pays)
  kubernetes      tau-observe --kubernetes train-7 (the same reads, classified, plus the snapshot)
and, with python -X importtime, the cumulative import time of the `kubernetes` package on each path.
Prints medians and ratios (goals: help and run pay nothing for kubernetes; kubernetes <= 1.0x kube-script).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import k8s_fixtures  # noqa: E402
import kubeapi  # noqa: E402
from startup import make_demo_run  # noqa: E402

BIN = ROOT / ".venv" / "bin"
PY = str(BIN / "python")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "20"))

KUBE_SCRIPT = """
import sys
from kubernetes import client, config
config.load_kube_config()
api = client.ApiClient()
name, ns = sys.argv[1], sys.argv[2]
batch, core, custom = client.BatchV1Api(api), client.CoreV1Api(api), client.CustomObjectsApi(api)
job = batch.read_namespaced_job(name, ns)
try:
    custom.get_namespaced_custom_object("ray.io", "v1", ns, "rayjobs", name)
except client.exceptions.ApiException as exc:
    assert exc.status == 404
for selector in (f"kueue.x-k8s.io/job-uid in ({job.metadata.uid})", f"tau.azure.com/job={name}"):
    custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "workloads", label_selector=selector)
for selector in (f"job-name={name}", f"tau.azure.com/job={name}", "ray.io/cluster=none"):
    for pod in core.list_namespaced_pod(ns, label_selector=selector).items:
        for status in pod.status.container_statuses or []:
            print(pod.metadata.name, status.name, status.restart_count)
"""


def timed(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - start


def kubernetes_import_ms(argv: list[str], env: dict) -> float:
    """Cumulative import time of the top-level `kubernetes` package in a run of argv (0 when not imported)."""
    proc = subprocess.run([PY, "-X", "importtime", *argv], capture_output=True, text=True, env=env)
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s*kubernetes$", line)
        if m:
            return int(m.group(1)) / 1000
    return 0.0


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp, kubeapi.KubeAPI() as server:
        workspace = Path(tmp) / "ws"
        workspace.mkdir(mode=0o700)
        run_dir = make_demo_run(workspace)
        server.load(k8s_fixtures.job_running_with_crashlooping_sidecar()["objects"])
        config = server.kubeconfig(Path(tmp) / "kubeconfig")
        env = dict(os.environ, KUBECONFIG=str(config), PATH=f"{BIN}:{os.environ['PATH']}")
        observe = str(BIN / "tau-observe")
        cases = {
            "baseline": [PY, "-c", "import click, orjson"],
            "help": [observe, "--help"],
            "run": [observe, str(run_dir)],
            "kube-script": [PY, "-c", KUBE_SCRIPT, "train-7", kubeapi.NAMESPACE],
            "kubernetes": [observe, "--kubernetes", "train-7", "-n", kubeapi.NAMESPACE],
        }
        doc = json.loads(subprocess.run(cases["kubernetes"], capture_output=True, check=True, env=env).stdout)
        assert (doc["lifecycle"], doc["state"], doc["degraded"]) == ("running", "Running", True), doc
        for argv in cases.values():  # warm the page cache
            timed(argv, env)
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(ROUNDS):
            for name, argv in cases.items():
                samples[name].append(timed(argv, env))
        module = ["-m", "taulib.cli.observe"]
        imports = {"help": kubernetes_import_ms([*module, "--help"], env),
                   "run": kubernetes_import_ms([*module, str(run_dir)], env),
                   "kubernetes": kubernetes_import_ms([*module, "--kubernetes", "train-7"], env)}
    med = {name: statistics.median(values) for name, values in samples.items()}
    print(f"tau-observe paths, {ROUNDS} interleaved rounds (median wall time):")
    for name in cases:
        print(f"  {name:12} {med[name] * 1000:7.1f} ms")
    print(f"  help / baseline         {med['help'] / med['baseline']:.2f}x")
    print(f"  run / baseline          {med['run'] / med['baseline']:.2f}x")
    print(f"  kubernetes / kube-script {med['kubernetes'] / med['kube-script']:.2f}x  (goal <= 1.0x)")
    print("cumulative import time of the kubernetes package (python -X importtime):")
    for name, ms in imports.items():
        print(f"  tau-observe {name:10} {ms:7.1f} ms" + ("  (not imported)" if ms == 0 else ""))
    ok = imports["help"] == 0 and imports["run"] == 0 and imports["kubernetes"] > 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
