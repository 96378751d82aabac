"""The workload-status rules (taulib.k8s.status), reached directly: pure functions of classified reads.

The whole snapshots of real scenes, read over HTTP by the real client, are in test_cli_observe_kubernetes.py.
"""

from __future__ import annotations

import copy
import random

import k8s_fixtures as fx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taulib import schema
from taulib.k8s import jobs, status
from taulib.k8s.api import NOT_FOUND, OBSERVED, UNAVAILABLE, Read

ABSENT = Read(NOT_FOUND)
NONE = Read(OBSERVED, [])


def snap(name="tune", *, job=ABSENT, rayjob=ABSENT, workloads=NONE, pods=NONE) -> dict:
    doc = status.snapshot(name, fx.NS, job=job, rayjob=rayjob, workloads=workloads, pods=pods)
    schema.validate(doc, "workload-status")
    return doc


def reads_of(scene: dict) -> dict:
    """The reads the API server would give for a scene (what taulib.k8s.observe passes on)."""
    objs = scene["objects"]
    name = scene["name"]
    job = next((o for o in objs if o["kind"] == "Job" and o["metadata"]["name"] == name), None)
    ray = next((o for o in objs if o["kind"] == "RayJob"), None)
    return {"job": Read(OBSERVED, job) if job else ABSENT, "rayjob": Read(OBSERVED, ray) if ray else ABSENT,
            "workloads": Read(OBSERVED, [o for o in objs if o["kind"] == "Workload"]),
            "pods": Read(OBSERVED, [o for o in objs if o["kind"] == "Pod"])}


# -- the RayJob table ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("deployment, job_status, expected", [
    ("", "", "pending"), ("New", "", "pending"), ("Initializing", "RUNNING", "pending"),
    ("Initializing", "", "pending"), ("Suspended", "", "pending"), ("Suspending", "RUNNING", "pending"),
    ("Retrying", "FAILED", "pending"), ("Waiting", "", "pending"),
    ("Running", "PENDING", "running"), ("Running", "RUNNING", "running"), ("Running", "", "running"),
    ("Running", "FAILED", "running"), ("Running", "STOPPED", "running"), ("Running", "SUCCEEDED", "running"),
    ("Complete", "SUCCEEDED", "succeeded"), ("Complete", "FAILED", "failed"), ("Complete", "STOPPED", "failed"),
    ("Complete", "RUNNING", "unknown"), ("Failed", "RUNNING", "failed"), ("Failed", "SUCCEEDED", "failed"),
    ("Failed", "", "failed"), ("ValidationFailed", "", "failed"), ("Exploded", "RUNNING", "unknown"),
])
def test_the_rayjob_state_comes_from_the_enumerated_table_not_substrings(deployment, job_status, expected):
    doc = snap(rayjob=Read(OBSERVED, fx.rayjob("tune", deployment=deployment, job_status=job_status)))
    assert doc["lifecycle"] == expected, doc["stateDetail"]


@pytest.mark.parametrize("job_status", ["FAILED", "STOPPED"])
def test_a_ray_job_that_failed_under_a_controller_still_running_is_running_and_degraded(job_status):
    doc = snap(rayjob=Read(OBSERVED, fx.rayjob("tune", deployment="Running", job_status=job_status)))
    assert (doc["lifecycle"], doc["degraded"]) == ("running", True)
    assert doc["reason"] == {"FAILED": "the Ray job FAILED", "STOPPED": "the Ray job was STOPPED"}[job_status] \
        + " while the RayJob controller still reports Running"


def test_a_retrying_rayjob_is_pending_and_degraded_by_the_failed_attempt():
    doc = snap(rayjob=Read(OBSERVED, fx.rayjob("tune", deployment="Retrying", reason="AppFailed",
                                                message="job exited 1")))
    assert (doc["lifecycle"], doc["degraded"]) == ("pending", True)
    assert doc["reason"] == "a previous attempt failed (AppFailed: job exited 1)"


DEPLOYMENTS = st.sampled_from(sorted(jobs.RAYJOB_DEPLOYMENT) + ["Exploded", "complete"])
JOB_STATUSES = st.sampled_from(["", "PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED", "Weird"])
REASONS = st.sampled_from([None, "", "SubmissionFailed", "DeadlineExceeded", "AppFailed", "ValidationFailed",
                           "JobDeploymentStatusTransitionGracePeriodExceeded"])


@settings(max_examples=300, deadline=None)
@given(DEPLOYMENTS, JOB_STATUSES, REASONS, st.sampled_from([None, "", "it broke"]))
def test_a_failed_rayjob_always_has_a_reason_and_is_degraded_and_degraded_means_a_reason(deployment, job_status,
                                                                                           reason, message):
    doc = snap(rayjob=Read(OBSERVED, fx.rayjob("tune", deployment=deployment, job_status=job_status,
                                                reason=reason, message=message)))
    assert doc["lifecycle"] in status.STATES
    if doc["lifecycle"] == "failed":
        assert doc["degraded"] is True and doc["reason"]
    assert doc["degraded"] == (doc["reason"] is not None) == bool(doc["issues"])
    if doc["lifecycle"] in ("succeeded", "failed"):  # only the controller ends a RayJob
        assert deployment in ("Complete", "Failed", "ValidationFailed")
    assert doc["rayJob"]["lifecycle"] == doc["lifecycle"] and doc["rayJob"]["degraded"] == doc["degraded"]


# -- Jobs ----------------------------------------------------------------------------------------------------------

def test_a_job_failed_wins_over_complete():
    job = fx.job("train-7", status={"conditions": [fx.cond("Complete"), fx.cond("Failed", reason="DeadlineExceeded",
                                                                                  message="too slow")]})
    doc = snap("train-7", job=Read(OBSERVED, job))
    assert (doc["lifecycle"], doc["reason"]) == ("failed", "DeadlineExceeded too slow")  # Tau's "reason message"


def test_a_job_whose_active_pods_all_wait_for_a_node_is_pending_not_running():
    job = fx.job("train-7", status={"active": 2})
    pods = [fx.job_pod(f"train-7-{i}", job, phase="Pending", node=None, containers=[
        fx.ctr("main", fx.waiting("ContainerCreating"))], conditions=[fx.cond(
            "PodScheduled", "False", "Unschedulable", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")])
            for i in range(2)]
    doc = snap("train-7", job=Read(OBSERVED, job), pods=Read(OBSERVED, pods))
    assert (doc["lifecycle"], doc["stateDetail"]) == ("pending", "2 pods waiting to start")
    scheduling = next(p for p in doc["phases"] if p["name"] == "Pod scheduling")
    assert (scheduling["status"], scheduling["detail"]) == ("warning", "0/2 assigned to nodes reason=Unschedulable")
    # without a pod read, the Job's own counter is all there is
    assert snap("train-7", job=Read(OBSERVED, job), pods=Read(UNAVAILABLE, None, "denied"))["lifecycle"] == "running"


def test_every_issue_is_reported_in_order_not_only_the_first():
    job = fx.job("train-7", status={"active": 2})
    pods = [fx.job_pod("train-7-b", job, phase="Running", containers=[
                fx.ctr("main", fx.waiting("ImagePullBackOff")), fx.ctr("agent", fx.waiting("CrashLoopBackOff"),
                                                                      restarts=3, last=fx.terminated(2, "Error"))]),
            fx.job_pod("train-7-a", job, phase="Failed", containers=[fx.ctr("main", fx.terminated(3, "Error"))])]
    doc = snap("train-7", job=Read(OBSERVED, job), pods=Read(OBSERVED, pods))
    # each in Tau's words: the current reason (else the last), the current exit code, restarts when there were any
    assert doc["issues"] == ["train-7-a/main terminated reason=Error exit=3",
                             "train-7-b/agent waiting reason=CrashLoopBackOff restarts=3",
                             "train-7-b/main waiting reason=ImagePullBackOff"]
    assert doc["reason"] == doc["issues"][0]  # Tau's reason: the first current container issue


def test_a_pod_of_an_earlier_job_of_the_same_name_is_unowned_and_judges_nothing():
    job = fx.job("train-7", status={"active": 1})
    old = fx.job("train-7", uid="an-older-job-uid")
    pods = [fx.job_pod("train-7-old", old, phase="Failed", containers=[fx.ctr("main", fx.terminated(1, "Error"))]),
            fx.job_pod("train-7-new", job, phase="Running", containers=[fx.ctr("main", fx.running(), ready=True)])]
    doc = snap("train-7", job=Read(OBSERVED, job), pods=Read(OBSERVED, pods))
    assert {p["name"]: (p["owner"], p["health"]) for p in doc["pods"]} == {
        "train-7-old": (None, "unowned"), "train-7-new": ("Job", "ok")}
    assert (doc["lifecycle"], doc["degraded"]) == ("running", False)


def test_an_evicted_pod_is_preempted_and_a_lost_node_is_node_failed():
    job = fx.job("train-7", status={"active": 1})
    evicted = fx.job_pod("train-7-e", job, phase="Failed", containers=[fx.ctr("main", fx.terminated(137, "Error"))],
                         reason="Evicted", message="The node was low on resource: memory.")
    lost = fx.job_pod("train-7-l", job, phase="Unknown", containers=[fx.ctr("main", fx.running(), ready=True)])
    doc = snap("train-7", job=Read(OBSERVED, job), pods=Read(OBSERVED, [evicted, lost]))
    assert {p["name"]: p["state"] for p in doc["pods"]} == {"train-7-e": "preempted", "train-7-l": "node_failed"}


# -- Kueue ---------------------------------------------------------------------------------------------------------

def test_kueue_conditions_left_contradictory_show_the_eviction_and_degrade():
    """kueue#14811: Admitted, QuotaReserved and Evicted all True."""
    job = fx.job("train-7", queue="gpu", suspend=True)
    wl = fx.workload(job, queue="gpu", cluster_queue="gpu-cq", conditions=fx.ADMITTED + [
        fx.cond("Evicted", reason="Preempted", message="Preempted to accommodate a workload (UID: x) in the "
                "ClusterQueue", minute=5)])
    doc = snap("train-7", job=Read(OBSERVED, job), workloads=Read(OBSERVED, [wl]))
    # the phase in Tau's words (the eviction does not unsay the admission), the eviction beside it
    assert doc["workloads"][0]["phase"] == "Admitted" and doc["workloads"][0]["admitted"] is True
    assert doc["workloads"][0]["evicted"] == {"reason": "Preempted", "message": "Preempted to accommodate a "
                                              "workload (UID: x) in the ClusterQueue"}
    assert doc["workloads"][0]["reason"] is None
    assert doc["degraded"] and doc["reason"].startswith("Kueue evicted workload job-train-7-3f9a2: Preempted: ")


def test_a_rejected_admission_check_degrades_and_names_the_check():
    job = fx.job("train-7", queue="gpu", suspend=True)
    wl = fx.workload(job, queue="gpu", conditions=[fx.cond("QuotaReserved", reason="QuotaReserved")], checks=[
        {"name": "provisioning", "state": "Rejected", "message": "no capacity in zone", "lastTransitionTime": fx.t(4)},
        {"name": "multikueue", "state": "Pending", "lastTransitionTime": fx.t(4)}])
    doc = snap("train-7", job=Read(OBSERVED, job), workloads=Read(OBSERVED, [wl]))
    assert doc["reason"] == "admission check provisioning rejected workload job-train-7-3f9a2: no capacity in zone"
    assert [c["name"] for c in doc["workloads"][0]["admissionChecks"]] == ["multikueue", "provisioning"]


def test_a_multikueue_placement_seen_from_the_manager_is_a_phase_of_its_own():
    job = fx.job("train-7", queue="gpu", status={"active": 1})
    wl = fx.workload(job, queue="gpu", cluster_queue="gpu-cq", conditions=fx.ADMITTED,
                     extra={"clusterName": "worker-eu", "nominatedClusterNames": ["worker-us", "worker-eu"]})
    doc = snap("train-7", job=Read(OBSERVED, job), workloads=Read(OBSERVED, [wl]))
    assert doc["workloads"][0]["nominatedClusters"] == ["worker-eu", "worker-us"]
    placement = next(p for p in doc["phases"] if p["name"] == "MultiKueue placement")
    assert placement == {"name": "MultiKueue placement", "status": "active",
                         "detail": "selected worker cluster worker-eu", "hint": None}


# -- reads that fail -------------------------------------------------------------------------------------------------

def test_a_submitter_job_whose_rayjob_is_denied_makes_the_rayjob_state_unknown():
    ray = fx.rayjob("tune", deployment="Running")
    submitter = fx.job("tune", owner=ray, status={"active": 1})
    doc = snap(job=Read(OBSERVED, submitter), rayjob=Read(UNAVAILABLE, None, "access denied by Kubernetes RBAC "
                                                          "reading the RayJob", denied=True))
    assert (doc["primary"], doc["lifecycle"], doc["degraded"]) == ("RayJob", "unknown", False)
    assert (doc["kind"], doc["state"]) == ("Job", "Running")  # Tau's: what was found, and the Job decides
    assert "is the submitter of RayJob 'tune', which cannot be read: access denied" in doc["stateDetail"]


def test_a_denied_workload_read_never_says_not_admitted():
    job = fx.job("train-7", queue="gpu", suspend=True)
    doc = snap("train-7", job=Read(OBSERVED, job), workloads=Read(UNAVAILABLE, None, "access denied", denied=True))
    kueue = next(p for p in doc["phases"] if p["name"] == "Kueue admission")
    assert kueue == {"name": "Kueue admission", "status": "warning", "detail": "workload status unavailable: access "
                     "denied", "hint": "request get/list access to workloads.kueue.x-k8s.io"}
    assert doc["workloads"] == [] and doc["observations"]["workloads"]["state"] == "unavailable"


# -- determinism ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture", sorted(fx.FIXTURES))
def test_the_snapshot_does_not_depend_on_the_order_of_lists(fixture):
    reads = reads_of(fx.FIXTURES[fixture]())
    first = snap(fx.FIXTURES[fixture]()["name"], **reads)
    rng = random.Random(fixture)
    for _ in range(5):
        shuffled = copy.deepcopy(reads)
        for key in ("workloads", "pods"):
            items = list(shuffled[key].value)
            rng.shuffle(items)
            for item in items:
                rng.shuffle(item.get("status", {}).get("conditions", []))
                rng.shuffle(item.get("status", {}).get("containerStatuses", []))
            shuffled[key] = Read(OBSERVED, items)
        assert snap(fx.FIXTURES[fixture]()["name"], **shuffled) == first


def test_as_of_is_the_latest_time_in_the_objects():
    doc = snap("train-7", **reads_of(fx.job_failed_oom()))
    assert doc["asOf"] == fx.t(9)


def test_a_finished_job_whose_kueue_workload_is_gone_skips_kueue_admission_instead_of_waiting_for_it():
    job = fx.job("train-7", queue="gpu", status={"conditions": [fx.cond("Complete")]})
    doc = snap("train-7", job=Read(OBSERVED, job))
    kueue = next(p for p in doc["phases"] if p["name"] == "Kueue admission")
    assert (kueue["status"], kueue["detail"]) == ("skipped", "queue 'gpu': no Kueue Workload is left")
    running = fx.job("train-7", queue="gpu", suspend=True)
    kueue = next(p for p in snap("train-7", job=Read(OBSERVED, running))["phases"] if p["name"] == "Kueue admission")
    assert (kueue["status"], kueue["detail"]) == ("active", "waiting for Kueue Workload")
