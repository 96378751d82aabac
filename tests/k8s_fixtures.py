"""Kubernetes, Kueue and KubeRay objects for the workload-status tests, shaped as the API server returns them.

Each fixture in `FIXTURES` is a scene: the objects the loopback API server (tests/kubeapi.py) holds, the resources
it denies or breaks, the API groups that are not installed, and the workload to observe. The shapes follow
batch/v1 Job, v1 Pod, ray.io/v1 RayJob and kueue.x-k8s.io/v1beta2 Workload as served (metadata with uid,
ownerReferences and labels; status with conditions, containerStatuses with state and lastState). Times are fixed.
"""

from __future__ import annotations

NS = "team-a"
T0 = "2026-11-20T10:00:00Z"


def t(minutes: int) -> str:
    return f"2026-11-20T10:{minutes:02d}:00Z"


def _meta(name: str, uid: str, labels: dict | None = None, owner: dict | None = None, minute: int = 0) -> dict:
    meta = {"name": name, "namespace": NS, "uid": uid, "resourceVersion": str(1000 + minute),
            "creationTimestamp": t(minute), "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                    "controller": True, "blockOwnerDeletion": True}]
    return meta


def cond(kind: str, status: str = "True", reason: str | None = None, message: str | None = None,
         minute: int = 1) -> dict:
    out = {"type": kind, "status": status, "lastTransitionTime": t(minute)}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def job(name: str, *, queue: str | None = None, suspend: bool = False, status: dict | None = None,
        owner: dict | None = None, labels: dict | None = None, uid: str | None = None) -> dict:
    labels = dict(labels or {})
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    return {"kind": "Job", "apiVersion": "batch/v1",
            "metadata": _meta(name, uid or f"job-{name}-uid", labels, owner),
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "suspend": suspend,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "main", "image": "registry.example/train:1"}]}}},
            "status": status or {}}


def rayjob(name: str, *, deployment: str, job_status: str = "", reason: str | None = None,
           message: str | None = None, cluster: str | None = None, queue: str | None = None,
           extra: dict | None = None) -> dict:
    status = {"jobDeploymentStatus": deployment, "jobStatus": job_status, "startTime": t(1)}
    if cluster:
        status["rayClusterName"] = cluster
        status["jobId"] = f"{name}-raysubmit"
        status["dashboardURL"] = f"{cluster}-head-svc.{NS}.svc.cluster.local:8265"
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    status.update(extra or {})
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {"kind": "RayJob", "apiVersion": "ray.io/v1", "metadata": _meta(name, f"rayjob-{name}-uid", labels),
            "spec": {"entrypoint": "python train.py", "shutdownAfterJobFinishes": True, "suspend": False,
                     "rayClusterSpec": {"headGroupSpec": {}, "workerGroupSpecs": [{"groupName": "gpu"}]}},
            "status": status}


def raycluster_ref(name: str, cluster: str) -> dict:
    """What a Ray pod's controller reference points at: the RayJob's RayCluster."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": cluster,
                                                                          "uid": f"raycluster-{cluster}-uid"}}


def running(started: int = 2) -> dict:
    return {"running": {"startedAt": t(started)}}


def waiting(reason: str, message: str | None = None) -> dict:
    return {"waiting": {"reason": reason, **({"message": message} if message else {})}}


def terminated(code: int, reason: str, started: int = 2, finished: int = 5) -> dict:
    return {"terminated": {"exitCode": code, "reason": reason, "startedAt": t(started), "finishedAt": t(finished)}}


def ctr(name: str, state: dict, *, ready: bool = False, restarts: int = 0, last: dict | None = None,
        image: str = "registry.example/train:1") -> dict:
    out = {"name": name, "state": state, "ready": ready, "restartCount": restarts, "image": image,
           "imageID": "" if "waiting" in state and not restarts else f"{image}@sha256:{'ab' * 32}",
           "started": "running" in state, "lastState": {}}
    if last:
        out["lastState"] = last
    return out


def pod(name: str, owner: dict, *, phase: str, containers: list[dict], node: str | None = "gpu-node-1",
        labels: dict | None = None, init: list[dict] | None = None, reason: str | None = None,
        message: str | None = None, conditions: list[dict] | None = None) -> dict:
    spec = {"restartPolicy": "Never", "containers": [{"name": c["name"], "image": c["image"]} for c in containers]}
    if init:
        spec["initContainers"] = [{"name": c["name"], "image": c["image"]} for c in init]
    if node:
        spec["nodeName"] = node
    ready = all(c["ready"] for c in containers) and phase == "Running"
    status = {"phase": phase, "startTime": t(2),
              "conditions": conditions or [cond("PodScheduled", minute=2),
                                           cond("Ready", "True" if ready else "False", minute=3),
                                           cond("ContainersReady", "True" if ready else "False", minute=3)],
              "containerStatuses": containers}
    if init:
        status["initContainerStatuses"] = init
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return {"kind": "Pod", "apiVersion": "v1", "metadata": _meta(name, f"pod-{name}-uid", labels, owner, 2),
            "spec": spec, "status": status}


def job_pod(name: str, owner_job: dict, **kwargs) -> dict:
    labels = {"job-name": owner_job["metadata"]["name"], "batch.kubernetes.io/job-name": owner_job["metadata"]["name"],
              "controller-uid": owner_job["metadata"]["uid"]}
    return pod(name, owner_job, labels=labels, **kwargs)


def ray_pod(name: str, cluster: str, node_type: str, **kwargs) -> dict:
    labels = {"ray.io/cluster": cluster, "ray.io/node-type": node_type, "ray.io/is-ray-node": "yes"}
    return pod(name, raycluster_ref(name, cluster), labels=labels, **kwargs)


def workload(owner: dict, *, queue: str, conditions: list[dict], cluster_queue: str | None = None,
             checks: list[dict] | None = None, extra: dict | None = None) -> dict:
    kind = owner["kind"].lower()
    name = f"{kind}-{owner['metadata']['name']}-3f9a2"
    labels = {"kueue.x-k8s.io/job-uid": owner["metadata"]["uid"]}
    status = {"conditions": conditions}
    if cluster_queue:
        status["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": [
            {"name": "main", "flavors": {"nvidia.com/gpu": "a100"}, "count": 1}]}
    if checks:
        status["admissionChecks"] = checks
    status.update(extra or {})
    return {"kind": "Workload", "apiVersion": "kueue.x-k8s.io/v1beta2",
            "metadata": _meta(name, f"wl-{name}-uid", labels, owner, 1),
            "spec": {"queueName": queue, "priority": 0, "active": True,
                     "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [
                         {"name": "main", "image": "registry.example/train:1"}]}}}]},
            "status": status}


ADMITTED = [cond("QuotaReserved", reason="QuotaReserved", message="Quota reserved in ClusterQueue gpu-cq"),
            cond("Admitted", reason="Admitted", message="The workload is admitted")]


# -- the scenes ----------------------------------------------------------------------------------------------------

def job_pending_in_kueue() -> dict:
    j = job("train-7", queue="gpu", suspend=True, status={"conditions": [
        cond("Suspended", reason="JobSuspended", message="Job suspended", minute=0)]})
    wl = workload(j, queue="gpu", conditions=[cond(
        "QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor a100, 8 more needed", minute=1)])
    return {"name": "train-7", "objects": [j, wl]}


def job_admitted() -> dict:
    j = job("train-7", queue="gpu", status={"active": 1, "ready": 0, "startTime": t(2), "conditions": [
        cond("Suspended", "False", "JobResumed", "Job resumed", minute=2)]})
    wl = workload(j, queue="gpu", cluster_queue="gpu-cq", conditions=ADMITTED)
    p = job_pod("train-7-x8k2p", j, phase="Pending", containers=[
        ctr("main", waiting("ContainerCreating"))])
    return {"name": "train-7", "objects": [j, wl, p]}


def job_running_with_crashlooping_sidecar() -> dict:
    j = job("train-7", queue="gpu", status={"active": 1, "ready": 0, "startTime": t(2)})
    wl = workload(j, queue="gpu", cluster_queue="gpu-cq", conditions=ADMITTED)
    p = job_pod("train-7-x8k2p", j, phase="Running", containers=[
        ctr("main", running(), ready=True),
        ctr("log-shipper", waiting("CrashLoopBackOff", "back-off 2m40s restarting failed container=log-shipper"),
            restarts=5, last=terminated(1, "Error", 7, 8), image="registry.example/shipper:2")])
    return {"name": "train-7", "objects": [j, wl, p]}


def job_failed_oom() -> dict:
    j = job("train-7", queue="gpu", status={"failed": 1, "startTime": t(2), "conditions": [
        cond("FailureTarget", reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit",
             minute=9),
        cond("Failed", reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit",
             minute=9)]})
    wl = workload(j, queue="gpu", cluster_queue="gpu-cq", conditions=ADMITTED + [
        cond("Finished", reason="Failed", message="Job has reached the specified backoff limit", minute=9)])
    p = job_pod("train-7-x8k2p", j, phase="Failed", containers=[ctr("main", terminated(137, "OOMKilled", 2, 9))])
    return {"name": "train-7", "objects": [j, wl, p]}


def job_succeeded() -> dict:
    j = job("train-7", queue="gpu", status={"succeeded": 1, "startTime": t(2), "completionTime": t(12),
                                            "conditions": [cond("SuccessCriteriaMet", minute=12),
                                                           cond("Complete", minute=12)]})
    wl = workload(j, queue="gpu", cluster_queue="gpu-cq", conditions=ADMITTED + [
        cond("Finished", reason="Succeeded", message="Job finished successfully", minute=12)])
    p = job_pod("train-7-x8k2p", j, phase="Succeeded", containers=[ctr("main", terminated(0, "Completed", 2, 12))])
    return {"name": "train-7", "objects": [j, wl, p]}


def rayjob_initializing() -> dict:
    r = rayjob("tune", deployment="Initializing", cluster="tune-raycluster-kx2v9", queue="gpu")
    wl = workload(r, queue="gpu", cluster_queue="gpu-cq", conditions=ADMITTED)
    head = ray_pod("tune-raycluster-kx2v9-head-7lq2c", "tune-raycluster-kx2v9", "head", phase="Pending",
                   containers=[ctr("ray-head", waiting("ContainerCreating"), image="rayproject/ray:2.40.0")])
    return {"name": "tune", "objects": [r, wl, head]}


def _ray_running_pods(cluster: str) -> list[dict]:
    return [ray_pod(f"{cluster}-head-7lq2c", cluster, "head", phase="Running", node="cpu-node-1",
                    containers=[ctr("ray-head", running(), ready=True, image="rayproject/ray:2.40.0")]),
            ray_pod(f"{cluster}-gpu-worker-2hxkq", cluster, "worker", phase="Running", node="gpu-node-1",
                    containers=[ctr("ray-worker", running(), ready=True, image="rayproject/ray:2.40.0")]),
            ray_pod(f"{cluster}-gpu-worker-9fz4d", cluster, "worker", phase="Running", node="gpu-node-2",
                    containers=[ctr("ray-worker", running(), ready=True, image="rayproject/ray:2.40.0")])]


def rayjob_running() -> dict:
    cluster = "tune-raycluster-kx2v9"
    r = rayjob("tune", deployment="Running", job_status="RUNNING", cluster=cluster, queue="gpu")
    wl = workload(r, queue="gpu", cluster_queue="gpu-cq", conditions=ADMITTED)
    submitter = job("tune", owner=r, uid="job-tune-submitter-uid",
                    status={"active": 1, "ready": 1, "startTime": t(4)})
    sub_pod = job_pod("tune-5xq8w", submitter, phase="Running", node="cpu-node-1",
                      containers=[ctr("ray-job-submitter", running(4), ready=True, image="rayproject/ray:2.40.0")])
    return {"name": "tune", "objects": [r, wl, submitter, sub_pod, *_ray_running_pods(cluster)]}


def rayjob_failed_with_stale_running_job_status() -> dict:
    """kuberay#2314: jobDeploymentStatus Failed (DeadlineExceeded) while jobStatus still says RUNNING."""
    cluster = "tune-raycluster-kx2v9"
    r = rayjob("tune", deployment="Failed", job_status="RUNNING", cluster=cluster, reason="DeadlineExceeded",
               message="The RayJob has passed the activeDeadlineSeconds. DeadlineExceeded: 3600",
               extra={"endTime": t(40), "failed": 1, "succeeded": 0})
    submitter = job("tune", owner=r, uid="job-tune-submitter-uid",
                    status={"active": 1, "ready": 1, "startTime": t(4)})
    sub_pod = job_pod("tune-5xq8w", submitter, phase="Running", node="cpu-node-1",
                      containers=[ctr("ray-job-submitter", running(4), ready=True, image="rayproject/ray:2.40.0")])
    return {"name": "tune", "objects": [r, submitter, sub_pod, *_ray_running_pods(cluster)]}


def rayjob_succeeded_with_failed_teardown_pod() -> dict:
    cluster = "tune-raycluster-kx2v9"
    r = rayjob("tune", deployment="Complete", job_status="SUCCEEDED", cluster=cluster,
               extra={"endTime": t(30), "succeeded": 1, "failed": 0})
    submitter = job("tune", owner=r, uid="job-tune-submitter-uid", status={
        "succeeded": 1, "startTime": t(4), "completionTime": t(30), "conditions": [cond("Complete", minute=30)]})
    sub_pod = job_pod("tune-5xq8w", submitter, phase="Succeeded", node="cpu-node-1",
                      containers=[ctr("ray-job-submitter", terminated(0, "Completed", 4, 30),
                                      image="rayproject/ray:2.40.0")])
    worker = ray_pod(f"{cluster}-gpu-worker-2hxkq", cluster, "worker", phase="Failed", node="gpu-node-1",
                     containers=[ctr("ray-worker", terminated(143, "Error", 3, 31), image="rayproject/ray:2.40.0")])
    return {"name": "tune", "objects": [r, submitter, sub_pod, worker]}


def same_name_job_and_rayjob() -> dict:
    """Seed review P1: a batch Job and an unrelated RayJob named alike; neither's pods colour the other's health."""
    cluster = "eval-raycluster-m2p7x"
    j = job("eval", status={"active": 1, "ready": 1, "startTime": t(2)})
    jp = job_pod("eval-q7w2n", j, phase="Running", containers=[ctr("main", running(), ready=True)])
    r = rayjob("eval", deployment="Running", job_status="RUNNING", cluster=cluster)
    crashing = ray_pod(f"{cluster}-gpu-worker-2hxkq", cluster, "worker", phase="Running", node="gpu-node-2",
                       containers=[ctr("ray-worker", waiting("CrashLoopBackOff", "back-off 5m0s"), restarts=7,
                                       last=terminated(1, "Error", 20, 21), image="rayproject/ray:2.40.0")])
    head = ray_pod(f"{cluster}-head-7lq2c", cluster, "head", phase="Running", node="cpu-node-1",
                   containers=[ctr("ray-head", running(), ready=True, image="rayproject/ray:2.40.0")])
    return {"name": "eval", "objects": [j, jp, r, crashing, head]}


def same_name_failed_job_beside_succeeded_rayjob() -> dict:
    """Seed review P1: a successful RayJob must not turn a failed batch pod into 'teardown'."""
    cluster = "eval-raycluster-m2p7x"
    j = job("eval", status={"failed": 1, "startTime": t(2), "conditions": [
        cond("Failed", reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit",
             minute=6)]})
    jp = job_pod("eval-q7w2n", j, phase="Failed", containers=[ctr("main", terminated(1, "Error", 2, 6))])
    r = rayjob("eval", deployment="Complete", job_status="SUCCEEDED", cluster=cluster,
               extra={"endTime": t(30), "succeeded": 1})
    teardown = ray_pod(f"{cluster}-gpu-worker-2hxkq", cluster, "worker", phase="Failed", node="gpu-node-2",
                       containers=[ctr("ray-worker", terminated(143, "Error", 3, 31), image="rayproject/ray:2.40.0")])
    return {"name": "eval", "objects": [j, jp, r, teardown]}


def pods_denied() -> dict:
    scene = job_running_with_crashlooping_sidecar()
    return {**scene, "deny": ["pods"]}


def rayjob_crd_absent() -> dict:
    scene = job_succeeded()
    return {**scene, "absent": ["ray.io"]}


def nothing_there() -> dict:
    return {"name": "gone", "objects": [], "absent": ["ray.io", "kueue.x-k8s.io"]}


def rayjob_failed_after_teardown() -> dict:
    """Seed 001: after a RayJob's teardown the pods that said how it ended are gone: say so, never "no pods"."""
    r = rayjob("tune", deployment="Failed", job_status="FAILED", cluster="tune-raycluster-kx2v9", reason="AppFailed",
               message="Job entrypoint command failed with exit code 1", extra={"endTime": t(40), "failed": 1})
    return {"name": "tune", "objects": [r]}


def rayjob_succeeded_after_teardown() -> dict:
    r = rayjob("tune", deployment="Complete", job_status="SUCCEEDED", cluster="tune-raycluster-kx2v9",
               extra={"endTime": t(30), "succeeded": 1})
    return {"name": "tune", "objects": [r]}


def admission_check(name: str, controller: str) -> dict:
    return {"kind": "AdmissionCheck", "apiVersion": "kueue.x-k8s.io/v1beta2",
            "metadata": {"name": name, "uid": f"ac-{name}-uid", "resourceVersion": "7", "creationTimestamp": T0},
            "spec": {"controllerName": controller}}


def _multikueue_job() -> tuple[dict, dict]:
    j = job("train-7", queue="gpu", status={"active": 1, "startTime": t(2)})
    j["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    wl = workload(j, queue="gpu", cluster_queue="gpu-cq", conditions=ADMITTED, checks=[
        {"name": "multikueue", "state": "Ready", "message": "The workload got reservation on \"worker-eu\"",
         "lastTransitionTime": t(2)},
        {"name": "provisioning", "state": "Ready", "lastTransitionTime": t(2)}], extra={"clusterName": "worker-eu"})
    return j, wl


def job_multikueue_manager_view() -> dict:
    """The manager cluster's view of a MultiKueue Job: placed on a worker, its pods there; each admission check
    names its controller from the cluster-scoped AdmissionCheck objects."""
    j, wl = _multikueue_job()
    return {"name": "train-7", "objects": [
        j, wl, admission_check("multikueue", "kueue.x-k8s.io/multikueue"),
        admission_check("provisioning", "kueue.x-k8s.io/provisioning-request")]}


def admission_checks_denied() -> dict:
    """The AdmissionCheck objects cannot be read: each check's controller lookup failed (Tau's ControllerLookupFailed),
    and the check named "multikueue" is taken for MultiKueue's, as in Tau."""
    j = job("train-7", queue="gpu", suspend=True)
    wl = workload(j, queue="gpu", conditions=[cond("QuotaReserved", reason="QuotaReserved")], checks=[
        {"name": "multikueue", "state": "Pending", "lastTransitionTime": t(2)},
        {"name": "provisioning", "state": "Pending", "lastTransitionTime": t(2)}])
    return {"name": "train-7", "objects": [j, wl], "deny": ["admissionchecks"]}


FIXTURES = {f.__name__.replace("_", "-"): f for f in (
    job_pending_in_kueue, job_admitted, job_running_with_crashlooping_sidecar, job_failed_oom, job_succeeded,
    rayjob_initializing, rayjob_running, rayjob_failed_with_stale_running_job_status,
    rayjob_succeeded_with_failed_teardown_pod, same_name_job_and_rayjob,
    same_name_failed_job_beside_succeeded_rayjob, pods_denied, rayjob_crd_absent, nothing_there,
    rayjob_failed_after_teardown, rayjob_succeeded_after_teardown, job_multikueue_manager_view,
    admission_checks_denied)}


# -- result volumes: a PersistentVolumeClaim and the PersistentVolume it is bound to -------------------------------
# Shaped as the API server serves the Azure Blob CSI driver's statically provisioned volumes
# (kubernetes-sigs/blob-csi-driver deploy/example/pv-blobfuse-nfs.yaml, pvc-blob-csi-static.yaml): the PV names the
# driver, a volumeHandle of the driver's RESOURCEGROUP#ACCOUNT#CONTAINER form and the volumeAttributes
# resourceGroup, storageAccount, containerName and protocol; binding sets the PVC's spec.volumeName and
# status.phase Bound and the PV's claimRef (with the claim's uid).

BLOB_DRIVER = "blob.csi.azure.com"


def blob_csi(account: str = "tauresults", container: str = "results", resource_group: str = "rg-tau", *,
             handle: str | None = None, attributes: dict | None = None, protocol: str = "fuse",
             **extra: str) -> dict:
    """The `csi` source of a Blob PV: the driver's usual attributes (or exactly `attributes`), plus `extra`."""
    attrs = dict(attributes) if attributes is not None else {
        "resourceGroup": resource_group, "storageAccount": account, "containerName": container, "protocol": protocol}
    attrs.update(extra)
    return {"csi": {"driver": BLOB_DRIVER, "readOnly": False,
                    "volumeHandle": handle if handle is not None else f"{resource_group}#{account}#{container}",
                    "volumeAttributes": attrs}}


def pvc(name: str, volume: str | None = "pv-blob-results", *, phase: str = "Bound", namespace: str = NS,
        storage_class: str = "azureblob-fuse-premium") -> dict:
    """A claim bound to `volume` (phase Bound), or waiting (phase Pending, with or without a volumeName)."""
    spec = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}},
            "storageClassName": storage_class, "volumeMode": "Filesystem"}
    if volume:
        spec["volumeName"] = volume
    status = {"phase": phase}
    annotations = {}
    if phase == "Bound":
        status.update(accessModes=["ReadWriteMany"], capacity={"storage": "10Gi"})
        annotations = {"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes"}
    return {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": namespace, "uid": f"pvc-{name}-uid", "resourceVersion": "2001",
                         "creationTimestamp": T0, "annotations": annotations,
                         "finalizers": ["kubernetes.io/pvc-protection"]},
            "spec": spec, "status": status}


def pv(name: str, claim: dict | None, source: dict | None = None, *,
       storage_class: str = "azureblob-fuse-premium") -> dict:
    """A cluster-scoped PersistentVolume bound to `claim` (None: Available), its volume source `source` (default:
    a Blob CSI volume), e.g. `blob_csi(...)`, `{"csi": {"driver": "file.csi.azure.com", ...}}` or `{"nfs": ...}`."""
    spec = {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": storage_class, "volumeMode": "Filesystem",
            "mountOptions": ["-o allow_other", "--file-cache-timeout-in-seconds=120"],
            **(source if source is not None else blob_csi())}
    if claim is not None:
        spec["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                            "namespace": claim["metadata"]["namespace"], "name": claim["metadata"]["name"],
                            "uid": claim["metadata"]["uid"], "resourceVersion": "2000"}
    driver = ((source or blob_csi()).get("csi") or {}).get("driver")
    return {"kind": "PersistentVolume", "apiVersion": "v1",
            "metadata": {"name": name, "uid": f"pv-{name}-uid", "resourceVersion": "2002", "creationTimestamp": T0,
                         "annotations": {"pv.kubernetes.io/provisioned-by": driver} if driver else {},
                         "finalizers": ["kubernetes.io/pv-protection"]},
            "spec": spec, "status": {"phase": "Bound" if claim is not None else "Available",
                                     "lastPhaseTransitionTime": T0}}
