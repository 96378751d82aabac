"""taulib.rules.attempt: the attempt verdict from its record and its scheduler evidence, case by case."""

from __future__ import annotations

import pytest
from rules_fixtures import attempt, ev

from taulib.rules.attempt import WAITING, effective_attempt, queued, terminal_classification

# -- effective attempt state ----------------------------------------------------------------------------------

@pytest.mark.parametrize("life, evidence, expected", [
    ("running", ev("failed", "accounting", terminal=True, exit_code=3), ("failed", "scheduler reports failed "
                                                                          "(exit code 3)")),
    ("succeeded", ev("cancelled", "accounting", terminal=True, reason="cancelled by user"),
     ("failed", "cancelled by user")),
    ("succeeded", ev("completed", "accounting", terminal=True, exit_code=0),
     ("succeeded", "the attempt finished and recorded a complete result")),
    ("succeeded", None, ("succeeded", "the attempt finished and recorded a complete result")),
    ("running", ev("completed", "accounting", terminal=True, exit_code=0),
     ("failed", "the scheduler reports COMPLETED but the attempt never recorded its result")),
    ("submitted", ev("completed", "accounting", terminal=True, exit_code=0),
     ("failed", "the scheduler reports COMPLETED but the attempt never recorded its result")),
    ("submitted", ev("accounting_lag", "absent", reason="not in accounting"), ("accounting_lag", "not in accounting")),
    ("running", ev("unknown", "absent", reason=None), ("unknown", "the scheduler no longer knows this attempt")),
    ("running", ev("preempted", "accounting"), ("pending", "preempted; waiting to be requeued")),
    ("running", ev("requeued", "queue"), ("pending", "requeued; waiting to be requeued")),
    ("submitted", ev("pending"), ("pending", "queued")),
    ("submitted", ev("running"), ("running", "allocated, the attempt has not started yet")),
    ("running", ev("running"), ("running", "running")),
    ("running", None, ("running", "the attempt reports it is running")),
    ("submitted", None, ("pending", "submitted")),
])
def test_effective_attempt_state(life, evidence, expected):
    assert effective_attempt(attempt(life), evidence) == expected


@pytest.mark.parametrize("life, expected", [("running", ("running", "the attempt reports it is running")),
                                            ("submitted", ("pending", "submitted"))])
def test_a_failure_the_scheduler_has_not_made_final_is_no_failure_yet(life, expected):
    # squeue shows FAILED (or CANCELLED) for a moment while accounting has not caught up: not terminal evidence
    for state in ("failed", "cancelled", "timed_out", "out_of_memory", "node_failed"):
        assert effective_attempt(attempt(life), ev(state, "queue", terminal=False, exit_code=1)) == expected


def test_absence_without_a_reason_of_its_own_is_said_in_tau_s_words():
    assert effective_attempt(attempt("submitted"), ev("accounting_lag", "absent", reason=None)) == (
        "accounting_lag", "not yet in accounting")


def test_a_verdict_is_a_state_and_a_reason_by_name_and_by_place():
    verdict = effective_attempt(attempt("submitted"), ev("pending"))
    assert (verdict.state, verdict.reason) == ("pending", "queued") == tuple(verdict)


def test_terminal_evidence_recorded_before_it_carried_a_classification_is_classified_by_its_state():
    assert terminal_classification(ev("out_of_memory", "accounting", terminal=True)) == "out_of_memory"
    assert terminal_classification(ev("failed", "accounting", terminal=True, classification="preempted")) == (
        "preempted")
    assert terminal_classification(ev("deadline", "accounting", terminal=True)) == "failed"  # a state of its own


def test_a_failed_attempt_gives_its_own_reason():
    record = attempt("failed", {"classification": "failed", "reason": "client exited 2", "exit_code": 2})
    assert effective_attempt(record, None) == ("failed", "client exited 2")
    assert effective_attempt(attempt("failed"), ev("running")) == ("failed", "the attempt failed")


@pytest.mark.parametrize("state, classification", [
    ("completed", "completed_unfinalised"), ("cancelled", "cancelled"), ("timed_out", "timed_out"),
    ("node_failed", "node_failed"), ("out_of_memory", "out_of_memory"), ("failed", "failed")])
def test_terminal_classification(state, classification):
    assert terminal_classification(ev(state, "accounting", terminal=True)) == classification


# -- why a queued attempt waits (the scheduler's reason code, glossed) ---------------------------------------------

@pytest.mark.parametrize("code, expected", [
    ("Resources", "queued (Resources: waiting for free nodes/CPUs/memory)"),
    ("Priority", "queued (Priority: jobs of higher priority go first)"),
    ("QOSMaxSubmitJobPerUserLimit", "queued (QOSMaxSubmitJobPerUserLimit: the QOS's limit on the user's queued jobs)"),
    ("JobArrayTaskLimit", "queued (JobArrayTaskLimit: the array's %N throttle, scheduler.slurm.max_parallel)"),
    ("AssocMaxJobsLimit", "queued (AssocMaxJobsLimit: the association's MaxJobs)"),
    ("QOSMaxJobsPerUserLimit", "queued (QOSMaxJobsPerUserLimit: the QOS's MaxJobsPerUser)"),
    ("Dependency", "queued (Dependency: waits for another job)"),
    ("BeginTime", "queued (BeginTime: not before its begin time; a requeued task waits here)"),
    ("JobHeldUser", "queued (JobHeldUser: held by its user; scontrol release lets it start)"),
    ("SomethingNew", "queued (SomethingNew)"),  # a code without a gloss is said as it is, never dropped
    (None, "queued"),
])
def test_a_queued_attempt_says_the_schedulers_reason_and_what_a_limit_it_names_is(code, expected):
    assert queued(code) == expected
    assert effective_attempt(attempt("submitted"), ev("pending", reason=code)) == ("pending", expected)


def test_every_gloss_is_a_few_words_after_its_code():
    assert "Resources" in WAITING and "JobArrayTaskLimit" in WAITING
    for code, gloss in WAITING.items():
        assert code.isalnum() and gloss and gloss == gloss.strip() and not gloss.endswith(".") and len(gloss) < 90
        assert queued(code) == f"queued ({code}: {gloss})"


def test_only_the_queues_own_word_is_read_as_a_reason_code():
    # accounting's view of a pending task (squeue could not see it) says its state, not why it waits
    assert effective_attempt(attempt("submitted"), ev("pending", "accounting", reason="PENDING")) == (
        "pending", "queued")
    assert effective_attempt(attempt("submitted"), ev("pending", "accounting", reason="Resources")) == (
        "pending", "queued")


def test_an_attempt_asked_to_stop_while_queued_says_it_is_stopping_not_why_it_waited():
    assert effective_attempt(attempt("submitted"), ev("pending", reason="Priority"), STOPPED) == (
        "pending", f"stopping: {STOPPED}")


# -- roll-up --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("evidence, expected", [
    (ev("failed", "accounting", terminal=True, exit_code=1), "client exited 2"),
    (ev("failed", "accounting", terminal=True, exit_code=1, reason="exited with status 1"), "client exited 2"),
    (ev("running"), "client exited 2"),
    (ev("out_of_memory", "accounting", terminal=True, reason="OUT_OF_MEMORY"),
     "client exited 2; scheduler: OUT_OF_MEMORY"),
    (ev("timed_out", "accounting", terminal=True), "client exited 2; scheduler: scheduler reports timed_out"),
    (ev("cancelled", "accounting", terminal=True, reason="cancelled by user"),
     "client exited 2; scheduler: cancelled by user"),
])
def test_a_recorded_failure_keeps_only_what_the_scheduler_adds(evidence, expected):
    record = attempt("failed", {"classification": "failed", "reason": "client exited 2", "exit_code": 2})
    assert effective_attempt(record, evidence) == ("failed", expected)


# -- an attempt asked to stop (tau-cancel --attempt, a stall the plan stops) ---------------------------------------

STOPPED = "stopped by the user at 2026-01-01T00:00:00Z"


@pytest.mark.parametrize("life, evidence, expected", [
    ("running", ev("running"), ("running", f"stopping: {STOPPED}")),
    ("submitted", ev("pending"), ("pending", f"stopping: {STOPPED}")),
    ("running", ev("cancelled", "accounting", terminal=True, reason="cancelled by uid 0"), ("failed", STOPPED)),
    ("submitted", ev("cancelled", "accounting", terminal=True), ("failed", STOPPED)),
    ("running", ev("completed", "accounting", terminal=True, exit_code=0), ("failed", STOPPED)),
    ("running", ev("accounting_lag", "absent", reason="not in accounting"), ("accounting_lag", "not in accounting")),
    ("running", ev("unknown", "absent", reason=None), ("unknown", "the scheduler no longer knows this attempt")),
    ("succeeded", ev("completed", "accounting", terminal=True, exit_code=0),
     ("succeeded", "the attempt finished and recorded a complete result")),
])
def test_a_stopped_attempt_fails_with_the_stops_reason_once_it_ended_and_is_stopping_until_then(
        life, evidence, expected):
    assert effective_attempt(attempt(life), evidence, STOPPED) == expected


def test_a_stop_asked_of_an_attempt_that_succeeded_changes_nothing_the_scheduler_says_afterwards():
    ended = ev("cancelled", "accounting", terminal=True, reason="cancelled by uid 0")
    assert effective_attempt(attempt("succeeded"), ended, STOPPED) == ("failed", "cancelled by uid 0")


def test_a_stopped_attempt_that_recorded_its_own_failure_fails_with_the_stops_reason():
    record = attempt("failed", {"classification": "cancelled", "reason": "client killed", "exit_code": None})
    assert effective_attempt(record, None, STOPPED) == ("failed", STOPPED)
    assert effective_attempt(record, None) == ("failed", "client killed")
