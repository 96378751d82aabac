"""tau-bundle-fetch --kubernetes against real Blob storage (Azurite): a bundle sealed under a container's
`runs/r1/out`, found through a Job's or a RayJob's annotations served by the loopback API server (tests/kubeapi.py),
arrives byte for byte as the generation the workload names."""

from __future__ import annotations

import json

import pytest

import azurite as az
import kubeapi
from helpers import tau
from taulib.bundle import kube

PREFIX = "runs/r1/out"


@pytest.fixture(scope="module", autouse=True)
def azurite_running():
    yield from az.session_fixture()


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
        assert proc.stdout.rstrip("\n").endswith(f"workload     {kind} train in namespace {kubeapi.NAMESPACE}")
    else:
        result = json.loads(proc.stdout)
        assert (result["generation"], result["source"]) == ("k1", az.url(sealed["container"], PREFIX))
        assert result["workload"] == {"kind": kind, "name": "train", "namespace": kubeapi.NAMESPACE}
