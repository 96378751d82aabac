"""share/schemas/status.schema.json: every run status a real local run goes through matches it, the schema refuses
what the status never is (a key it does not have, a key missing, a state it has no word for), and the tests' own
hooks (helpers.check_statuses, behind helpers.tau and conftest's statuses_validated) validate what they are given."""

from __future__ import annotations

import copy
import json

import pytest

from helpers import CLIENT, PYTHON, check_printed, check_statuses, init_run, plan, settle, tau, wait_for
from taulib import schema


def printed(command: str, *args: str, input: str | None = None) -> dict:
    """The one status a command printed (tau.status itself, or the one tau-drive's result carries), validated."""
    proc = tau(command, *args, input=input)
    assert proc.returncode == 0, proc.stderr
    assert check_printed(proc.stdout, command) == 1
    doc = json.loads(proc.stdout)
    return doc if doc["kind"] == "tau.status" else doc["status"]


def states(doc: dict) -> list[str]:
    return [shard["state"] for shard in doc["shards"]]


@pytest.mark.slow
def test_the_statuses_of_a_local_run_from_pending_to_cancelled_and_succeeded_all_match_the_schema(workspace):
    gate = workspace / "gate"
    command = [PYTHON, CLIENT, "--rows-per-file", "10", "--wait-for", str(gate), "--fail-first", "shard-00001"]
    run_dir = init_run(workspace, plan_doc=plan(records=30, shards=3, command=command, scheduler={
        "profile": "local", "local": {"max_parallel": 2, "mem": "1G"}}, retry={"escalate": {"mem": 2}}))
    run = str(run_dir)

    assert states(printed("tau-status", run)) == ["pending"] * 3  # no attempt yet: every key there, null

    assert tau("tau-submit", run).returncode == 0

    def two_running() -> dict | None:
        doc = printed("tau-status", run)
        return doc if all(shard["progress"] for shard in doc["shards"][:2]) else None

    doc = wait_for(two_running, what="two running clients")
    assert states(doc) == ["running", "running", "pending"]  # two task slots: the third waits, queued
    assert doc["shards"][2]["evidence"]["effective_state"] == "pending"

    gate.touch()
    reconciled = settle(run_dir)  # tau-reconcile's statuses, with their changes
    assert "changes" in reconciled
    doc = printed("tau-status", run)
    assert states(doc) == ["succeeded", "failed", "succeeded"]
    failed = doc["shards"][1]
    assert failed["last_output"] and failed["log"] and failed["next"]["action"] == "submit"
    assert failed["usage"]["measured"] is True and "escalate" in doc["budget"]
    assert failed["request"] == failed["next"]["request"] == {"mem": "1G", "time": None}  # it exited, not killed

    assert tau("tau-cancel", run, "--shard", "shard-00001").returncode == 0
    assert states(printed("tau-status", run))[1] == "cancelled"
    assert tau("tau-cancel", run).returncode == 0
    doc = printed("tau-status", run)
    assert doc["state"] == "cancelled" and doc["cancelled"] is not None

    assert tau("tau-retry", run, "--reopen").returncode == 0
    assert tau("tau-retry", run, "--shard", "shard-00001", "--reopen").returncode == 0
    settle(run_dir)
    doc = printed("tau-drive", run, "--interval", "0.2")  # tau-drive's result carries its status
    assert doc["state"] == "succeeded" and states(doc) == ["succeeded"] * 3


# -- the schema is strict -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real(settled) -> dict:
    """The status of a settled run whose shard-00001 failed: sealed entries, and an unsealed failed one."""
    return printed("tau-status", str(settled))


def refusal(doc: dict) -> str:
    with pytest.raises(schema.SchemaViolation) as err:
        schema.validate(doc, "status", "status")
    return err.value.message


def test_a_real_status_matches_and_the_failed_shard_has_every_key(real):
    schema.validate(real, "status")
    assert real["shards"][1]["state"] == "failed" and real["shards"][1]["evidence"] is not None


def test_a_key_the_status_does_not_have_is_refused_at_every_level(real):
    assert refusal(dict(real, eta=3)) == ("status does not match schema 'status' at /: unexpected property 'eta'")
    doc = copy.deepcopy(real)
    doc["shards"][1]["last_outputs"] = ["x"]
    assert refusal(doc) == ("status does not match schema 'status' at /shards/1: unexpected property 'last_outputs' "
                            "(did you mean 'last_output'?)")
    doc = copy.deepcopy(real)
    doc["shards"][1]["evidence"]["observation"] = dict(doc["shards"][1]["evidence"]["observation"] or {}, zz=1)
    assert refusal(doc).startswith("status does not match schema 'status' at /shards/1/evidence/observation: ")


def test_a_key_the_status_always_has_is_required(real):
    assert refusal({k: v for k, v in real.items() if k != "eta_seconds"}) == (
        "status does not match schema 'status' at /: missing required property 'eta_seconds'")
    doc = copy.deepcopy(real)
    del doc["shards"][0]["request"]  # a sealed shard's request is null, never absent
    assert refusal(doc) == "status does not match schema 'status' at /shards/0: missing required property 'request'"
    doc = copy.deepcopy(real)
    del doc["counts"]["exhausted"]  # every state is counted, zeros included
    assert refusal(doc) == "status does not match schema 'status' at /counts: missing required property 'exhausted'"


def test_a_state_the_status_has_no_word_for_is_refused(real):
    doc = copy.deepcopy(real)
    doc["shards"][1]["state"] = "done"
    assert refusal(doc) == (
        "status does not match schema 'status' at /shards/1/state: 'done' is not one of ['succeeded', 'candidate', "
        "'running', 'accounting_lag', 'pending', 'unknown', 'failed', 'exhausted', 'cancelled']")
    assert refusal(dict(real, state="exhausted")) == (
        "status does not match schema 'status' at /state: 'exhausted' is not one of ['succeeded', 'running', "
        "'accounting_lag', 'pending', 'unknown', 'failed', 'cancelled']")
    assert refusal(dict(real, lifecycle="cancelled")).startswith(
        "status does not match schema 'status' at /lifecycle: 'cancelled' is not one of ")


def test_a_measured_usage_has_its_figures_and_an_unmeasured_one_none(real):
    doc = copy.deepcopy(real)
    doc["shards"][0]["usage"]["measured"] = False  # figures beside measured false
    assert refusal(doc).startswith("status does not match schema 'status' at /shards/0/usage/")
    doc = copy.deepcopy(real)
    doc["shards"][0]["usage"]["cpus"] = None
    assert refusal(doc) == ("status does not match schema 'status' at /shards/0/usage/cpus: expected integer, "
                            "got null")


# -- the hooks validate ---------------------------------------------------------------------------------------------

def test_the_helper_refuses_an_invalid_status_wherever_it_is_carried(real):
    bad = dict(real, state="done")
    message = "does not match schema 'status' at /state: 'done' is not one of "
    with pytest.raises(AssertionError, match=f"^a tau.status document {message}"):
        check_statuses(bad)
    with pytest.raises(AssertionError, match=f"^tau-drive's output {message}"):
        check_printed(json.dumps({"kind": "tau.drive-result", "status": bad}), "tau-drive")
    lines = json.dumps(real) + "\n" + json.dumps(bad) + "\n"  # JSON Lines: each line is a document
    with pytest.raises(AssertionError, match=f"^tau-status's output {message}"):
        check_printed(lines, "tau-status")
    assert check_printed(lines.splitlines()[0] + "\nrun run: failed\n", "tau-status") == 1
    assert check_statuses({"kind": "tau.winners", "state": "done"}) == 0  # another document is not a status


def test_the_api_and_a_command_run_in_this_process_refuse_an_invalid_status(real):
    from taulib.api import RunStatus
    from taulib.cli import common

    assert RunStatus.of(real).state == "failed"
    with pytest.raises(AssertionError, match="^the Python API's status does not match schema 'status' at /shards/1"):
        RunStatus.of(dict(real, shards=[real["shards"][0], dict(real["shards"][1], winner=7)]))
    with pytest.raises(AssertionError, match="^a command's output does not match schema 'status' at /: missing"):
        common.emit({k: v for k, v in real.items() if k != "budget"})
