"""The startup phases and the Kueue Workload fields of the workload snapshot, as Tau computes them.

Each case is one of Tau's own status cases (core/status/status_test.go and output_test.go in Azure/taugrid), restated
on the objects of tests/k8s_fixtures.py: the phases are Tau's `startupPhasesAt` (core/status/phases.go), the Workload
fields Tau's `hydrateWorkloads` (core/status/hydrate_workloads.go). The differences tau keeps on purpose, listed in
tau-status(7) under "Differences from Tau", are pinned at the end.
"""

from __future__ import annotations

import k8s_fixtures as fx

from taulib import schema
from taulib.k8s import status
from taulib.k8s.api import NOT_FOUND, NOT_INSTALLED, OBSERVED, UNAVAILABLE, Read

ABSENT = Read(NOT_FOUND)
NONE = Read(OBSERVED, [])
WAITING_TIP = "check the kueue.x-k8s.io/queue-name label if this stays empty"


def snap(name: str, *, job=ABSENT, rayjob=ABSENT, workloads=NONE, pods=NONE) -> dict:
    doc = status.snapshot(name, fx.NS, job=job, rayjob=rayjob, workloads=workloads, pods=pods)
    schema.validate(doc, "workload-status")
    schema.validate(doc, "tau-v1alpha1-status")
    return doc


def of(scene: dict, **reads) -> dict:
    """The snapshot of a scene of k8s_fixtures, read whole (a read in `reads` replaces the scene's)."""
    objs, name = scene["objects"], scene["name"]
    job = next((o for o in objs if o["kind"] == "Job" and o["metadata"]["name"] == name), None)
    ray = next((o for o in objs if o["kind"] == "RayJob"), None)
    base = {"job": Read(OBSERVED, job) if job else ABSENT, "rayjob": Read(OBSERVED, ray) if ray else ABSENT,
            "workloads": Read(OBSERVED, [o for o in objs if o["kind"] == "Workload"]),
            "pods": Read(OBSERVED, [o for o in objs if o["kind"] == "Pod"])}
    return snap(name, **{**base, **reads})


def table(doc: dict) -> list[tuple[str, str]]:
    return [(p["name"], p["status"]) for p in doc["phases"]]


def phase(doc: dict, name: str) -> dict:
    return next(p for p in doc["phases"] if p["name"] == name)


# -- Tau's cases ---------------------------------------------------------------------------------------------------

def test_a_workload_that_is_not_found_still_lists_its_pending_phases():
    """TestRender_NonMultiKueueOutputExact: nothing found, yet every phase is listed, waiting."""
    doc = snap("gone")
    assert doc["state"] == "NotFound"
    assert [(p["name"], p["status"], p["detail"], p["hint"]) for p in doc["phases"]] == [
        ("Submitted", "pending", "no batch/v1 Job or RayJob found", None),
        ("Kueue admission", "pending", "workload not observed", WAITING_TIP),
        ("Pod scheduling", "pending", "no pods observed yet", None),
        ("DRA allocation", "skipped", "no ResourceClaims requested", None),
        ("Image pull", "pending", "waiting for pods", None),
        ("Init containers", "skipped", "no init containers", None),
        ("Container start", "pending", "waiting for pods", None),
        ("Ready", "pending", "waiting for pods", None)]


def test_a_container_being_created_makes_container_start_active():
    """TestRenderStartupPhases_ShowsDRAImageAndContainerProgress: ContainerCreating is startup under way."""
    doc = of(fx.job_admitted())
    assert phase(doc, "Container start") == {
        "name": "Container start", "status": "active", "detail": "0/1 started reason=ContainerCreating",
        "hint": "container startup is still waiting on image, volume, or runtime setup"}
    assert table(doc) == [("Submitted", "done"), ("Kueue admission", "done"), ("Pod scheduling", "done"),
                          ("DRA allocation", "skipped"), ("Image pull", "active"), ("Init containers", "skipped"),
                          ("Container start", "active"), ("Ready", "active")]


def test_a_failed_rayjob_after_pod_cleanup_warns_on_its_raycluster_and_skips_its_pod_phases():
    """TestRenderFailedRayJobAfterPodCleanupDoesNotLookPending."""
    doc = of(fx.rayjob_failed_after_teardown())
    teardown = "RayJob failed; post-run RayCluster teardown removed pod evidence"
    assert [(p["name"], p["status"], p["detail"]) for p in doc["phases"]] == [
        ("Submitted", "done", "RayJob created"),
        ("Kueue admission", "skipped", "not queued by Kueue (no kueue.x-k8s.io/queue-name label)"),
        ("RayCluster", "warning", "created tune-raycluster-kx2v9"),
        ("Pod scheduling", "skipped", teardown), ("DRA allocation", "skipped", teardown),
        ("Image pull", "skipped", teardown), ("Init containers", "skipped", teardown),
        ("Container start", "skipped", teardown), ("Ready", "skipped", teardown),
        ("RayJob status", "warning", "Failed reason=AppFailed"),
        ("Compute release", "done", "resources reusable; no active Ray pods remain")]
    # pods that could not be read say so, and Compute release cannot tell either
    doc = of(fx.rayjob_failed_after_teardown(), pods=Read(UNAVAILABLE, None, "access denied", denied=True))
    assert phase(doc, "Compute release")["status"] == "warning"
    assert phase(doc, "Compute release")["detail"] == "Ray pod state unavailable; physical resource reusability " \
        "unknown"


def test_a_worker_that_exited_1_before_the_rayjob_completed_warns_on_container_start_and_ready():
    """TestRenderRayJobFailureBeforeCompletionRemainsVisible."""
    cluster = "tau-broken-cluster"
    ray = fx.rayjob("tau-broken", deployment="Running", job_status="RUNNING", cluster=cluster)
    worker = fx.ray_pod("tau-broken-worker", cluster, "worker", phase="Failed", node=None,
                        containers=[fx.ctr("worker", fx.terminated(1, "Error"))])
    doc = snap("tau-broken", rayjob=Read(OBSERVED, ray), pods=Read(OBSERVED, [worker]))
    assert (phase(doc, "Container start")["status"], phase(doc, "Container start")["detail"]) == \
        ("warning", "0/1 started")
    assert (phase(doc, "Ready")["status"], phase(doc, "Ready")["detail"]) == \
        ("warning", "0/1 pods ready reason=Error")


def test_a_running_rayjob_has_its_rayjob_status_phase_done():
    """TestRenderStartupPhases_RayJobIncludesClusterAndSubmitter: Tau counts Running as the RayJob's startup done."""
    doc = of(fx.rayjob_running())
    assert phase(doc, "RayCluster") == {"name": "RayCluster", "status": "done",
                                        "detail": "created tune-raycluster-kx2v9", "hint": None}
    assert phase(doc, "RayJob status") == {"name": "RayJob status", "status": "done", "detail": "Running",
                                           "hint": None}
    assert phase(doc, "Compute release") == {"name": "Compute release", "status": "pending",
                                             "detail": "waiting for RayJob terminal status", "hint": None}


def test_a_succeeded_rayjob_whose_pods_still_hold_nodes_has_compute_release_active():
    """TestRenderSuccessfulRayJobDistinguishesQuotaFromComputeRelease: teardown under way, not a warning."""
    cluster = "whole-node-h200-cluster"
    ray = fx.rayjob("whole-node-h200", deployment="Complete", job_status="SUCCEEDED", cluster=cluster, queue="jobqueue")
    wl = fx.workload(ray, queue="jobqueue", cluster_queue="gpu-cq", conditions=fx.ADMITTED + [
        fx.cond("Finished", reason="Succeeded", message="Job finished successfully", minute=9)])
    pods = [fx.ray_pod("head", cluster, "head", phase="Running", node="h200-a",
                       containers=[fx.ctr("ray-head", fx.running(), ready=True)]),
            fx.ray_pod("worker", cluster, "worker", phase="Running", node="h200-b",
                       containers=[fx.ctr("ray-worker", fx.running(), ready=True)])]
    doc = snap("whole-node-h200", rayjob=Read(OBSERVED, ray), workloads=Read(OBSERVED, [wl]),
               pods=Read(OBSERVED, pods))
    assert phase(doc, "Kueue admission")["detail"] == "1/1 finished; quota released queue=jobqueue"
    assert phase(doc, "Compute release") == {
        "name": "Compute release", "status": "active",
        "detail": "quota released; resources NOT reusable; 2 Ray pod(s) still hold 2 node(s): h200-a, h200-b",
        "hint": "wait for KubeRay to delete the RayCluster and for all node-bound Ray pods to terminate"}


def test_a_finished_workload_keeps_the_reason_it_finished_with_and_no_message():
    """outputFixture "succeeded": a Finished Workload has reason Succeeded and an empty message."""
    (wl,) = of(fx.job_succeeded())["workloads"]
    assert (wl["phase"], wl["reason"], wl["message"]) == ("Finished", "Succeeded", None)


def test_multikueue_nominated_clusters_are_deduplicated_and_sorted():
    """hydrateWorkloads: sortedUniqueStrings(status.nominatedClusterNames)."""
    job = fx.job("train-7", queue="gpu", suspend=True)
    wl = fx.workload(job, queue="gpu", conditions=[fx.cond("QuotaReserved", "False", "Pending")],
                     extra={"nominatedClusterNames": ["worker-b", "worker-a", "worker-b", ""]})
    doc = snap("train-7", job=Read(OBSERVED, job), workloads=Read(OBSERVED, [wl]))
    assert doc["workloads"][0]["nominatedClusters"] == ["worker-a", "worker-b"]
    assert phase(doc, "MultiKueue placement") == {"name": "MultiKueue placement", "status": "active",
                                                  "detail": "nominated worker clusters: worker-a, worker-b",
                                                  "hint": None}


# -- the rest of Tau's rules, as tau reads them --------------------------------------------------------------------

def test_a_waiting_workload_says_taus_pending_cause_quota_reserved_first_then_admitted_then_another():
    job = fx.job("train-7", queue="gpu", suspend=True)

    def fields(conditions: list) -> tuple:
        (wl,) = snap("train-7", job=Read(OBSERVED, job), workloads=Read(OBSERVED, [fx.workload(
            job, queue="gpu", conditions=conditions)]))["workloads"]
        return wl["phase"], wl["reason"], wl["message"]

    quota = fx.cond("QuotaReserved", "False", "Pending", "couldn't assign flavors")
    admitted = fx.cond("Admitted", "False", "NoReservation", "The workload has no reservation")
    requeued = fx.cond("Requeued", "False", "BackoffFinished", "back off")
    assert fields([admitted, quota]) == ("Pending", "Pending", "couldn't assign flavors")
    assert fields([admitted, requeued]) == ("Pending", "NoReservation", "The workload has no reservation")
    assert fields([requeued]) == ("Pending", "BackoffFinished", "back off")
    # quota reserved but not admitted yet: still waiting, and Admitted=False says why
    assert fields([fx.cond("QuotaReserved", reason="QuotaReserved"), fx.cond(
        "Admitted", "False", "UnsatisfiedChecks", "waiting for checks")]) == \
        ("QuotaReserved", "UnsatisfiedChecks", "waiting for checks")
    assert fields(fx.ADMITTED) == ("Admitted", None, None)


def test_kueue_admission_counts_admitted_and_finished_workloads_and_names_the_pending_reason():
    doc = of(fx.job_pending_in_kueue())
    assert phase(doc, "Kueue admission") == {"name": "Kueue admission", "status": "active",
                                             "detail": "0/1 admitted queue=gpu reason=Pending", "hint": None}
    assert phase(of(fx.job_admitted()), "Kueue admission")["detail"] == "1/1 admitted queue=gpu"


def test_an_evicted_workload_makes_kueue_admission_a_warning():
    job = fx.job("train-7", queue="gpu", suspend=True)
    wl = fx.workload(job, queue="gpu", conditions=[
        fx.cond("QuotaReserved", "False", "Preempted", "Preempted to accommodate a higher priority workload"),
        fx.cond("Evicted", reason="Preempted", message="Preempted to accommodate a higher priority workload")])
    doc = snap("train-7", job=Read(OBSERVED, job), workloads=Read(OBSERVED, [wl]))
    assert phase(doc, "Kueue admission") == {
        "name": "Kueue admission", "status": "warning", "detail": "0/1 admitted queue=gpu reason=Preempted",
        "hint": "Kueue reported eviction/preemption; check Workload conditions"}


def test_reads_that_failed_say_taus_unavailable_words():
    job = fx.job("train-7", queue="gpu", status={"active": 1})
    denied = Read(UNAVAILABLE, None, "access denied", denied=True)
    doc = snap("train-7", job=Read(OBSERVED, job), workloads=denied, pods=denied)
    assert phase(doc, "Kueue admission") == {"name": "Kueue admission", "status": "warning",
                                             "detail": "workload status unavailable: access denied",
                                             "hint": "request get/list access to workloads.kueue.x-k8s.io"}
    assert table(doc)[2:] == [("Pod scheduling", "warning"), ("DRA allocation", "skipped"), ("Image pull", "skipped"),
                              ("Init containers", "skipped"), ("Container start", "skipped"), ("Ready", "skipped")]
    assert phase(doc, "Pod scheduling")["detail"] == "pod status unavailable: access denied"
    assert phase(doc, "Ready")["detail"] == "pod status unavailable: access denied"
    unknown = snap("train-7", job=denied)
    assert phase(unknown, "Submitted") == {
        "name": "Submitted", "status": "warning", "detail": "workload lookup unavailable: access denied",
        "hint": "request read access for the workload kind or use a context with existing viewer permissions"}


def test_a_multikueue_manager_view_lists_the_placement_and_skips_the_pod_phases():
    scene = fx.job_multikueue_manager_view()
    objs = scene["objects"]
    checks = {o["metadata"]["name"]: Read(OBSERVED, o) for o in objs if o["kind"] == "AdmissionCheck"}
    job = next(o for o in objs if o["kind"] == "Job")
    doc = status.snapshot("train-7", fx.NS, job=Read(OBSERVED, job), rayjob=ABSENT,
                          workloads=Read(OBSERVED, [o for o in objs if o["kind"] == "Workload"]), pods=NONE,
                          admission_checks=checks)
    assert phase(doc, "MultiKueue placement") == {"name": "MultiKueue placement", "status": "done",
                                                  "detail": "worker-cluster placement ready on worker-eu",
                                                  "hint": None}
    manager = "manager view only; worker-cluster pod lifecycle is not visible here"
    assert [(p["status"], p["detail"]) for p in doc["phases"][3:]] == [("skipped", manager)] * 6


def test_a_succeeded_rayjob_marks_its_unfinished_startup_phases_done_as_teardown():
    doc = of(fx.rayjob_succeeded_after_teardown())
    teardown = "RayJob completed successfully; post-run RayCluster teardown"
    assert [(p["name"], p["status"], p["detail"]) for p in doc["phases"][3:9]] == [
        ("Pod scheduling", "done", teardown), ("DRA allocation", "skipped", "no ResourceClaims requested"),
        ("Image pull", "done", teardown), ("Init containers", "skipped", "no init containers"),
        ("Container start", "done", teardown), ("Ready", "done", teardown)]


def test_a_pod_that_cannot_be_scheduled_warns_with_its_condition_reason():
    job = fx.job("train-7", status={"active": 1})
    pod = fx.job_pod("train-7-a", job, phase="Pending", node=None, containers=[], conditions=[fx.cond(
        "PodScheduled", "False", "Unschedulable", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")])
    pod["status"].pop("containerStatuses")
    doc = snap("train-7", job=Read(OBSERVED, job), pods=Read(OBSERVED, [pod]))
    assert phase(doc, "Pod scheduling") == {
        "name": "Pod scheduling", "status": "warning", "detail": "0/1 assigned to nodes reason=Unschedulable",
        "hint": "check node selectors, queue admission, and DRA ResourceClaim allocation"}
    assert phase(doc, "Container start")["detail"] == "container statuses not available"


def test_an_image_that_cannot_be_pulled_and_a_pod_with_resource_claims():
    job = fx.job("train-7", status={"active": 1})
    pod = fx.job_pod("train-7-a", job, phase="Pending", containers=[fx.ctr("main", fx.waiting("ImagePullBackOff"))],
                     init=[fx.ctr("fetch", fx.terminated(0, "Completed"), image="registry.example/fetch:1")])
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "train-7-a-gpu-x2"}]
    doc = snap("train-7", job=Read(OBSERVED, job), pods=Read(OBSERVED, [pod]))
    assert phase(doc, "Image pull") == {"name": "Image pull", "status": "warning", "detail": "main=ImagePullBackOff",
                                        "hint": "verify the image name, tag, registry credentials, and node egress"}
    assert phase(doc, "Init containers") == {"name": "Init containers", "status": "done", "detail": "1/1 complete",
                                             "hint": None}
    assert phase(doc, "DRA allocation") == {
        "name": "DRA allocation", "status": "active",
        "detail": "1 ResourceClaim(s) referenced; allocation not observed",
        "hint": "if this stays pending, check ResourceClaim objects and ResourceSlice availability"}


def test_pulled_images_are_named_two_at_most():
    doc = of(fx.rayjob_running())
    assert phase(doc, "Image pull") == {"name": "Image pull", "status": "done",
                                        "detail": "available: rayproject/ray:2.40.0", "hint": None}


# -- the differences from Tau that tau keeps (tau-status(7), "Differences from Tau") -----------------------------

def test_difference_kueue_admission_is_skipped_when_no_workload_will_come():
    """Tau says "waiting for Kueue Workload" (active) whenever none is seen."""
    plain = fx.job("train-7", status={"active": 1})
    unqueued = phase(snap("train-7", job=Read(OBSERVED, plain)), "Kueue admission")
    assert (unqueued["status"], unqueued["detail"]) == ("skipped",
                                                        "not queued by Kueue (no kueue.x-k8s.io/queue-name label)")
    queued = fx.job("train-7", queue="gpu", status={"conditions": [fx.cond("Complete")]})
    done = phase(snap("train-7", job=Read(OBSERVED, queued)), "Kueue admission")
    assert (done["status"], done["detail"]) == ("skipped", "queue 'gpu': no Kueue Workload is left")
    no_kueue = Read(NOT_FOUND, None, f"{NOT_INSTALLED}: the API server serves neither version")
    absent = phase(snap("train-7", job=Read(OBSERVED, plain), workloads=no_kueue), "Kueue admission")
    assert (absent["status"], absent["detail"]) == ("skipped", "not queued by Kueue (Kueue is not installed)")
    # with the label, and Kueue there, it is Tau's rule
    waiting = fx.job("train-7", queue="gpu", suspend=True)
    assert phase(snap("train-7", job=Read(OBSERVED, waiting)), "Kueue admission") == {
        "name": "Kueue admission", "status": "active", "detail": "waiting for Kueue Workload", "hint": WAITING_TIP}


def test_difference_an_ended_job_whose_pods_are_gone_skips_its_pod_phases():
    """Tau lists them pending ("no pods observed yet"), as though the Job had not started."""
    doc = of(fx.job_succeeded(), pods=NONE)
    gone = "the Job ended and none of its pods is left"
    assert [(p["name"], p["status"], p["detail"]) for p in doc["phases"][2:]] == [
        ("Pod scheduling", "skipped", gone), ("DRA allocation", "skipped", gone), ("Image pull", "skipped", gone),
        ("Init containers", "skipped", gone), ("Container start", "skipped", gone), ("Ready", "skipped", gone)]


def test_difference_a_rayjob_with_its_submitter_job_lists_the_rayjobs_phases():
    """Tau lets a Job found decide, so it lists the submitter Job's phases; tau lists the RayJob's, whose lifecycle
    the snapshot follows."""
    doc = of(fx.rayjob_running())
    assert (doc["kind"], doc["primary"]) == ("Job+RayJob", "RayJob")
    assert [p["name"] for p in doc["phases"]] == [
        "Submitted", "Kueue admission", "RayCluster", "Pod scheduling", "DRA allocation", "Image pull",
        "Init containers", "Container start", "Ready", "RayJob status", "Compute release"]
    assert phase(doc, "Submitted")["detail"] == "RayJob created"
