"""Where a Kubernetes workload's bundle is (taulib.bundle.kube, tau-bundle-fetch --kubernetes): the real kubernetes
client against a loopback API server (tests/kubeapi.py) that answers as the API does.

Fetches that succeed need Blob storage: tests/integration/test_azurite_kube.py. Here, what is resolved and every
refusal, each shown to leave no destination behind (and, for an untrusted store, to make no Blob request).
Workloads without the artifact-store annotation (found from the result PVC and PV): tests/test_bundle_kube_legacy.py.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

import kubeapi
from helpers import COMMANDS, PYTHON, error_of, tau
from taulib.bundle import kube

STORE = {"schema_version": "tau.run.blob-volume.v1", "account_url": "https://acct.blob.core.windows.net",
         "container": "results"}


def annotations(store: object = None, result_path: str = "/data/runs/r1/out", generation: str = "g7") -> dict:
    text = store if isinstance(store, str) else json.dumps(STORE if store is None else store)
    return {kube.GENERATION: generation, kube.STORE: text, kube.RESULT_PATH: result_path,
            "tau.azure.com/result-pvc": "results-pvc"}


@pytest.fixture
def api(tmp_path):
    with kubeapi.KubeAPI() as server:
        server.config = server.kubeconfig(tmp_path / "kubeconfig")
        yield server


def fetch(api, tmp_path, name: str = "train", *args: str, env: dict | None = None):
    proc = tau("tau-bundle-fetch", "--kubernetes", name, "--destination", str(tmp_path / "dest"), *args,
               env={"KUBECONFIG": str(api.config), **(env or {})}, timeout=60)
    assert not (tmp_path / "dest").exists(), "a refused fetch left a destination behind"
    return proc


# -- what is resolved -----------------------------------------------------------------------------------------------

def test_a_jobs_annotations_resolve_to_the_blob_url_of_its_result_path_and_its_generation(api):
    api.add(kubeapi.job("train", annotations()))
    found = kube.resolve("train", None, {"KUBECONFIG": str(api.config)})
    assert found == {"url": "https://acct.blob.core.windows.net/results/runs/r1/out", "generation": "g7",
                     "generation_from": "annotation", "discovered": "annotation", "pvc": None, "pv": None,
                     "resource_group": None, "kind": "Job", "name": "train", "namespace": kubeapi.NAMESPACE}
    # the annotation is the store: no PersistentVolumeClaim or PersistentVolume is read
    assert api.requests == [f"/apis/batch/v1/namespaces/{kubeapi.NAMESPACE}/jobs/train",
                            f"/apis/ray.io/v1/namespaces/{kubeapi.NAMESPACE}/rayjobs/train"]


def test_a_rayjobs_annotations_resolve_the_same_way_in_the_namespace_asked_for(api):
    api.add(kubeapi.rayjob("tune", annotations(generation="r3"), namespace="other"))
    found = kube.resolve("tune", "other", {"KUBECONFIG": str(api.config)})
    assert (found["url"], found["generation"], found["kind"], found["namespace"]) == \
        ("https://acct.blob.core.windows.net/results/runs/r1/out", "r3", "RayJob", "other")


def test_a_job_resolves_when_the_rayjob_crd_is_not_installed(api):
    api.ray_crd = False
    api.add(kubeapi.job("train", annotations()))
    assert kube.resolve("train", None, {"KUBECONFIG": str(api.config)})["kind"] == "Job"


def test_a_rayjob_resolves_beside_its_own_submitter_job_of_the_same_name(api):
    ray = kubeapi.rayjob("tune", annotations(generation="r5"))
    submitter = kubeapi.job("tune", {})  # KubeRay names the submitter Job after the RayJob and owns it
    submitter["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "tune",
                                                 "uid": ray["metadata"]["uid"], "controller": True}]
    api.add(ray)
    api.add(submitter)
    found = kube.resolve("tune", None, {"KUBECONFIG": str(api.config)})
    assert (found["kind"], found["generation"]) == ("RayJob", "r5")


# -- refusals -------------------------------------------------------------------------------------------------------

def test_a_job_and_a_rayjob_of_the_same_name_are_ambiguous_and_exit_2(api, tmp_path):
    api.add(kubeapi.job("train", annotations()))
    api.add(kubeapi.rayjob("train", annotations()))
    proc = fetch(api, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "ambiguous: both a Job and a RayJob are named 'train'" in error_of(proc)["message"]


@pytest.mark.parametrize("denied", ["jobs", "rayjobs"])
def test_a_forbidden_read_is_access_denied_with_exit_77_never_not_found(api, tmp_path, denied):
    api.deny.add(denied)
    api.add(kubeapi.job("train", annotations()))
    proc = fetch(api, tmp_path)
    assert proc.returncode == 77, proc.stderr
    message = error_of(proc)["message"]
    assert "access denied by Kubernetes RBAC" in message and "not found" not in message


def test_no_job_and_no_rayjob_of_that_name_is_not_found_with_exit_66(api, tmp_path):
    api.ray_crd = False
    proc = fetch(api, tmp_path, "gone")
    assert proc.returncode == 66, proc.stderr
    assert f"no Job or RayJob named 'gone' in namespace '{kubeapi.NAMESPACE}'" in error_of(proc)["message"]


def test_an_unreachable_api_server_exits_69_within_seconds(api, tmp_path):

    closed = kubeapi.closed_port()
    api.config = api.kubeconfig(tmp_path / "closed-kubeconfig", port=closed)
    started = time.monotonic()
    proc = fetch(api, tmp_path)
    assert time.monotonic() - started < 10
    assert proc.returncode == 69, proc.stderr
    assert "the API server cannot be reached" in error_of(proc)["message"]


def test_an_api_server_error_is_unavailable_with_exit_69(api, tmp_path):
    api.broken.add("rayjobs")
    api.add(kubeapi.job("train", annotations()))
    proc = fetch(api, tmp_path)
    assert proc.returncode == 69, proc.stderr
    assert "answered HTTP 500" in error_of(proc)["message"]


def test_a_workload_without_the_bundle_annotations_fails_the_check_with_exit_1(api, tmp_path):
    api.add(kubeapi.job("plain", {"tau.azure.com/result-path": "/data/out"}))
    proc = fetch(api, tmp_path, "plain")
    assert proc.returncode == 1, proc.stderr
    message = error_of(proc)["message"]
    assert "the Job 'plain'" in message and "carries no bundle annotation" in message
    assert kube.GENERATION in message and kube.STORE in message
    assert f"and no {kube.RESULT_PVC} to discover its store from" in message


@pytest.mark.parametrize("account_url", ["https://evil.example", "LOOPBACK",
                                         "https://acct.blob.core.windows.net/results"])
def test_an_untrusted_artifact_store_is_refused_with_exit_77_before_any_blob_request(api, tmp_path, account_url):
    with kubeapi.KubeAPI() as blob_host:  # stands in for a Blob endpoint: it must never be asked anything
        if account_url == "LOOPBACK":
            account_url = f"http://127.0.0.1:{blob_host.port}/devstoreaccount1"
        api.add(kubeapi.job("train", annotations({**STORE, "account_url": account_url})))
        proc = fetch(api, tmp_path, env={"TAU_TRUSTED_BLOB_ENDPOINTS": "", "AZURE_STORAGE_CONNECTION_STRING": ""})
        assert blob_host.requests == []
    assert proc.returncode == 77, proc.stderr
    assert error_of(proc)["error"] == "refused"


@pytest.mark.parametrize("result_path, message", [
    ("/data", "an empty or root prefix"),
    ("/data/", "an empty or root prefix"),
    ("/data/../etc", "not a normalized absolute path under /data"),
    ("/srv/out", "not under /data"),
    ("/database/out", "not under /data"),
    ("data/out", "not a normalized absolute path under /data"),
])
def test_a_result_path_that_is_not_strictly_below_data_is_refused_with_exit_77(api, tmp_path, result_path, message):
    api.add(kubeapi.job("train", annotations(result_path=result_path)))
    proc = fetch(api, tmp_path)
    assert proc.returncode == 77, proc.stderr
    assert message in error_of(proc)["message"]


@pytest.mark.parametrize("store", [
    "{not json",
    json.dumps([STORE]),
    json.dumps({**STORE, "schema_version": "tau.run.blob-volume.v2"}),
    json.dumps({**STORE, "sas": "sig=abc"}),
    json.dumps({k: v for k, v in STORE.items() if k != "container"}),
    json.dumps({**STORE, "container": ""}),
    json.dumps({**STORE, "container": "results/../other"}),
])
def test_a_malformed_artifact_store_annotation_is_bad_input_with_exit_65(api, tmp_path, store):
    api.add(kubeapi.job("train", annotations(store)))
    proc = fetch(api, tmp_path)
    assert proc.returncode == 65, proc.stderr
    assert f"the {kube.STORE} annotation of the Job 'train'" in error_of(proc)["message"]


def test_a_generation_other_than_the_annotated_one_is_a_conflict_with_exit_73(api, tmp_path):
    api.add(kubeapi.job("train", annotations()))
    proc = fetch(api, tmp_path, "train", "--generation", "g8")
    assert proc.returncode == 73, proc.stderr
    assert "--generation 'g8' is not the generation 'g7' the Job 'train' carries" in error_of(proc)["message"]


def test_current_beside_an_annotated_generation_is_a_usage_error_with_exit_2(api, tmp_path):
    api.add(kubeapi.job("train", annotations()))
    proc = fetch(api, tmp_path, "train", "--current")
    assert proc.returncode == 2, proc.stderr
    assert error_of(proc)["message"] == (
        f"tau-bundle-fetch: --current follows the mutable pointer .tau/current, but the Job 'train' in namespace "
        f"'{kubeapi.NAMESPACE}' names its generation 'g7' ({kube.GENERATION}): drop --current")


@pytest.mark.parametrize("args, message", [
    (["https://acct.blob.core.windows.net/c/p", "--kubernetes", "train"], "--kubernetes names the source: give no "
     "SOURCE"),
    (["--kubernetes", "train", "--run", "runs/x"], "--kubernetes and --run exclude each other"),
    (["--kubernetes", "train", "--shard", "shard-00000"], "--shard goes with --run"),
    (["https://acct.blob.core.windows.net/c/p", "-n", "team-a"], "--namespace goes with --kubernetes"),
])
def test_kubernetes_names_the_source_alone_and_namespace_goes_with_it(tmp_path, args, message):
    proc = tau("tau-bundle-fetch", *args, "--destination", str(tmp_path / "dest"),
               env={"KUBECONFIG": str(tmp_path / "absent")})
    assert proc.returncode == 2, proc.stderr
    assert message in error_of(proc)["message"]
    assert not (tmp_path / "dest").exists()


def test_an_unreadable_kubeconfig_is_bad_input_with_exit_65(tmp_path):
    (tmp_path / "kubeconfig").write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    proc = tau("tau-bundle-fetch", "--kubernetes", "train", "--destination", str(tmp_path / "dest"),
               env={"KUBECONFIG": str(tmp_path / "kubeconfig")})
    assert proc.returncode == 65, proc.stderr
    assert "the kubeconfig" in error_of(proc)["message"]


# -- the kubernetes package stays off every other path --------------------------------------------------------------

CHECK_IMPORTS = """
import importlib, sys
from taulib.cli import common
name, module = sys.argv[1], sys.argv[2]
assert common.run_command(name, importlib.import_module(module).cli, ["--help"]) == 0
loaded = sorted(m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes."))
print("LOADED" if loaded else "CLEAN", file=sys.stderr)
"""


@pytest.mark.parametrize("command", ["tau-bundle-fetch", "tau-bundle-seal", "tau-bundle-verify", *COMMANDS])
def test_help_of_a_command_does_not_load_the_kubernetes_package(command):
    module = "taulib.cli." + {"tau-bundle-fetch": "bundle_fetch", "tau-bundle-seal": "bundle_seal",
                              "tau-bundle-verify": "bundle_verify"}.get(command, command.removeprefix("tau-"))
    proc = subprocess.run([PYTHON, "-c", CHECK_IMPORTS, command, module], capture_output=True, text=True,
                          timeout=60)
    assert proc.stderr.strip().splitlines()[-1] == "CLEAN", proc.stderr
    assert "Usage:" in proc.stdout
