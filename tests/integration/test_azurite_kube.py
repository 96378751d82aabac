"""tau-bundle-fetch --kubernetes against real Blob storage (Azurite): a bundle sealed under a container's
`runs/r1/out`, found through a Job's or a RayJob's annotations served by the loopback API server (tests/kubeapi.py),
or, for a legacy workload without the artifact-store annotation, through its result PersistentVolumeClaim and the
Azure Blob CSI PersistentVolume bound to it (tests/k8s_fixtures.py; its `server` attribute names the Azurite origin,
trusted through TAU_TRUSTED_BLOB_ENDPOINTS), arrives byte for byte as the generation the workload names."""

from __future__ import annotations

import json

import pytest

import azurite as az
import k8s_fixtures as kf
import kubeapi
from helpers import error_of, tau
from taulib.bundle import kube

pytestmark = pytest.mark.azurite

PREFIX = "runs/r1/out"


azurite_running = az.azurite_running  # the module's fixtures, shared


@pytest.fixture(scope="module")
def sealed(tmp_path_factory) -> dict:
    box = az.new_container()
    root = tmp_path_factory.mktemp("kube") / "out"
    digests = az.make_tree(root, small=5)
    proc = tau("tau-bundle-seal", str(root), "--generation", "k1", "--upload", az.url(box, PREFIX), env=az.env())
    assert proc.returncode == 0, proc.stderr
    store = {"schema_version": kube.STORE_SCHEMA, "account_url": f"{az.origin()}/{az.ACCOUNT}", "container": box}
    return {"digests": digests, "container": box, "annotations": {kube.GENERATION: "k1", kube.STORE: json.dumps(store),
                                                kube.RESULT_PATH: f"/data/{PREFIX}"}}


@pytest.mark.parametrize("kind, ray_crd, extra", [("Job", True, []), ("RayJob", True, ["--generation", "k1"]),
                                                  ("Job", False, ["-o", "table"])])
def test_the_bundle_a_workload_annotates_is_fetched_byte_for_byte(sealed, tmp_path, kind, ray_crd, extra):
    with kubeapi.KubeAPI() as api:
        api.ray_crd = ray_crd
        api.add((kubeapi.job if kind == "Job" else kubeapi.rayjob)("train", sealed["annotations"]))
        proc = tau("tau-bundle-fetch", "--kubernetes", "train", "-n", kubeapi.NAMESPACE, "--destination",
                   str(tmp_path / "dest"), *extra, env=az.env(KUBECONFIG=str(api.kubeconfig(tmp_path / "kc"))))
    assert proc.returncode == 0, proc.stderr
    assert az.tree_digests(tmp_path / "dest") == sealed["digests"]
    if "table" in extra:
        assert proc.stdout.startswith("fetched bundle generation k1: 5 files")
        assert proc.stdout.rstrip("\n").endswith(
            f"workload     {kind} train in namespace {kubeapi.NAMESPACE}\n"
            "store        from its tau.azure.com/artifact-store annotation\n"
            "generation   from its tau.azure.com/artifact-bundle-id annotation")
    else:
        result = json.loads(proc.stdout)
        assert (result["generation"], result["source"]) == ("k1", az.url(sealed["container"], PREFIX))
        assert result["workload"] == {"kind": kind, "name": "train", "namespace": kubeapi.NAMESPACE,
                                      "discovered": "annotation", "pvc": None, "pv": None, "resource_group": None,
                                      "generation_from": "annotation"}


# -- legacy workloads: the store discovered from the result PVC and its PV -------------------------------------------

def legacy_fetch(tmp_path, kind: str, annotations: dict, source: dict, *args: str):
    """Serve the workload `train` (without the artifact-store annotation), its claim and its Blob volume; fetch."""
    claim = kf.pvc("results-pvc")
    with kubeapi.KubeAPI() as api:
        api.add((kubeapi.job if kind == "Job" else kubeapi.rayjob)("train", annotations))
        api.add(claim)
        api.add(kf.pv("pv-blob-results", claim, source))
        proc = tau("tau-bundle-fetch", "--kubernetes", "train", "--destination", str(tmp_path / "dest"), *args,
                   env=az.env(KUBECONFIG=str(api.kubeconfig(tmp_path / "kc"))))
        reads = [r for r in api.requests if "persistentvolume" in r]
    assert reads == [f"/api/v1/namespaces/{kubeapi.NAMESPACE}/persistentvolumeclaims/results-pvc",
                     "/api/v1/persistentvolumes/pv-blob-results"]
    return proc


def legacy_annotations(generation: str | None = "k1") -> dict:
    out = {kube.RESULT_PATH: f"/data/{PREFIX}", kube.RESULT_PVC: "results-pvc"}
    return {**out, kube.GENERATION: generation} if generation else out


@pytest.mark.parametrize("kind", ["Job", "RayJob"])
def test_the_bundle_of_a_legacy_workload_is_found_from_its_blob_pvc_and_fetched_byte_for_byte(sealed, tmp_path,
                                                                                              kind):
    volume = kf.blob_csi(az.ACCOUNT, sealed["container"], "rg-tau", server=az.origin())
    proc = legacy_fetch(tmp_path, kind, legacy_annotations(), volume)
    assert proc.returncode == 0, proc.stderr
    assert az.tree_digests(tmp_path / "dest") == sealed["digests"]
    result = json.loads(proc.stdout)
    assert (result["generation"], result["source"]) == ("k1", az.url(sealed["container"], PREFIX))
    assert result["workload"] == {"kind": kind, "name": "train", "namespace": kubeapi.NAMESPACE,
                                  "discovered": "pvc", "pvc": "results-pvc", "pv": "pv-blob-results",
                                  "resource_group": "rg-tau", "generation_from": "annotation"}


def test_a_legacy_workload_without_a_generation_follows_the_current_pointer_only_when_asked(sealed, tmp_path):
    # a dynamically provisioned volume: the handle names the account and the container, the attributes the server
    volume = kf.blob_csi(handle=f"mc_rg#{az.ACCOUNT}#{sealed['container']}#8d1f-uuid",
                         attributes={"protocol": "fuse", "server": az.origin()})
    proc = legacy_fetch(tmp_path, "Job", legacy_annotations(None), volume, "--current", "-o", "table")
    assert proc.returncode == 0, proc.stderr
    assert az.tree_digests(tmp_path / "dest") == sealed["digests"]
    assert proc.stdout.startswith("fetched bundle generation k1: 5 files")
    assert proc.stdout.rstrip("\n").endswith(
        f"workload     Job train in namespace {kubeapi.NAMESPACE}\n"
        "store        from PersistentVolumeClaim results-pvc, PersistentVolume pv-blob-results (resource group "
        "mc_rg)\n"
        "generation   from the pointer .tau/current")


def test_a_generation_named_for_a_legacy_workload_is_still_verified(sealed, tmp_path):
    volume = kf.blob_csi(az.ACCOUNT, sealed["container"], server=az.origin())
    proc = legacy_fetch(tmp_path, "Job", legacy_annotations(None), volume, "--generation", "k9")
    assert proc.returncode == 1, proc.stderr
    assert error_of(proc)["message"].startswith(f"tau-bundle-fetch: {az.url(sealed['container'], PREFIX)}: "
                                                "generation 'k9' is not acknowledged: it has no completion marker")
    assert not (tmp_path / "dest").exists()
