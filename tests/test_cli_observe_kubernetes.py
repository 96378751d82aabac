"""tau-observe --kubernetes: the real kubernetes client over HTTP against a loopback API server (tests/kubeapi.py).

Every scene of tests/k8s_fixtures.py is observed by the real command and its whole snapshot compared with its
golden file in tests/golden/kubernetes/. Accept an intended change with:
TAU_ACCEPT_GOLDEN=1 .venv/bin/python -m pytest tests/test_cli_observe_kubernetes.py
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from urllib.parse import unquote_plus

import k8s_fixtures
import kubeapi
import pytest
from helpers import BIN, check_golden, env_for_tests, error_of, init_run, tau

from taulib import schema



@pytest.fixture
def api(tmp_path):
    with kubeapi.KubeAPI() as server:
        server.config = server.kubeconfig(tmp_path / "kubeconfig")
        yield server


def observe(api, name, *args, namespace=kubeapi.NAMESPACE, timeout=60):
    ns = ("-n", namespace) if namespace else ()
    return tau("tau-observe", "--kubernetes", name, *ns, *args, env={"KUBECONFIG": str(api.config)},
               timeout=timeout)


def snapshot_of(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.count("\n") == 1, "one JSON document on one line"
    doc = json.loads(proc.stdout)
    schema.validate(doc, "workload-status")
    schema.validate(doc, "tau-v1alpha1-status")  # Tau's own contract, which tau's additions leave whole
    return doc


# -- every fixture, the whole snapshot -----------------------------------------------------------------------------

@pytest.mark.parametrize("fixture", sorted(k8s_fixtures.FIXTURES))
def test_the_snapshot_of_each_scene_matches_its_golden_file(api, fixture):
    scene = k8s_fixtures.FIXTURES[fixture]()
    api.stage(scene)
    doc = snapshot_of(observe(api, scene["name"]))
    check_golden(f"kubernetes/{fixture}.json", json.dumps(doc, indent=2, sort_keys=False) + "\n")
    again = snapshot_of(observe(api, scene["name"]))
    assert again == doc, "the same reads give the same snapshot (no clock in it)"


@pytest.mark.parametrize("fixture", ["job-running-with-crashlooping-sidecar", "rayjob-running", "pods-denied",
                                     "same-name-failed-job-beside-succeeded-rayjob", "rayjob-failed-after-teardown",
                                     "job-multikueue-manager-view", "admission-checks-denied"])
def test_the_table_of_a_scene_matches_its_golden_file(api, fixture):
    scene = k8s_fixtures.FIXTURES[fixture]()
    api.stage(scene)
    proc = observe(api, scene["name"], "-o", "table")
    assert proc.returncode == 0, proc.stderr
    check_golden(f"kubernetes/{fixture}.table", proc.stdout)


# -- what a user reads first, spelled out (the golden files pin the rest) ------------------------------------------

def test_a_job_pending_in_kueue_says_why_kueue_has_not_admitted_it(api):
    api.stage(k8s_fixtures.job_pending_in_kueue())
    doc = snapshot_of(observe(api, "train-7"))
    assert (doc["kind"], doc["lifecycle"], doc["degraded"], doc["reason"]) == ("Job", "pending", False, None)
    assert "waiting for Kueue to admit it" in doc["stateDetail"]
    (wl,) = doc["workloads"]
    assert (wl["phase"], wl["admitted"], wl["queue"], wl["owner"], wl["reason"]) == \
        ("Pending", False, "gpu", "Job", "Pending")
    assert "insufficient unused quota for nvidia.com/gpu" in wl["message"]
    kueue = next(p for p in doc["phases"] if p["name"] == "Kueue admission")
    assert (kueue["status"], kueue["detail"]) == ("active", "0/1 admitted queue=gpu reason=Pending")  # Tau's words


def test_a_running_job_with_a_crash_looping_sidecar_is_running_and_degraded_with_the_container_named(api):
    api.stage(k8s_fixtures.job_running_with_crashlooping_sidecar())
    doc = snapshot_of(observe(api, "train-7"))
    assert (doc["lifecycle"], doc["degraded"]) == ("running", True)
    assert doc["state"] == "Running"  # Tau's word: a Job can be Running while a sidecar degrades it
    assert doc["reason"] == "train-7-x8k2p/log-shipper waiting reason=CrashLoopBackOff restarts=5"  # Tau's words
    (pod,) = doc["pods"]
    assert (pod["node"], pod["ready"], pod["restarts"], pod["health"]) == ("gpu-node-1", "1/2", 5, "issue")
    sidecar = next(c for c in pod["containers"] if c["name"] == "log-shipper")
    assert (sidecar["state"], sidecar["reason"], sidecar["exitCode"], sidecar["lastReason"],
            sidecar["lastExitCode"], sidecar["restartCount"]) == ("waiting", "CrashLoopBackOff", None, "Error", 1, 5)


def test_a_job_failed_by_oom_reports_exit_137_out_of_memory_and_the_backoff_reason(api):
    api.stage(k8s_fixtures.job_failed_oom())
    doc = snapshot_of(observe(api, "train-7"))
    assert (doc["lifecycle"], doc["degraded"]) == ("failed", True)
    assert doc["state"] == "Failed"
    # the container's issue first, as Tau's reason; the Job's own failure in Tau's "reason message"
    assert doc["issues"] == ["train-7-x8k2p/main terminated reason=OOMKilled exit=137",
                             "BackoffLimitExceeded Job has reached the specified backoff limit"]
    assert doc["reason"] == doc["issues"][0]
    (pod,) = doc["pods"]
    assert (pod["phase"], pod["state"]) == ("Failed", "out_of_memory")
    assert pod["containers"][0]["exitCode"] == 137


def test_a_rayjob_failed_with_a_stale_running_job_status_is_failed_and_degraded_with_a_reason(api):
    """Seed review P1: deriveRayJobState said Failed while the failure helper saw RUNNING: degraded false, no
    reason. Here Failed always carries degraded and a reason."""
    api.stage(k8s_fixtures.rayjob_failed_with_stale_running_job_status())
    doc = snapshot_of(observe(api, "tune"))
    assert (doc["primary"], doc["lifecycle"], doc["degraded"]) == ("RayJob", "failed", True)
    # Tau's contract: both were found, and the submitter Job (still active) decides Tau's state
    assert (doc["kind"], doc["state"]) == ("Job+RayJob", "Running")
    assert doc["reason"].startswith("DeadlineExceeded The RayJob has passed the activeDeadlineSeconds")
    assert doc["rayJob"]["jobStatus"] == "RUNNING" and doc["rayJob"]["degraded"] is True
    assert doc["job"]["submitterOf"] == "tune", "the same-name Job owned by the RayJob is its submitter"


def test_a_succeeded_rayjob_calls_its_failed_worker_teardown_and_stays_healthy(api):
    api.stage(k8s_fixtures.rayjob_succeeded_with_failed_teardown_pod())
    doc = snapshot_of(observe(api, "tune"))
    assert (doc["lifecycle"], doc["degraded"], doc["reason"]) == ("succeeded", False, None)
    worker = next(p for p in doc["pods"] if p["role"] == "worker")
    assert (worker["phase"], worker["health"], worker["owner"]) == ("Teardown", "teardown", "RayJob")
    assert worker["state"] == "failed"  # the pod's own observed state is kept


def test_same_name_ray_pods_never_degrade_the_batch_job(api):
    """Seed review P1: unrelated Ray pods degraded the batch Job of the same name."""
    api.stage(k8s_fixtures.same_name_job_and_rayjob())
    doc = snapshot_of(observe(api, "eval"))
    assert (doc["kind"], doc["lifecycle"], doc["degraded"], doc["reason"]) == ("Job+RayJob", "running", False, None)
    assert doc["rayJob"]["degraded"] is True and doc["job"]["degraded"] is False
    owners = {p["name"]: (p["owner"], p["health"]) for p in doc["pods"]}
    assert owners == {"eval-q7w2n": ("Job", "ok"),
                      "eval-raycluster-m2p7x-gpu-worker-2hxkq": ("RayJob", "issue"),
                      "eval-raycluster-m2p7x-head-7lq2c": ("RayJob", "ok")}


def test_a_succeeded_same_name_rayjob_never_turns_a_failed_batch_pod_into_teardown(api):
    """Seed review P1: a successful RayJob marked a failed batch pod as Teardown and hid its failure."""
    api.stage(k8s_fixtures.same_name_failed_job_beside_succeeded_rayjob())
    doc = snapshot_of(observe(api, "eval"))
    assert (doc["lifecycle"], doc["degraded"]) == ("failed", True)
    assert doc["reason"] == "eval-q7w2n/main terminated reason=Error exit=1"
    assert {p["name"]: p["phase"] for p in doc["pods"]} == {
        "eval-q7w2n": "Failed", "eval-raycluster-m2p7x-gpu-worker-2hxkq": "Teardown"}
    health = {p["name"]: p["health"] for p in doc["pods"]}
    assert health == {"eval-q7w2n": "issue", "eval-raycluster-m2p7x-gpu-worker-2hxkq": "teardown"}
    assert doc["rayJob"]["lifecycle"] == "succeeded" and doc["rayJob"]["degraded"] is False


def test_a_pod_read_denied_by_rbac_is_unavailable_access_denied_and_never_no_pods(api):
    api.stage(k8s_fixtures.pods_denied())
    doc = snapshot_of(observe(api, "train-7"))
    pods = doc["observations"]["pods"]
    assert pods["state"] == "unavailable"
    assert pods["reason"].startswith("access denied by Kubernetes RBAC reading the Pod list")
    assert doc["pods"] == [] and doc["lifecycle"] == "running"
    assert doc["degraded"] is False, "health cannot be judged from pods we may not read"
    assert "not found" not in pods["reason"]
    scheduling = next(p for p in doc["phases"] if p["name"] == "Pod scheduling")
    assert scheduling["status"] == "warning"
    assert scheduling["detail"].startswith("pod status unavailable: access denied")
    assert not any(p["detail"].startswith("no pods") for p in doc["phases"])
    proc = observe(api, "train-7", "-o", "table")
    assert "no pods" not in proc.stdout and "pods unavailable (access denied" in proc.stdout


def test_an_absent_rayjob_crd_is_not_installed_and_a_later_call_sees_it_installed(api):
    api.stage(k8s_fixtures.rayjob_crd_absent())
    doc = snapshot_of(observe(api, "train-7"))
    # Tau's words exactly: unavailable, "resource type is not installed" (which type, in detail)
    assert doc["observations"]["rayJob"] == {"state": "unavailable", "reason": "resource type is not installed",
                                             "detail": "the API server does not serve rayjobs.ray.io/v1"}
    assert (doc["kind"], doc["lifecycle"], doc["state"]) == ("Job", "succeeded", "Complete")
    api.absent.discard("ray.io")  # the CRD gets installed: nothing was cached
    doc = snapshot_of(observe(api, "train-7"))
    assert doc["observations"]["rayJob"] == {"state": "notFound", "reason": None, "detail": None}
    api.add(k8s_fixtures.rayjob("train-7", deployment="Running", job_status="RUNNING"))
    assert snapshot_of(observe(api, "train-7"))["kind"] == "Job+RayJob"


def test_neither_a_job_nor_a_rayjob_is_state_not_found(api):
    api.stage(k8s_fixtures.nothing_there())
    doc = snapshot_of(observe(api, "gone"))
    assert (doc["kind"], doc["lifecycle"], doc["state"], doc["degraded"]) == ("Unknown", "not_found", "NotFound",
                                                                              False)
    assert doc["observations"]["job"] == {"state": "notFound", "reason": None, "detail": None}
    assert doc["observations"]["workloads"]["reason"] == "resource type is not installed"


def test_a_denied_job_read_leaves_the_state_unknown_never_not_found(api):
    api.stage({"objects": [k8s_fixtures.job("train-7")], "deny": ["jobs"]})
    doc = snapshot_of(observe(api, "train-7"))
    assert (doc["kind"], doc["lifecycle"], doc["state"]) == ("Unknown", "unknown", "Unknown")
    assert doc["stateDetail"].startswith("cannot tell: access denied by Kubernetes RBAC reading the Job")
    assert doc["observations"]["job"]["state"] == "unavailable"


def test_a_server_error_on_workloads_is_unavailable_and_kueue_admission_says_it_cannot_tell(api):
    api.stage({**k8s_fixtures.job_pending_in_kueue(), "broken": ["workloads"]})
    doc = snapshot_of(observe(api, "train-7"))
    assert doc["observations"]["workloads"]["state"] == "unavailable"
    assert "answered HTTP 500" in doc["observations"]["workloads"]["reason"]
    kueue = next(p for p in doc["phases"] if p["name"] == "Kueue admission")
    assert kueue["status"] == "warning" and kueue["detail"].startswith("workload status unavailable: ")


def test_every_read_denied_exits_77_naming_the_denial(api):
    api.stage({"objects": [], "deny": ["jobs", "rayjobs", "workloads", "pods"]})
    proc = observe(api, "train-7")
    assert proc.returncode == 77, proc.stderr
    assert proc.stdout == ""
    error = error_of(proc)
    assert error["error"] == "refused" and "access denied by Kubernetes RBAC" in error["message"]
    assert "not found" not in error["message"]


def test_the_namespace_defaults_to_the_kubeconfig_context(api):
    api.stage(k8s_fixtures.job_succeeded())
    doc = snapshot_of(observe(api, "train-7", namespace=None))
    assert (doc["namespace"], doc["lifecycle"]) == (kubeapi.NAMESPACE, "succeeded")


def test_the_reads_are_the_workload_its_kueue_workloads_and_its_pods_by_their_selectors(api):
    api.stage(k8s_fixtures.rayjob_running())
    snapshot_of(observe(api, "tune"))
    paths = [unquote_plus(p) for p in api.requests]
    ns = kubeapi.NAMESPACE
    assert paths == [
        f"/apis/batch/v1/namespaces/{ns}/jobs/tune",
        f"/apis/ray.io/v1/namespaces/{ns}/rayjobs/tune",
        f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads?labelSelector=kueue.x-k8s.io/job-uid in "
        "(job-tune-submitter-uid,rayjob-tune-uid)",
        f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads?labelSelector=tau.azure.com/job=tune",
        f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name=tune",
        f"/api/v1/namespaces/{ns}/pods?labelSelector=tau.azure.com/job=tune",
        f"/api/v1/namespaces/{ns}/pods?labelSelector=ray.io/cluster=tune-raycluster-kx2v9"]


@pytest.mark.parametrize("served, asked", [
    ("v1beta2", ["v1beta2", "v1beta2"]),  # Kueue 0.20 and later serve only v1beta2
    ("v1beta1", ["v1beta2", "v1beta1", "v1beta1"]),  # a Kueue older than 0.15 only v1beta1: asked once, then v1beta1
])
def test_kueue_workloads_are_read_in_the_newest_version_the_server_serves(api, served, asked):
    api.stage(k8s_fixtures.job_pending_in_kueue())
    api.absent.add("kueue.x-k8s.io/" + ("v1beta1" if served == "v1beta2" else "v1beta2"))
    doc = snapshot_of(observe(api, "train-7"))
    assert doc["observations"]["workloads"] == {"state": "observed", "reason": None, "detail": None}
    assert [w["phase"] for w in doc["workloads"]] == ["Pending"]
    lists = [p.split("/")[3] for p in api.requests if "/workloads?" in p]
    assert lists == asked


def test_without_kueue_the_workload_read_is_not_installed_naming_both_versions(api):
    api.stage({**k8s_fixtures.job_succeeded(), "absent": ["kueue.x-k8s.io"]})
    doc = snapshot_of(observe(api, "train-7"))
    assert doc["observations"]["workloads"] == {
        "state": "unavailable", "reason": "resource type is not installed", "detail": "the API server serves "
        "neither workloads.kueue.x-k8s.io/v1beta2 nor v1beta1"}
    kueue = next(p for p in doc["phases"] if p["name"] == "Kueue admission")
    assert kueue == {"name": "Kueue admission", "status": "warning", "detail": "it names queue 'gpu', but Kueue is "
                     "not installed", "hint": "install Kueue, or remove the kueue.x-k8s.io/queue-name label"}


# -- an API server that does not answer ----------------------------------------------------------------------------

def test_an_unreachable_cluster_exits_69_within_seconds_with_a_clear_error(api, tmp_path):
    closed = kubeapi.closed_port()
    api.config = api.kubeconfig(tmp_path / "closed", port=closed)
    started = time.monotonic()
    proc = observe(api, "train-7")
    elapsed = time.monotonic() - started
    assert proc.returncode == 69, proc.stderr
    assert elapsed < 5, f"took {elapsed:.1f} s"
    message = error_of(proc)["message"]
    assert f"the Kubernetes API server http://127.0.0.1:{closed} cannot be reached" in message
    assert "connection refused" in message and proc.stdout == ""


@pytest.mark.slow
def test_an_api_server_that_accepts_but_never_answers_exits_69_after_the_request_timeout(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted = []
    stop = threading.Event()

    def hold() -> None:  # accept and keep connections open, never answering
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        server = kubeapi.KubeAPI()
        config = server.kubeconfig(tmp_path / "silent", port=listener.getsockname()[1])
        started = time.monotonic()
        proc = tau("tau-observe", "--kubernetes", "train-7", "--request-timeout", "1",
                   env={"KUBECONFIG": str(config)}, timeout=60)
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()
    assert proc.returncode == 69, proc.stderr
    assert elapsed < 6, f"took {elapsed:.1f} s"
    assert "timed out" in error_of(proc)["message"]


# -- the kubernetes package is loaded on this path only -------------------------------------------------------------

LOADED_MODULES = """
import sys
from taulib.cli import common, observe
code = common.run_command("tau-observe", observe.cli, sys.argv[1:])
loaded = [m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")]
print(code, "LOADED" if loaded else "CLEAN", file=sys.stderr)
"""


def loads_kubernetes(*args: str, env: dict | None = None) -> tuple[int, str]:
    proc = subprocess.run([str(BIN / "python"), "-c", LOADED_MODULES, *args], capture_output=True, text=True,
                          env=env_for_tests(env), timeout=60)
    code, verdict = proc.stderr.strip().splitlines()[-1].split()
    return int(code), verdict


def test_observing_a_run_does_not_load_the_kubernetes_package_and_observing_a_workload_does(api, workspace):
    run_dir = init_run(workspace)
    assert loads_kubernetes(str(run_dir)) == (0, "CLEAN")
    assert loads_kubernetes(str(run_dir), "-o", "table") == (0, "CLEAN")
    assert loads_kubernetes("--help") == (0, "CLEAN")
    api.stage(k8s_fixtures.job_succeeded())
    assert loads_kubernetes("--kubernetes", "train-7", env={"KUBECONFIG": str(api.config)}) == (0, "LOADED")


# -- usage ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    ([], "give either RUN_DIR or --kubernetes NAME"),
    (["runs/x", "--kubernetes", "a"], "give either RUN_DIR or --kubernetes NAME"),
    (["--kubernetes", "a", "--watch"], "--watch renders a table for people: add -o table"),
    (["runs/x", "-n", "team-a"], "--namespace goes with --kubernetes"),
    (["runs/x", "--watch"], "--watch goes with --kubernetes"),
])
def test_observe_names_its_source_once_and_watch_is_a_table(tmp_path, args, message):
    proc = tau("tau-observe", *args, env={"KUBECONFIG": str(tmp_path / "none")})
    assert proc.returncode == 2, proc.stderr
    assert message in error_of(proc)["message"]
    assert proc.stdout == ""


# -- --watch -------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_watch_renders_each_change_once_and_ends_when_the_workload_ends(api):
    scene = k8s_fixtures.job_pending_in_kueue()
    api.stage(scene)
    proc = subprocess.Popen([str(BIN / "tau-observe"), "--kubernetes", "train-7", "-n", kubeapi.NAMESPACE,
                             "-o", "table", "--watch", "--interval", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_for_tests({"KUBECONFIG": str(api.config)}))
    try:
        first = proc.stdout.readline()
        assert first.startswith("Job train-7 in namespace team-a: pending"), first
        time.sleep(1.0)  # several polls of an unchanged workload print nothing more
        for obj in k8s_fixtures.job_running_with_crashlooping_sidecar()["objects"]:
            api.add(obj)
        time.sleep(1.0)
        for obj in k8s_fixtures.job_succeeded()["objects"]:
            api.add(obj)
        api.remove("Pod", kubeapi.NAMESPACE, "train-7-x8k2p")
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    renders = [first.rstrip("\n")] + [line for line in out.splitlines() if line.startswith("Job train-7 in namespace")]
    states = [line.split(": ", 1)[1].split(" ", 1)[0] for line in renders]
    assert states == ["pending", "running", "succeeded"], renders


@pytest.mark.slow
def test_watch_keeps_going_while_the_api_server_does_not_answer(api, tmp_path):
    closed = kubeapi.closed_port()
    config = api.kubeconfig(tmp_path / "closed", port=closed)
    proc = subprocess.Popen([str(BIN / "tau-observe"), "--kubernetes", "train-7", "-o", "table", "--watch",
                             "--interval", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_for_tests({"KUBECONFIG": str(config)}))
    try:
        first = proc.stdout.readline()
        time.sleep(1.0)
        assert proc.poll() is None, "an unanswered read does not end the watch"
    finally:
        proc.send_signal(2)
        out, err = proc.communicate(timeout=30)
    assert first.startswith(f"cannot read the workload: the Kubernetes API server http://127.0.0.1:{closed} cannot "
                            "be reached (connection refused)"), first
    assert proc.returncode == 130, err
    error = json.loads(err.splitlines()[-1])
    assert error["message"] == "tau-observe: interrupted by SIGINT"
    assert error["error"] == "interrupted" and error["details"]["signal"] == "SIGINT", error
