"""Tau's v1alpha1 `state`, `kind` and `reason` (taulib.k8s.v1alpha1, through taulib.k8s.status), rule by rule.

Each case is one branch of Tau's `deriveState`/`outputState`/`outputKind` (core/status in Azure/taugrid), with the
word tau's own `lifecycle` gives beside it, so the mapping table of tau-status(7) is pinned here.
"""

from __future__ import annotations

import k8s_fixtures as fx
import pytest

from taulib import schema
from taulib.k8s import status, v1alpha1
from taulib.k8s.api import NOT_FOUND, NOT_INSTALLED, OBSERVED, UNAVAILABLE, Read

ABSENT = Read(NOT_FOUND)
NOT_SERVED = Read(NOT_FOUND, None, f"{NOT_INSTALLED}: the API server does not serve rayjobs.ray.io/v1")
NONE = Read(OBSERVED, [])


def snap(name="train-7", *, job=ABSENT, rayjob=ABSENT, workloads=NONE, pods=NONE, checks=None) -> dict:
    doc = status.snapshot(name, fx.NS, job=job, rayjob=rayjob, workloads=workloads, pods=pods,
                          admission_checks=checks)
    schema.validate(doc, "workload-status")
    schema.validate(doc, "tau-v1alpha1-status")
    return doc


def pair(doc: dict) -> tuple[str, str]:
    return doc["state"], doc["lifecycle"]


# -- a batch Job: Failed, Complete, active, suspended, else admitted ------------------------------------------------

@pytest.mark.parametrize("job_status, suspend, expected", [
    ({"conditions": [fx.cond("Complete"), fx.cond("Failed", reason="BackoffLimitExceeded")]}, False,
     ("Failed", "failed")),
    ({"conditions": [fx.cond("Complete")], "succeeded": 1}, False, ("Complete", "succeeded")),
    # Tau reads Failed=True only; tau's lifecycle also ends on FailureTarget and SuccessCriteriaMet
    ({"conditions": [fx.cond("FailureTarget", reason="BackoffLimitExceeded")], "active": 1}, False,
     ("Running", "failed")),
    ({"conditions": [fx.cond("SuccessCriteriaMet")]}, False, ("Admitted (no active pods yet)", "succeeded")),
    ({"active": 2}, False, ("Running", "running")),
    ({}, True, ("Pending (suspended; Kueue not yet admitted)", "pending")),
    ({}, False, ("Admitted (no active pods yet)", "pending")),
    ({"conditions": [fx.cond("Failed", "False")], "active": 1}, False, ("Running", "running")),
])
def test_a_jobs_state_follows_taus_order_of_conditions_active_pods_and_suspension(job_status, suspend, expected):
    job = fx.job("train-7", suspend=suspend, status=job_status)
    assert pair(snap(job=Read(OBSERVED, job))) == expected


def test_a_job_whose_active_pods_all_wait_is_running_for_tau_and_pending_for_tau_lifecycle():
    job = fx.job("train-7", status={"active": 1})
    pod = fx.job_pod("train-7-a", job, phase="Pending", containers=[fx.ctr("main", fx.waiting("ContainerCreating"))])
    assert pair(snap(job=Read(OBSERVED, job), pods=Read(OBSERVED, [pod]))) == ("Running", "pending")


# -- a RayJob alone: the substring rules, then jobDeploymentStatus (else jobStatus) ---------------------------------

@pytest.mark.parametrize("deployment, job_status, reason, expected", [
    ("Running", "RUNNING", None, ("Running", "running")),
    ("Running", "", None, ("Running", "running")),
    ("Initializing", "RUNNING", None, ("Initializing", "pending")),  # the controller's lifecycle wins
    ("New", "", None, ("New", "pending")),
    ("", "", None, ("New", "pending")),
    ("", "RUNNING", None, ("Running", "pending")),  # jobStatus only when jobDeploymentStatus is unset
    ("Suspended", "", None, ("Pending (suspended; Kueue not yet admitted)", "pending")),
    ("Complete", "SUCCEEDED", None, ("Complete", "succeeded")),
    ("Complete", "", None, ("Complete", "unknown")),
    ("Complete", "STOPPED", None, ("Failed", "failed")),  # STOPPED is Failed, even under a Complete controller
    ("Complete", "FAILED", None, ("Failed", "failed")),
    ("Failed", "RUNNING", "DeadlineExceeded", ("Failed", "failed")),
    ("ValidationFailed", "", None, ("Failed", "failed")),
    ("Running", "FAILED", None, ("Failed", "running")),  # a stale jobStatus: Tau says Failed, tau degrades
    ("Running", "RUNNING", "SubmissionFailed", ("Failed", "running")),  # Tau reads the reason too
    ("Retrying", "", None, ("Retrying", "pending")),  # anything else is passed on raw
    ("Waiting", "", None, ("Waiting", "pending")),
    ("Suspending", "", None, ("Suspending", "pending")),
])
def test_a_rayjobs_state_follows_taus_rules(deployment, job_status, reason, expected):
    ray = fx.rayjob("tune", deployment=deployment, job_status=job_status, reason=reason)
    assert pair(snap("tune", rayjob=Read(OBSERVED, ray))) == expected


def test_an_unknown_deployment_status_is_passed_on_raw_and_tau_lifecycle_says_unknown():
    ray = fx.rayjob("tune", deployment="Hibernating")
    doc = snap("tune", rayjob=Read(OBSERVED, ray))
    assert (doc["state"], doc["lifecycle"]) == ("Hibernating", "unknown")


def test_a_job_beside_a_rayjob_decides_the_state_even_when_it_is_the_rayjobs_submitter():
    ray = fx.rayjob("tune", deployment="Failed", job_status="RUNNING", reason="DeadlineExceeded")
    submitter = fx.job("tune", owner=ray, status={"active": 1})
    doc = snap("tune", job=Read(OBSERVED, submitter), rayjob=Read(OBSERVED, ray))
    assert (doc["kind"], doc["primary"], doc["state"], doc["lifecycle"]) == ("Job+RayJob", "RayJob", "Running",
                                                                               "failed")
    assert (doc["job"]["state"], doc["rayJob"]["state"]) == ("Running", "Failed")  # each object alone, in Tau's words
    assert (doc["job"]["lifecycle"], doc["rayJob"]["lifecycle"]) == ("running", "failed")
    assert doc["reason"] == "DeadlineExceeded" and doc["degraded"] is True


# -- nothing found: NotFound only when both reads said so --------------------------------------------------------

@pytest.mark.parametrize("job, rayjob, expected", [
    (ABSENT, ABSENT, ("NotFound", "not_found")),
    (ABSENT, NOT_SERVED, ("NotFound", "not_found")),
    (Read(UNAVAILABLE, None, "access denied", denied=True), ABSENT, ("Unknown", "unknown")),
    (ABSENT, Read(UNAVAILABLE, None, "HTTP 500"), ("Unknown", "unknown")),
])
def test_nothing_found_is_notfound_only_when_nothing_failed(job, rayjob, expected):
    doc = snap(job=job, rayjob=rayjob)
    assert (pair(doc), doc["kind"], doc["primary"]) == (expected, "Unknown", None)


def test_a_type_that_is_not_installed_is_unavailable_in_taus_exact_words():
    doc = snap(job=Read(OBSERVED, fx.job("train-7", status={"active": 1})), rayjob=NOT_SERVED)
    assert doc["observations"]["rayJob"] == {"state": "unavailable", "reason": "resource type is not installed",
                                             "detail": "the API server does not serve rayjobs.ray.io/v1"}


# -- kind: what was found ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("job, ray, expected", [(True, True, "Job+RayJob"), (True, False, "Job"),
                                                (False, True, "RayJob"), (False, False, "Unknown")])
def test_kind_is_what_was_found(job, ray, expected):
    assert v1alpha1.kind(job, ray) == expected


# -- MultiKueue: the manager's view, with no pods of its own ------------------------------------------------------

def mk_job(active: int = 0, conditions: list | None = None) -> dict:
    job = fx.job("train-7", queue="gpu", status={"active": active, "conditions": conditions or []})
    job["spec"]["managedBy"] = v1alpha1.MULTIKUEUE_CONTROLLER
    return job


def mk_workload(job: dict, checks: list[tuple[str, str]], **extra) -> dict:
    return fx.workload(job, queue="gpu", conditions=fx.ADMITTED, extra=extra, checks=[
        {"name": name, "state": state, "lastTransitionTime": fx.t(2)} for name, state in checks])


MK = Read(OBSERVED, {"spec": {"controllerName": v1alpha1.MULTIKUEUE_CONTROLLER}})
OTHER = Read(OBSERVED, {"spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"}})
DENIED = Read(UNAVAILABLE, None, "access denied", denied=True)


@pytest.mark.parametrize("checks, extra, lookups, expected", [
    ([("mk", "Rejected"), ("prov", "Ready")], {}, {"mk": MK, "prov": OTHER}, "Rejected"),
    ([("mk", "Retry")], {"clusterName": "w1"}, {"mk": MK}, "Retry"),
    ([("mk", "Ready")], {"clusterName": "w1"}, {"mk": MK}, "Ready"),
    ([("mk", "Pending")], {"clusterName": "w1"}, {"mk": MK}, "Selected"),
    ([("mk", "Pending")], {"nominatedClusterNames": ["w2", "w1"]}, {"mk": MK}, "Nominated"),
    ([("mk", "Pending")], {}, {"mk": MK}, "Pending"),
    # the controller, once looked up, decides: a check named "multikueue" of another controller is not MultiKueue's
    ([("multikueue", "Rejected")], {}, {"multikueue": OTHER}, "Admitted (no active pods yet)"),
    # without a lookup, only Tau's exact-name fallback makes it MultiKueue's
    ([("multikueue", "Rejected")], {}, {"multikueue": DENIED}, "Rejected"),
    ([("mk", "Rejected")], {}, {"mk": DENIED}, "Admitted (no active pods yet)"),
])
def test_the_manager_view_of_a_multikueue_workload_says_its_placement(checks, extra, lookups, expected):
    job = fx.job("train-7", queue="gpu")  # not managedBy MultiKueue: only the workload's fields can tell
    wl = mk_workload(job, checks, **extra)
    doc = snap(job=Read(OBSERVED, job), workloads=Read(OBSERVED, [wl]), checks=lookups)
    assert doc["state"] == expected


def test_the_manager_view_takes_terminal_conditions_then_the_managers_job():
    failed = mk_job(active=1, conditions=[fx.cond("Failed", reason="BackoffLimitExceeded")])
    assert snap(job=Read(OBSERVED, failed))["state"] == "Failed"
    complete = mk_job(conditions=[fx.cond("Complete")])
    assert snap(job=Read(OBSERVED, complete))["state"] == "Complete"
    running = mk_job(active=1)
    assert snap(job=Read(OBSERVED, running))["state"] == "Running"
    waiting = mk_job()
    wl = mk_workload(waiting, [("mk", "Pending")], nominatedClusterNames=["w1"])
    assert snap(job=Read(OBSERVED, waiting), workloads=Read(OBSERVED, [wl]), checks={"mk": MK})["state"] == \
        "Nominated"


def test_with_pods_here_a_multikueue_workload_is_read_as_any_other():
    job = mk_job(active=0)
    pod = fx.job_pod("train-7-a", job, phase="Pending", containers=[fx.ctr("main", fx.waiting("ContainerCreating"))])
    assert snap(job=Read(OBSERVED, job), pods=Read(OBSERVED, [pod]))["state"] == "Admitted (no active pods yet)"


@pytest.mark.parametrize("deployment, expected", [
    ("Running", "Running"), ("Suspended", "Pending (suspended; Kueue not yet admitted)"),
    ("Initializing", "Initializing"), ("New", "New"), ("Retrying", "Pending")])
def test_the_manager_view_of_a_multikueue_rayjob_reads_its_deployment_status_exactly(deployment, expected):
    ray = fx.rayjob("tune", deployment=deployment)
    ray["spec"]["managedBy"] = v1alpha1.MULTIKUEUE_CONTROLLER
    assert snap("tune", rayjob=Read(OBSERVED, ray))["state"] == expected


# -- admission check controllers --------------------------------------------------------------------------------

def test_each_admission_check_names_its_controller_or_says_the_lookup_failed():
    job = fx.job("train-7", queue="gpu", suspend=True)
    wl = mk_workload(job, [("mk", "Ready"), ("prov", "Pending"), ("gone", "Pending"), ("unasked", "Pending")])
    doc = snap(job=Read(OBSERVED, job), workloads=Read(OBSERVED, [wl]),
               checks={"mk": MK, "prov": DENIED, "gone": Read(NOT_FOUND)})
    assert {c["name"]: (c["controller"], c["controllerLookupFailed"]) for c in doc["workloads"][0]["admissionChecks"]} \
        == {"mk": (v1alpha1.MULTIKUEUE_CONTROLLER, False), "prov": (None, True), "gone": (None, True),
            "unasked": (None, False)}


# -- reason and degraded ----------------------------------------------------------------------------------------

def test_the_reason_is_the_first_container_issue_else_the_failure_in_taus_words():
    job = fx.job("train-7", status={"failed": 1, "conditions": [
        fx.cond("Failed", reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit")]})
    assert snap(job=Read(OBSERVED, job))["reason"] == "BackoffLimitExceeded Job has reached the specified backoff limit"
    pod = fx.job_pod("train-7-a", job, phase="Failed", containers=[fx.ctr("main", fx.terminated(137, "OOMKilled"))])
    doc = snap(job=Read(OBSERVED, job), pods=Read(OBSERVED, [pod]))
    assert doc["reason"] == "train-7-a/main terminated reason=OOMKilled exit=137"
    assert doc["issues"] == [doc["reason"], "BackoffLimitExceeded Job has reached the specified backoff limit"]


# -- teardown: terminal pod evidence ----------------------------------------------------------------------------

def test_a_failed_rayjob_torn_down_says_its_terminal_pod_evidence_is_unavailable():
    ray = fx.rayjob("tune", deployment="Failed", job_status="FAILED", reason="AppFailed", message="exit 1",
                    cluster="tune-rc")
    doc = snap("tune", rayjob=Read(OBSERVED, ray))
    assert doc["pods"] == [] and doc["podEvidence"]["state"] == "unavailable"
    assert doc["issues"] == ["AppFailed exit 1", "terminal pod evidence is unavailable: the RayJob ended and none of "
                             "its RayCluster's pods is left (torn down), so how its containers ended cannot be read "
                             "here"]


def test_a_succeeded_rayjob_torn_down_is_not_degraded_but_says_the_evidence_is_gone():
    ray = fx.rayjob("tune", deployment="Complete", job_status="SUCCEEDED", cluster="tune-rc")
    doc = snap("tune", rayjob=Read(OBSERVED, ray))
    assert (doc["degraded"], doc["reason"], doc["podEvidence"]["state"]) == (False, None, "unavailable")


def test_a_failed_workload_whose_pods_cannot_be_read_says_so_as_an_issue():
    job = fx.job("train-7", status={"failed": 1, "conditions": [fx.cond("Failed", reason="BackoffLimitExceeded")]})
    doc = snap(job=Read(OBSERVED, job), pods=Read(UNAVAILABLE, None, "access denied reading pods", denied=True))
    assert doc["issues"] == ["BackoffLimitExceeded", "terminal pod evidence is unavailable: its pods cannot be read: "
                             "access denied reading pods"]


def test_a_running_workload_with_its_pods_read_has_its_pod_evidence():
    job = fx.job("train-7", status={"active": 1})
    pod = fx.job_pod("train-7-a", job, phase="Running", containers=[fx.ctr("main", fx.running(), ready=True)])
    assert snap(job=Read(OBSERVED, job), pods=Read(OBSERVED, [pod]))["podEvidence"] == {"state": "observed",
                                                                                         "reason": None}


def test_a_failed_pod_of_a_rayjob_that_succeeded_is_phase_teardown_and_judges_nothing():
    scene = fx.rayjob_succeeded_with_failed_teardown_pod()
    objs = scene["objects"]
    ray = next(o for o in objs if o["kind"] == "RayJob")
    submitter = next(o for o in objs if o["kind"] == "Job")
    doc = snap("tune", job=Read(OBSERVED, submitter), rayjob=Read(OBSERVED, ray),
               pods=Read(OBSERVED, [o for o in objs if o["kind"] == "Pod"]))
    worker = next(p for p in doc["pods"] if p["role"] == "worker")
    assert (worker["phase"], worker["health"], doc["degraded"]) == ("Teardown", "teardown", False)


def test_every_lifecycle_word_is_one_of_the_states_every_tau_status_uses():
    for name, scene in fx.FIXTURES.items():
        objs = scene()["objects"]
        job = next((o for o in objs if o["kind"] == "Job" and o["metadata"]["name"] == scene()["name"]), None)
        ray = next((o for o in objs if o["kind"] == "RayJob"), None)
        doc = snap(scene()["name"], job=Read(OBSERVED, job) if job else ABSENT,
                   rayjob=Read(OBSERVED, ray) if ray else ABSENT)
        assert doc["lifecycle"] in status.STATES, name
        assert doc["degraded"] == (doc["reason"] is not None) == bool(doc["issues"]), name
