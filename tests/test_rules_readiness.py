"""taulib.rules.readiness: an attempt's readiness from its deployments, the transitions a revision may make, and how
a record reads in version 1's words."""

from __future__ import annotations

import pytest

from taulib.rules import readiness

T0, T1, T2 = "2026-12-01T10:00:00.000000Z", "2026-12-01T10:00:05.000000Z", "2026-12-01T10:00:09.000000Z"


def probe(at: str = T1, outcome: str = "success", code: str = "ok", message: str = "GET /health answered 200"):
    return {"observed_at": at, "outcome": outcome, "reason_code": code, "message": message}


def dep(name: str = "generator", state: str = "pending", ready: int = 0, expected: int = 2, endpoint: str = "pending",
        last_probe: dict | None = None) -> dict:
    urls = [f"http://127.0.0.1:{8000 + k}" for k in range(expected)] if endpoint == "published" else []
    return {"name": name, "state": state, "expected_backends": expected, "ready_backends": ready,
            "endpoint": endpoint, "urls": urls, "last_probe": last_probe,
            "backends": [{"backend": k + 1, "state": state, "port": None, "devices": [], "pid": None}
                         for k in range(expected)]}


def rec(*deployments: dict, revision: int = 1, at: str = T0, client: str = "waiting", restarts: int = 0,
        state: str | None = None) -> dict:
    deps = list(deployments) or [dep()]
    return {"schema_version": 2, "revision": revision, "updated_at": at, "client": client, "restarts": restarts,
            "state": state or readiness.aggregate(deps), "deployments": deps}


READY = dep(state="ready", ready=2, endpoint="published", last_probe=probe())


@pytest.mark.parametrize("states, expected", [
    (["pending"], "pending"), (["pending", "pending"], "pending"), (["restarting", "restarting"], "restarting"),
    (["ready", "ready"], "ready"), (["stopped", "stopped"], "stopped"), (["failed", "ready"], "failed"),
    (["stopped", "failed"], "failed"), (["starting"], "starting"), (["pending", "starting"], "starting"),
    (["ready", "starting"], "starting"), (["pending", "restarting"], "starting"), (["ready", "stopped"], "starting"),
])
def test_the_attempts_state_follows_from_its_deployments(states, expected):
    assert readiness.aggregate([{"state": s} for s in states]) == expected


@pytest.mark.parametrize("record, expected", [
    ({"schema_version": 1, "state": "running"}, "running"),
    ({"schema_version": 1, "state": "starting"}, "starting"),
    ({"schema_version": 2, "state": "restarting", "client": "waiting"}, "restarting"),
    ({"schema_version": 2, "state": "stopped", "client": "ended"}, "stopped"),
    ({"schema_version": 2, "state": "stopped", "client": "waiting"}, "stopped"),  # cancelled before it started
    ({"schema_version": 2, "state": "failed", "client": "running"}, "failed"),
    ({"schema_version": 2, "state": "ready", "client": "running"}, "running"),
    ({"schema_version": 2, "state": "ready", "client": "waiting"}, "starting"),
    ({"schema_version": 2, "state": "starting", "client": "waiting"}, "starting"),
    ({"schema_version": 2, "state": "pending", "client": "waiting"}, "starting"),
    ({"schema_version": 2, "state": "ready", "client": "ended"}, "stopped"),
])
def test_a_record_reads_in_version_1s_words(record, expected):
    assert readiness.phase(record) == expected


def test_a_message_loses_its_control_characters_and_is_cut_at_512_characters():
    assert readiness.clean("a\tb\nc\x7fd\x85e\x1fok\u2028!") == "a b c d e ok !"
    assert readiness.clean("GET /health answered 503 ü") == "GET /health answered 503 ü"
    assert readiness.clean("x" * 512) == "x" * 512
    cut = readiness.clean("y" * 600)
    assert len(cut) == 512 and cut.endswith("...") and cut.startswith("y" * 509)


def test_the_whole_life_of_a_deployment_is_a_chain_of_valid_transitions():
    life = [rec(dep()),
            rec(dep(state="starting"), revision=2, at=T1),
            rec(dep(state="starting", ready=1, last_probe=probe(T1)), revision=3, at=T1),
            rec(READY, revision=4, at=T1),
            rec(READY, revision=5, at=T2, client="running"),
            rec(dep(state="stopped", endpoint="published", last_probe=probe()), revision=6, at=T2, client="ended")]
    assert readiness.transition(None, life[0]) is None
    for before, after in zip(life, life[1:], strict=False):
        assert readiness.transition(before, after) is None, (before, after)


def test_a_requeued_allocation_restarts_from_stopped_or_ready_and_starts_again():
    stopped = rec(dep(state="stopped", endpoint="published", last_probe=probe()), revision=6, at=T1,
                  client="ended")
    again = rec(dep(state="restarting", last_probe=None), revision=7, at=T2, restarts=1)
    assert readiness.transition(stopped, again) is None  # its endpoint and its probe evidence start afresh
    assert readiness.transition(rec(READY, revision=4, client="running"), dict(again, revision=5)) is None
    assert readiness.transition(again, rec(dep(state="starting"), revision=8, at=T2, restarts=1)) is None
    assert readiness.transition(None, rec(dep(state="restarting"))) is None  # no record before the requeue
    assert readiness.transition(rec(dep(state="restarting", last_probe=probe()), revision=7),
                                rec(dep(state="starting"), revision=8)) == \
        "deployment 'generator''s probe evidence goes back"  # after the restart, it never goes back again


@pytest.mark.parametrize("after, message", [
    (rec(dep(), state="starting"), "the readiness state is starting, but its deployments make it pending"),
    (dict(rec(), deployments=[]), "a readiness record of version 2 has at least one deployment"),
    (rec(dep(), dep()), "a deployment is named twice"),
    (rec(dep(ready=3)), "deployment 'generator' has 3 of 2 backends ready"),
    (rec(dict(dep(), ready_backends=-1)), "deployment 'generator' has -1 of 2 backends ready"),
    (rec(dict(dep(), backends=[])), "deployment 'generator' lists 0 backends, not its 2"),
    (rec(dep(state="ready", ready=2)), "deployment 'generator' is ready without all its backends ready and its "
                                       "endpoint published"),
    (rec(dep(state="ready", ready=1, endpoint="published")), "deployment 'generator' is ready without"),
    (rec(dep(state="starting", ready=2, endpoint="published")), "deployment 'generator' is starting with all its "
                                                                "backends ready and its endpoint published"),
    (rec(dep(state="pending", ready=1)), "deployment 'generator' is pending with a backend ready or its endpoint "
                                         "not pending"),
    (rec(dep(state="restarting", endpoint="failed")), "deployment 'generator' is restarting with a backend ready"),
    (rec(dict(dep(), urls=["http://127.0.0.1:1"])), "deployment 'generator' names URLs exactly when its endpoint "
                                                    "is published"),
    (rec(dep(state="stopped", endpoint="published") | {"urls": []}), "deployment 'generator' names URLs exactly"),
])
def test_a_record_whose_fields_contradict_each_other_is_refused(after, message):
    assert readiness.transition(None, after).startswith(message)


@pytest.mark.parametrize("after", [rec(dep(state="starting"), revision=2), rec(dep(state="starting")),
                                   rec(dep(state="pending"), revision=2), rec(READY), rec(dep(state="failed"))])
def test_the_first_record_is_revision_1_pending_restarting_or_stopped(after):
    assert readiness.transition(None, after) == "the first readiness record is revision 1, pending, restarting or " \
                                                "stopped"
    assert readiness.transition(None, rec(dep(state="stopped"))) is None  # cancelled before anything started


BEFORE = rec(dep(state="starting", ready=1, last_probe=probe(T1)), revision=3, at=T1)


@pytest.mark.parametrize("before, after, message", [
    ({"schema_version": 1, "revision": 1}, rec(revision=2), "an attempt's readiness cannot change its version"),
    (BEFORE, rec(dep(state="starting", ready=1, last_probe=probe(T1)), revision=5, at=T1),
     "revision 5 does not follow 3"),
    (BEFORE, rec(dep(state="starting", ready=1, last_probe=probe(T1)), revision=3, at=T1),
     "revision 3 does not follow 3"),
    (BEFORE, rec(dep(state="starting", ready=1, last_probe=probe(T1)), revision=4, at=T0),
     "the readiness goes back in time"),
    (rec(READY, revision=3, restarts=2), rec(READY, revision=4, restarts=1), "the readiness goes back in time"),
    (BEFORE, rec(dep(name="judge", state="starting", ready=1, last_probe=probe(T1)), revision=4, at=T1),
     "the deployments and their expected backends never change"),
    (BEFORE, rec(dep(state="starting", ready=1, expected=3, last_probe=probe(T1)), revision=4, at=T1),
     "the deployments and their expected backends never change"),
    (BEFORE, rec(dep(state="starting", ready=1, last_probe=probe(T1)), dep(name="judge"), revision=4, at=T1),
     "the deployments and their expected backends never change"),
    (rec(READY, revision=4, client="running"), rec(READY, revision=5, client="waiting"),
     "the client cannot go from running to waiting"),
    (rec(READY, revision=4, client="ended"), rec(READY, revision=5, client="running"),
     "the client cannot go from ended to running"),
    (BEFORE, rec(dep(state="pending", last_probe=probe(T1)), revision=4, at=T1),
     "deployment 'generator' cannot go from starting to pending"),
    (rec(dep(state="failed", endpoint="failed"), revision=4), rec(dep(state="starting"), revision=5),
     "deployment 'generator' cannot go from failed to starting"),
    (rec(dep(state="failed", endpoint="failed"), revision=4), rec(dep(state="restarting"), revision=5),
     "deployment 'generator' cannot go from failed to restarting"),
    (rec(dep(state="stopped"), revision=4), rec(dep(state="starting"), revision=5),
     "deployment 'generator' cannot go from stopped to starting"),
    (rec(dep(state="ready", ready=2, endpoint="published"), revision=4),
     rec(dep(state="failed", ready=2, endpoint="failed"), revision=5),
     "deployment 'generator''s endpoint cannot go from published to failed"),
    (rec(dep(state="failed", endpoint="failed"), revision=4), rec(dep(state="stopped", endpoint="pending"), revision=5),
     "deployment 'generator''s endpoint cannot go from failed to pending"),
    (BEFORE, rec(dep(state="starting", ready=1, last_probe=None), revision=4, at=T1),
     "deployment 'generator''s probe evidence goes back"),
    (BEFORE, rec(dep(state="starting", ready=1, last_probe=probe(T0)), revision=4, at=T1),
     "deployment 'generator''s probe evidence goes back"),
])
def test_a_revision_that_breaks_a_transition_rule_is_refused_naming_the_rule(before, after, message):
    assert readiness.transition(before, after) == message


def test_probe_evidence_may_stay_the_same_or_grow_newer_and_a_failure_may_fail_a_published_deployment():
    assert readiness.transition(BEFORE, rec(dep(state="starting", ready=1, last_probe=probe(T1)), revision=4,
                                            at=T1)) is None
    assert readiness.transition(BEFORE, rec(dep(state="starting", ready=1, last_probe=probe(T2)), revision=4,
                                            at=T2)) is None
    failed = dep(state="failed", ready=2, endpoint="published", last_probe=probe(T2, "failure", "exited", "gone"))
    assert readiness.transition(rec(READY, revision=4, client="running"),
                                rec(failed, revision=5, at=T2, client="running")) is None
    assert readiness.transition(rec(failed, revision=5, client="running"),
                                rec(dict(failed, state="stopped"), revision=6, client="ended", state="failed")) \
        == "the readiness state is failed, but its deployments make it stopped"


def test_the_transitions_are_those_of_the_table_and_stopped_may_restart():
    assert readiness.NEXT["stopped"] == {"stopped", "restarting"}
    assert readiness.NEXT["failed"] == {"failed", "stopped"}
    assert set(readiness.NEXT) == set(readiness.STATES)
    assert all(targets <= set(readiness.STATES) for targets in readiness.NEXT.values())
