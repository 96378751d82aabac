"""Legacy discovery (taulib.bundle.kube, tau-bundle-fetch --kubernetes): a Job or RayJob without the
tau.azure.com/artifact-store annotation, resolved read-only from its result PersistentVolumeClaim and the Azure Blob
CSI PersistentVolume it is bound to, by Tau's artifact-store controller's rules. The real kubernetes client against
the loopback API server (tests/kubeapi.py), the objects shaped as the driver's (tests/k8s_fixtures.py).

Fetches that succeed need Blob storage: tests/integration/test_azurite_kube.py. Here, what is resolved, and every
refusal with its exit code and message, each shown to leave no destination behind and, for an untrusted endpoint,
to contact nothing.
"""

from __future__ import annotations

import json

import pytest

import k8s_fixtures as kf
import kubeapi
from helpers import Listener, error_of, tau
from taulib.bundle import kube
from taulib.errors import Busy, Refused, UsageError

NS = kubeapi.NAMESPACE
PVC_PATH = f"/api/v1/namespaces/{NS}/persistentvolumeclaims/results-pvc"
PV_PATH = "/api/v1/persistentvolumes/pv-blob-results"


def legacy(result_path: str = "/data/runs/r1/out", generation: str | None = "g7", pvc: str = "results-pvc") -> dict:
    """A workload's annotations without the artifact-store annotation (what Tau stamped before its controller)."""
    out = {kube.RESULT_PATH: result_path, kube.RESULT_PVC: pvc, "tau.azure.com/managed-by": "tau"}
    if generation is not None:
        out[kube.GENERATION] = generation
    return out


@pytest.fixture
def api(tmp_path):
    with kubeapi.KubeAPI() as server:
        server.config = server.kubeconfig(tmp_path / "kubeconfig")
        yield server


def serve(api, source: dict | None = None, *, claim: dict | None = None, annotations: dict | None = None,
          kind: str = "Job") -> None:
    """The workload `train`, its claim `results-pvc` and the volume `pv-blob-results` bound to it."""
    claim = claim if claim is not None else kf.pvc("results-pvc")
    api.add((kubeapi.job if kind == "Job" else kubeapi.rayjob)("train", legacy() if annotations is None
                                                                else annotations))
    api.add(claim)
    api.add(kf.pv("pv-blob-results", claim, source))


def resolve(api, env: dict | None = None, **options) -> dict:
    return kube.resolve("train", None, {"KUBECONFIG": str(api.config), **(env or {})}, **options)


def fetch(api, tmp_path, *args: str, env: dict | None = None):
    proc = tau("tau-bundle-fetch", "--kubernetes", "train", "--destination", str(tmp_path / "dest"), *args,
               env={"KUBECONFIG": str(api.config), "TAU_TRUSTED_BLOB_ENDPOINTS": "",
                    "AZURE_STORAGE_CONNECTION_STRING": "", **(env or {})}, timeout=60)
    assert not (tmp_path / "dest").exists(), "a refused fetch left a destination behind"
    return proc


def message_of(proc) -> str:
    return error_of(proc)["message"].removeprefix("tau-bundle-fetch: ")


def test_a_job_without_the_store_annotation_resolves_from_its_result_pvc_and_its_blob_pv(api):
    serve(api)
    found = resolve(api)
    assert found == {"url": "https://tauresults.blob.core.windows.net/results/runs/r1/out", "generation": "g7",
                     "generation_from": "annotation", "discovered": "pvc", "pvc": "results-pvc",
                     "pv": "pv-blob-results", "resource_group": "rg-tau", "kind": "Job", "name": "train",
                     "namespace": NS}
    assert api.requests == [f"/apis/batch/v1/namespaces/{NS}/jobs/train",
                            f"/apis/ray.io/v1/namespaces/{NS}/rayjobs/train", PVC_PATH, PV_PATH]


def test_a_rayjob_without_the_store_annotation_resolves_the_same_way(api):
    serve(api, kind="RayJob")
    found = resolve(api)
    assert (found["kind"], found["discovered"], found["url"]) == \
        ("RayJob", "pvc", "https://tauresults.blob.core.windows.net/results/runs/r1/out")


@pytest.mark.parametrize("source, url, resource_group", [
    # dynamically provisioned: the attributes say little, the handle RESOURCEGROUP#ACCOUNT#CONTAINER#UUID the rest
    (kf.blob_csi(handle="mc_rg#pvcacct01#pvc-0f3a#5a1c-uuid", attributes={"protocol": "fuse"}),
     "https://pvcacct01.blob.core.windows.net/pvc-0f3a/runs/r1/out", "mc_rg"),
    # an opaque static handle gives nothing: the attributes name the account and the container
    (kf.blob_csi(handle="tauresults_results"), "https://tauresults.blob.core.windows.net/results/runs/r1/out",
     "rg-tau"),
    (kf.blob_csi(handle="tauresults_results", attributes={"storageAccount": "tauresults",
                                                           "containerName": "results"}),
     "https://tauresults.blob.core.windows.net/results/runs/r1/out", None),
    # the attributes win over the handle
    (kf.blob_csi(handle="rg-old#oldacct#old"), "https://tauresults.blob.core.windows.net/results/runs/r1/out",
     "rg-tau"),
    # names are case-folded (AKS's examples spell storageaccount), and equal case variants agree
    (kf.blob_csi(handle="x", attributes={"storageaccount": "tauresults", "ContainerName": "results",
                                          "containerName": "results"}),
     "https://tauresults.blob.core.windows.net/results/runs/r1/out", None),
    (kf.blob_csi(storageEndpointSuffix="core.usgovcloudapi.net"),
     "https://tauresults.blob.core.usgovcloudapi.net/results/runs/r1/out", "rg-tau"),
    (kf.blob_csi(server="tauresults.blob.core.chinacloudapi.cn"),
     "https://tauresults.blob.core.chinacloudapi.cn/results/runs/r1/out", "rg-tau"),
    # a private endpoint, as the driver documents `server` for one
    (kf.blob_csi(server="tauresults.privatelink.blob.core.windows.net"),
     "https://tauresults.privatelink.blob.core.windows.net/results/runs/r1/out", "rg-tau"),
    (kf.blob_csi(server="https://TauResults.blob.core.windows.net/", storageEndpointSuffix="core.evil.example"),
     "https://tauresults.blob.core.windows.net/results/runs/r1/out", "rg-tau"),
])
def test_the_account_the_container_and_the_server_follow_the_controllers_rules(api, source, url, resource_group):
    serve(api, source)
    found = resolve(api)
    assert (found["url"], found["resource_group"]) == (url, resource_group)


def test_a_server_that_is_a_trusted_origin_is_used_path_style(api):
    serve(api, kf.blob_csi(account="devstoreaccount1", server="http://127.0.0.1:10100"))
    found = resolve(api, {"TAU_TRUSTED_BLOB_ENDPOINTS": "http://127.0.0.1:10100"})
    assert found["url"] == "http://127.0.0.1:10100/devstoreaccount1/results/runs/r1/out"


def test_a_legacy_workload_without_a_generation_takes_the_one_named_or_the_current_pointer_explicitly(api):
    serve(api, annotations=legacy(generation=None))
    assert (resolve(api, generation="g3")["generation"], resolve(api, generation="g3")["generation_from"]) == \
        ("g3", "option")
    assert {k: v for k, v in resolve(api, current=True).items() if k.startswith("generation")} == \
        {"generation": None, "generation_from": "current"}


def test_a_legacy_workload_without_a_generation_needs_one_named_before_any_volume_is_read(api, tmp_path):
    serve(api, annotations=legacy(generation=None))
    proc = fetch(api, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert message_of(proc) == (
        f"the Job 'train' in namespace '{NS}' names no generation (it carries no {kube.GENERATION}: it predates "
        "Tau's bundle acknowledgement): name one with --generation G, or follow the mutable pointer .tau/current "
        "explicitly with --current")
    assert PVC_PATH not in api.requests


def test_the_store_annotation_wins_and_no_volume_is_read_even_when_a_result_pvc_is_named(api):
    store = {"schema_version": kube.STORE_SCHEMA, "account_url": "https://other.blob.core.windows.net",
             "container": "bundles"}
    serve(api, annotations={**legacy(), kube.STORE: json.dumps(store)})
    found = resolve(api)
    assert (found["discovered"], found["url"], found["pvc"], found["pv"]) == \
        ("annotation", "https://other.blob.core.windows.net/bundles/runs/r1/out", None, None)
    assert PVC_PATH not in api.requests and PV_PATH not in api.requests


def test_a_store_annotation_without_a_generation_takes_the_one_named_like_a_legacy_workload(api):
    store = {"schema_version": kube.STORE_SCHEMA, "account_url": "https://other.blob.core.windows.net",
             "container": "bundles"}
    api.add(kubeapi.job("train", {kube.STORE: json.dumps(store), kube.RESULT_PATH: "/data/runs/r1/out"}))
    found = resolve(api, generation="g4")
    assert (found["discovered"], found["generation"], found["generation_from"]) == ("annotation", "g4", "option")
    with pytest.raises(UsageError, match="names no generation"):
        resolve(api)


def test_a_malformed_store_annotation_never_falls_back_to_the_volume(api, tmp_path):
    serve(api, annotations={**legacy(), kube.STORE: "{not json"})
    proc = fetch(api, tmp_path)
    assert proc.returncode == 65, proc.stderr
    assert message_of(proc).startswith(f"the {kube.STORE} annotation of the Job 'train' in namespace '{NS}' is not")
    assert PVC_PATH not in api.requests


# -- refusals: the volume -------------------------------------------------------------------------------------------

def test_a_pvc_of_another_csi_driver_is_refused_with_exit_77_naming_the_driver(api, tmp_path):
    serve(api, {"csi": {"driver": "file.csi.azure.com", "volumeHandle": "rg-tau#tauresults#share#",
                        "volumeAttributes": {"shareName": "results", "storageAccount": "tauresults"}}})
    proc = fetch(api, tmp_path)
    assert proc.returncode == 77, proc.stderr
    assert message_of(proc) == ("the PersistentVolume 'pv-blob-results' of PersistentVolumeClaim 'results-pvc' uses "
                                "CSI driver 'file.csi.azure.com': only the Azure Blob CSI driver "
                                "'blob.csi.azure.com' is supported")
    assert error_of(proc)["details"]["driver"] == "file.csi.azure.com"


def test_a_volume_that_is_not_csi_is_refused_with_exit_77_naming_its_source(api, tmp_path):
    serve(api, {"nfs": {"server": "nfs.example", "path": "/exports/results"}})
    proc = fetch(api, tmp_path)
    assert proc.returncode == 77, proc.stderr
    assert message_of(proc) == ("the PersistentVolume 'pv-blob-results' of PersistentVolumeClaim 'results-pvc' is "
                                "not a CSI volume (its source: nfs): only the Azure Blob CSI driver "
                                "'blob.csi.azure.com' is supported")


def test_conflicting_case_variants_of_an_attribute_are_bad_input_with_exit_65(api, tmp_path):
    serve(api, kf.blob_csi(containername="other"))
    proc = fetch(api, tmp_path)
    assert proc.returncode == 65, proc.stderr
    assert message_of(proc) == ("the volumeAttributes of PersistentVolume 'pv-blob-results' hold 'containerName' "
                                "('results') and 'containername' ('other'): case variants of one attribute, which "
                                "the driver reads case-insensitively, that conflict")


@pytest.mark.parametrize("source, message", [
    (kf.blob_csi(handle="opaque-id", attributes={"containerName": "results"}),
     "the PersistentVolume 'pv-blob-results' names no storage account: no storageAccount volume attribute, and no "
     "volumeHandle RESOURCEGROUP#ACCOUNT#CONTAINER"),
    (kf.blob_csi(handle="rg#tauresults#", attributes={}),
     "the PersistentVolume 'pv-blob-results' names no storage container: no containerName volume attribute, and no "
     "volumeHandle RESOURCEGROUP#ACCOUNT#CONTAINER"),
    (kf.blob_csi(container="results/../other"),
     "the PersistentVolume 'pv-blob-results' names container 'results/../other', which holds a path separator"),
    (kf.blob_csi(container="results\\x"),
     "the PersistentVolume 'pv-blob-results' names container 'results\\\\x', which holds a path separator"),
])
def test_a_volume_without_an_account_or_a_sound_container_is_bad_input_with_exit_65(api, tmp_path, source, message):
    serve(api, source)
    proc = fetch(api, tmp_path)
    assert proc.returncode == 65, proc.stderr
    assert message_of(proc) == message


@pytest.mark.parametrize("claim, phase", [(kf.pvc("results-pvc", None, phase="Pending"), "'Pending'"),
                                          (kf.pvc("results-pvc", "pv-blob-results", phase="Pending"),
                                           "'Pending', spec.volumeName 'pv-blob-results'")])
def test_an_unbound_pvc_is_not_known_yet_with_exit_75(api, tmp_path, claim, phase):
    serve(api, claim=claim)
    proc = fetch(api, tmp_path)
    assert proc.returncode == 75, proc.stderr
    assert message_of(proc) == (f"the PersistentVolumeClaim 'results-pvc' in namespace '{NS}' is not bound to a "
                                f"PersistentVolume (status.phase {phase}): its store is not known until it is bound")
    assert PV_PATH not in api.requests


def test_a_volume_bound_to_another_claim_is_refused_with_exit_77(api, tmp_path):
    serve(api)
    other = kf.pvc("someone-elses", namespace="team-b")
    api.add(kf.pv("pv-blob-results", other))  # the claim names it, but the volume was bound to team-b's claim
    proc = fetch(api, tmp_path)
    assert proc.returncode == 77, proc.stderr
    assert message_of(proc) == (f"the PersistentVolume 'pv-blob-results' that PersistentVolumeClaim 'results-pvc' in "
                                f"namespace '{NS}' names is bound to claim team-b/someone-elses, not to that claim: "
                                "refusing a volume that is not the claim's")


def test_a_missing_pv_is_not_found_with_exit_66_naming_it(api, tmp_path):
    serve(api)
    api.remove("PersistentVolume", "", "pv-blob-results")
    proc = fetch(api, tmp_path)
    assert proc.returncode == 66, proc.stderr
    assert message_of(proc) == (f"the PersistentVolume 'pv-blob-results' that PersistentVolumeClaim 'results-pvc' in "
                                f"namespace '{NS}' is bound to does not exist")
    assert error_of(proc)["details"] == {"pv": "pv-blob-results", "pvc": "results-pvc"}


def test_a_missing_pvc_is_not_found_with_exit_66_naming_it(api, tmp_path):
    serve(api)
    api.remove("PersistentVolumeClaim", NS, "results-pvc")
    proc = fetch(api, tmp_path)
    assert proc.returncode == 66, proc.stderr
    assert message_of(proc) == (f"the PersistentVolumeClaim 'results-pvc' in namespace '{NS}', the "
                                f"{kube.RESULT_PVC} of the Job 'train' in namespace '{NS}', does not exist")
    assert PV_PATH not in api.requests


# -- refusals: access -----------------------------------------------------------------------------------------------

def test_a_denied_pv_read_is_access_denied_with_exit_77_never_not_found(api, tmp_path):
    serve(api)
    api.deny.add("persistentvolumes")
    proc = fetch(api, tmp_path)
    assert proc.returncode == 77, proc.stderr
    message = message_of(proc)
    assert message.startswith("access denied by Kubernetes RBAC reading the PersistentVolume 'pv-blob-results' "
                              "(HTTP 403): ")
    assert message.endswith("a denied read says nothing about whether it exists: ask for get on persistentvolumes "
                            "(cluster-scoped: a ClusterRole and a ClusterRoleBinding), or for Tau's artifact-store "
                            f"controller to stamp the workload's {kube.STORE} annotation, which needs no "
                            "PersistentVolume read")
    assert "not found" not in message and "does not exist" not in message
    assert error_of(proc)["details"] == {"pv": "pv-blob-results"}


def test_a_denied_pvc_read_is_access_denied_with_exit_77_never_not_found(api, tmp_path):
    serve(api)
    api.deny.add("persistentvolumeclaims")
    proc = fetch(api, tmp_path)
    assert proc.returncode == 77, proc.stderr
    message = message_of(proc)
    assert message.startswith(f"access denied by Kubernetes RBAC reading the PersistentVolumeClaim 'results-pvc' in "
                              f"namespace '{NS}' (HTTP 403): ")
    assert message.endswith("a denied read says nothing about whether it exists: ask for get on "
                            f"persistentvolumeclaims in namespace '{NS}'")
    assert "not found" not in message and "does not exist" not in message
    assert PV_PATH not in api.requests


@pytest.mark.parametrize("broken, what", [("persistentvolumeclaims", "PersistentVolumeClaim 'results-pvc'"),
                                          ("persistentvolumes", "PersistentVolume 'pv-blob-results'")])
def test_an_api_server_error_reading_the_volume_is_unavailable_with_exit_69(api, tmp_path, broken, what):
    serve(api)
    api.broken.add(broken)
    proc = fetch(api, tmp_path)
    assert proc.returncode == 69, proc.stderr
    assert f"the API server answered HTTP 500 reading the {what}" in message_of(proc)
    assert message_of(proc).endswith("try again when it answers")


# -- refusals: the endpoint, before any Blob request ----------------------------------------------------------------

def test_an_untrusted_account_suffix_is_refused_with_exit_77_and_nothing_is_contacted(api, tmp_path):
    serve(api, kf.blob_csi(storageEndpointSuffix="core.evil.example"))
    with Listener() as proxy:  # every Blob request an SDK made would go through it
        proxy_url = f"http://127.0.0.1:{proxy.port}"
        proc = fetch(api, tmp_path, env={"HTTPS_PROXY": proxy_url, "HTTP_PROXY": proxy_url,
                                         "https_proxy": proxy_url, "http_proxy": proxy_url,
                                         "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})
        assert proxy.connections == 0
    assert proc.returncode == 77, proc.stderr
    assert message_of(proc) == (
        "blob URL 'https://tauresults.blob.core.evil.example/results/runs/r1/out' is not an Azure Blob storage "
        "endpoint (ACCOUNT.blob.core.windows.net, or the government or China cloud); list a trusted endpoint in "
        "TAU_TRUSTED_BLOB_ENDPOINTS (discovered from PersistentVolume 'pv-blob-results' of PersistentVolumeClaim "
        "'results-pvc')")
    assert error_of(proc)["details"] == {"host": "tauresults.blob.core.evil.example", "pv": "pv-blob-results"}


@pytest.mark.parametrize("server, message", [
    ("LISTENER", "has server 'LISTENER', which is not https; only https, or an origin listed in "
                 "TAU_TRUSTED_BLOB_ENDPOINTS, is contacted"),
    ("LISTENER/devstoreaccount1", "has server 'LISTENER/devstoreaccount1', which has a path: it must be an origin"),
    ("https://user@tauresults.blob.core.windows.net", "has server 'https://user@tauresults.blob.core.windows.net', "
     "which carries user information"),
    ("https://tauresults.blob.core.windows.net?sv=2024&sig=x", "has server "
     "'https://tauresults.blob.core.windows.net?sv=2024&sig=x', which has a query or a fragment"),
    ("tauresults.blob.core.windows.net:443/x", "has server 'tauresults.blob.core.windows.net:443/x', which is "
     "neither a host name (such as ACCOUNT.blob.core.windows.net) nor an https origin"),
])
def test_a_server_that_is_not_an_https_origin_is_refused_with_exit_77_and_nothing_is_contacted(api, tmp_path, server,
                                                                                              message):
    with Listener() as blob_host:
        listener = f"http://127.0.0.1:{blob_host.port}"
        serve(api, kf.blob_csi(account="devstoreaccount1", server=server.replace("LISTENER", listener)))
        proc = fetch(api, tmp_path)
        assert blob_host.connections == 0
    assert proc.returncode == 77, proc.stderr
    assert message_of(proc) == "the PersistentVolume 'pv-blob-results' " + message.replace("LISTENER", listener)


@pytest.mark.parametrize("server, message", [
    ("https://attacker.example", "blob URL 'https://attacker.example/results/runs/r1/out' is not an Azure Blob "
     "storage endpoint"),
    ("tauresults.privatelink.evil.example", "blob URL "
     "'https://tauresults.privatelink.evil.example/results/runs/r1/out' is not an Azure Blob storage endpoint"),
    # a private endpoint's name is trusted, but only as the account the volume names
    ("otheracct.privatelink.blob.core.windows.net", "the PersistentVolume 'pv-blob-results' names storage account "
     "'tauresults', but its endpoint 'https://otheracct.privatelink.blob.core.windows.net' is that of account "
     "'otheracct'"),
    ("https://otheracct.blob.core.windows.net", "the PersistentVolume 'pv-blob-results' names storage account "
     "'tauresults', but its endpoint 'https://otheracct.blob.core.windows.net' is that of account 'otheracct'"),
])
def test_a_server_of_no_trusted_endpoint_or_of_another_account_is_refused_with_exit_77(api, tmp_path, server,
                                                                                       message):
    serve(api, kf.blob_csi(server=server))
    proc = fetch(api, tmp_path)
    assert proc.returncode == 77, proc.stderr
    assert message_of(proc).startswith(message)


def test_a_result_path_of_data_itself_is_refused_with_exit_77_before_the_claim_is_read(api, tmp_path):
    serve(api, annotations=legacy(result_path="/data"))
    proc = fetch(api, tmp_path)
    assert proc.returncode == 77, proc.stderr
    assert message_of(proc) == (f"the {kube.RESULT_PATH} annotation of the Job 'train' in namespace '{NS}' is "
                                "'/data': an empty or root prefix; a bundle never spans a whole container")
    assert PVC_PATH not in api.requests


# -- refusals: the annotations --------------------------------------------------------------------------------------

def test_a_result_pvc_without_a_result_path_fails_the_check_with_exit_1(api, tmp_path):
    serve(api, annotations={kube.RESULT_PVC: "results-pvc", kube.GENERATION: "g7"})
    proc = fetch(api, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert message_of(proc) == (f"the Job 'train' in namespace '{NS}' carries no {kube.RESULT_PATH} annotation: "
                                "where its bundle is under /data is unknown; fetch by the Blob URL instead")


def test_a_result_pvc_that_is_not_a_claim_name_is_bad_input_with_exit_65(api, tmp_path):
    serve(api, annotations=legacy(pvc="../../persistentvolumes/pv-blob-results"))
    proc = fetch(api, tmp_path)
    assert proc.returncode == 65, proc.stderr
    assert message_of(proc) == (f"the {kube.RESULT_PVC} annotation of the Job 'train' in namespace '{NS}' is "
                                "'../../persistentvolumes/pv-blob-results', which is not a PersistentVolumeClaim name")
    assert not [r for r in api.requests if "persistentvolume" in r]


# -- the pure rules, directly ---------------------------------------------------------------------------------------

def test_the_generation_rules_of_an_annotated_and_a_legacy_workload():
    choose = kube.choose_generation
    assert choose("g7", None, False, "Job", "t", "Job 't'") == {"generation": "g7", "generation_from": "annotation"}
    assert choose("g7", "g7", False, "Job", "t", "Job 't'")["generation_from"] == "annotation"
    assert choose(None, "g2", False, "Job", "t", "Job 't'") == {"generation": "g2", "generation_from": "option"}
    assert choose(None, None, True, "Job", "t", "Job 't'") == {"generation": None, "generation_from": "current"}
    for args in (("g7", None, True), (None, "g2", True), (None, None, False)):
        with pytest.raises(UsageError):
            choose(*args, "Job", "t", "Job 't'")


def test_a_claim_is_bound_only_with_a_volume_name_and_phase_bound():
    assert kube.bound_volume(kf.pvc("c", "pv-1"), "c", NS) == "pv-1"
    for claim in (kf.pvc("c", None, phase="Pending"), kf.pvc("c", "pv-1", phase="Lost"),
                  {"metadata": {"name": "c"}}):
        with pytest.raises(Busy):
            kube.bound_volume(claim, "c", NS)


def test_a_claim_ref_with_another_uid_is_another_claim():
    claim = kf.pvc("results-pvc")
    volume = kf.pv("pv-blob-results", claim)
    volume["spec"]["claimRef"]["uid"] = "pvc-results-pvc-recreated-uid"  # the claim was deleted and made again
    with pytest.raises(Refused, match="is not the claim's"):
        kube.volume_location(volume, claim, "results-pvc", NS, "runs/r1/out")
