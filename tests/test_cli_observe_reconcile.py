"""tau-observe (read-only, prints normalised observations) and tau-reconcile (validates them, applies them under
locks, prints the run status). Observations that are malformed or name another run or attempt change nothing."""

from __future__ import annotations

import copy
import datetime
import json
import time

import pytest

from helpers import CLIENT, PYTHON, copy_run, error_of, init_run, settle, snapshot, tau

from taulib import jsonio



def observation(run_id: str = "run", shard: str = "shard-00001", attempt: str = "attempt-0001",
                task_index: int = 1) -> dict:
    """A valid observations document: the local executor's accounting says the attempt failed."""
    return {"kind": "tau.observations", "schema_version": 1, "run_id": run_id,
            "observed_at": jsonio.now_rfc3339(), "executor": "local",
            "sources": {"queue": "observed", "accounting": "observed", "reason": None},
            "attempts": [{"shard_id": shard, "attempt_id": attempt,
                          "scheduler": {"executor": "local", "job_id": "submission-0001", "task_index": task_index},
                          "queue": None,
                          "accounting": {"state": "failed", "raw": "FAILED", "exit_code": 3,
                                         "reason": "exited with status 3"}}]}


# -- tau-observe --------------------------------------------------------------------------------------------------

def test_observe_prints_one_observations_document_and_writes_nothing(settled):
    before = snapshot(settled)
    proc = tau("tau-observe", str(settled))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 1
    doc = json.loads(proc.stdout)
    assert (doc["kind"], doc["schema_version"], doc["run_id"], doc["executor"]) == (
        "tau.observations", 1, "run", "local")
    assert doc["sources"] == {"queue": "observed", "accounting": "observed", "reason": None}
    assert doc["attempts"] == []  # every attempt has finished: nothing is live
    assert snapshot(settled) == before


@pytest.mark.slow
def test_observe_lists_the_live_attempts_of_a_running_run(workspace):
    run_dir = init_run(workspace, records=20, shards=2, command=[PYTHON, CLIENT, "--sleep", "1"])
    assert tau("tau-submit", str(run_dir)).returncode == 0
    deadline = time.monotonic() + 10
    while True:  # until the local supervisor has started: before that the attempts are absent from its queue
        proc = tau("tau-observe", str(run_dir))
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        if all(view["queue"] is not None for view in doc["attempts"]):
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert [(a["shard_id"], a["attempt_id"], a["scheduler"]) for a in doc["attempts"]] == [
        ("shard-00000", "attempt-0001", {"executor": "local", "job_id": "submission-0001", "task_index": 0}),
        ("shard-00001", "attempt-0001", {"executor": "local", "job_id": "submission-0001", "task_index": 1})]
    for view in doc["attempts"]:
        assert view["accounting"] is None
        assert view["queue"]["state"] in ("pending", "running")
    table = tau("tau-observe", str(run_dir), "-o", "table")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("run run (local) observed at ") and "queue observed, accounting observed" in lines[0]
    assert lines[2].split() == ["SHARD", "ATTEMPT", "SCHEDULER", "QUEUE", "ACCOUNTING"]
    assert [line.split()[:4] for line in lines[3:]] == [
        ["shard-00000", "attempt-0001", "local", "submission-0001_0"],
        ["shard-00001", "attempt-0001", "local", "submission-0001_1"]]
    final = settle(run_dir)
    assert (final["state"], final["degraded"], final["reason"]) == ("succeeded", False, None)
    table = tau("tau-observe", str(run_dir), "-o", "table")
    assert table.stdout.splitlines()[1:] == ["no live attempts"]


# -- tau-reconcile ------------------------------------------------------------------------------------------------

def test_observe_piped_into_reconcile_prints_the_run_status(settled):
    obs = tau("tau-observe", str(settled))
    proc = tau("tau-reconcile", str(settled), input=obs.stdout)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["kind"], doc["run_id"], doc["state"]) == ("tau.status", "run", "failed")
    assert {k: v for k, v in doc["counts"].items() if v} == {"succeeded": 3, "failed": 1}
    assert doc["retryable"] == ["shard-00001"]
    assert (doc["degraded"], doc["reason"]) == (True, "shard-00001 failed: the client exited with status 3")
    failed = [s for s in doc["shards"] if s["state"] == "failed"]
    assert [(s["id"], s["attempt"], s["winner"], s["reason"]) for s in failed] == [
        ("shard-00001", "attempt-0001", None, "the client exited with status 3")]
    assert doc["changes"] == []


def test_reconcile_as_a_table_has_a_header_and_one_line_per_shard(settled):
    obs = tau("tau-observe", str(settled))
    proc = tau("tau-reconcile", str(settled), "-o", "table", input=obs.stdout)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "run run: failed (succeeded 3, failed 1)"
    assert lines[1] == "degraded: shard-00001 failed: the client exited with status 3"
    assert lines[2] == ("budget: 1 failed attempts, 1 failed shards (stops past 10 attempts and 10% of the shards); "
                        "3 attempts a shard")
    # what the four finished attempts cost, measured by the local executor (rusage), seff's way
    assert lines[3].startswith("efficiency: 4 attempts measured; "), lines[3]
    assert lines[3].endswith(" core-hours, 0 GPU-hours")
    assert lines[4].startswith("  CPU ") and lines[4].endswith(" MiB") and "no memory requested, peak " in lines[4]
    assert lines[5].startswith("  slowest: ") and lines[5].count("attempt-0001") == 4, lines[5]
    # then the estimate, when the mean of the finished attempts rounds to a second or more (a busy machine's)
    header = lines.index("") + 1
    assert all(line.startswith("estimated time left: ") for line in lines[6:header - 1]) and header - 1 <= 7
    lines = lines[header - 4:]  # the header line as the fifth, whether or not an estimate was printed
    assert lines[4].split() == ["SHARD", "STATE", "ATTEMPT", "WINNER", "TRIES", "SCHEDULER", "PROGRESS", "USED",
                                "REASON"]
    assert [line.split()[:5] for line in lines[5:]] == [
        ["shard-00000", "succeeded", "attempt-0001", "attempt-0001", "1/3"],
        ["shard-00001", "failed", "attempt-0001", "-", "1/3"],
        ["shard-00002", "succeeded", "attempt-0001", "attempt-0001", "1/3"],
        ["shard-00003", "succeeded", "attempt-0001", "attempt-0001", "1/3"]]
    assert lines[6].endswith(f"; log {settled}/shards/shard-00001/attempts/attempt-0001/client.log")


def test_reconcile_records_the_evidence_it_is_given(settled, tmp_path):
    run_dir = copy_run(settled, tmp_path / "copy")
    path = run_dir / "shards/shard-00001/attempts/attempt-0001/observation.json"
    previous = json.loads(path.read_text()) if path.exists() else None
    proc = tau("tau-reconcile", str(run_dir), input=json.dumps(observation()))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["changes"] == [{"shard_id": "shard-00001", "attempt_id": "attempt-0001", "rule": "accounting-terminal",
                               "from": previous and previous["state"], "to": "failed"}]
    record = json.loads(path.read_text())
    assert (record["state"], record["source"], record["terminal"], record["exit_code"], record["revision"]) == (
        "failed", "accounting", True, 3, 1 + (previous["revision"] if previous else 0))
    again = tau("tau-reconcile", str(run_dir), input=json.dumps(observation()))
    assert again.returncode == 0 and json.loads(again.stdout)["changes"] == []


# -- observations that must be refused ----------------------------------------------------------------------------

def _changed(**changes) -> str:
    doc = observation()
    for path, value in changes.items():
        node = doc
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is _DELETE:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return json.dumps(doc)


_DELETE = object()
_SCHEMA = "observations on standard input does not match schema 'observations' at "

# (case id, stdin, message after "tau-reconcile: ", details.pointer or None)
BAD_OBSERVATIONS = [
    ("invalid-json", '{"kind": "tau.observations",', "observations on standard input is not valid JSON: ", None),
    ("empty", "", "observations on standard input is empty; expected a JSON document", None),
    ("not-an-object", '"running"', "observations on standard input must be one JSON object (the output of "
     "tau-observe)", None),
    ("missing-sources", _changed(sources=_DELETE), _SCHEMA + "/: missing required property 'sources'", "/"),
    ("missing-attempt-field", _changed(attempts__0__scheduler=_DELETE),
     _SCHEMA + "/attempts/0: missing required property 'scheduler'", "/attempts/0"),
    ("attempts-of-wrong-type", _changed(attempts={}), _SCHEMA + "/attempts: expected array, got object",
     "/attempts"),
    ("unknown-field", _changed(verdict="fine"), _SCHEMA + "/: unexpected property 'verdict'", "/"),
    ("bad-executor", _changed(executor="pbs"), _SCHEMA + "/executor: 'pbs' is not one of ['local', 'slurm']",
     "/executor"),
    ("bad-scheduler-state", _changed(attempts__0__accounting__state="exploded"),
     _SCHEMA + "/attempts/0/accounting/state: 'exploded' is not one of ", "/attempts/0/accounting/state"),
    ("bad-kind", _changed(kind="tau.status"), _SCHEMA + "/kind: expected 'tau.observations'", "/kind"),
    ("bad-timestamp", _changed(observed_at="yesterday"), _SCHEMA + "/observed_at: 'yesterday' does not match ",
     "/observed_at"),
]


@pytest.mark.parametrize("stdin,message,pointer", [c[1:] for c in BAD_OBSERVATIONS],
                         ids=[c[0] for c in BAD_OBSERVATIONS])
def test_observations_that_are_not_valid_exit_65_and_change_nothing(settled, stdin, message, pointer):
    before = snapshot(settled)
    proc = tau("tau-reconcile", str(settled), input=stdin)
    assert proc.returncode == 65, proc.stderr
    err = error_of(proc)
    assert (err["code"], err["command"], err["error"]) == (65, "tau-reconcile", "bad_input")
    assert err["message"].startswith("tau-reconcile: " + message), err["message"]
    if pointer is not None:
        assert err["details"] == {"pointer": pointer, "schema": "observations"}
    assert proc.stdout == ""
    assert snapshot(settled) == before


@pytest.mark.parametrize("changed, message", [
    ({"run_id": "other"}, "observations on standard input are for run 'other', not 'run'"),
    ({"attempt": "attempt-0009"}, "observations name shard-00001/attempt-0009, which this run does not have"),
    ({"task_index": 3}, "observations give shard-00001/attempt-0001 another scheduler identity than the recorded "
                        "one"),
], ids=["another run", "an attempt the run does not have", "another scheduler identity"])
def test_observations_that_do_not_match_the_run_exit_65_and_change_nothing(settled, changed, message):
    before = snapshot(settled)
    proc = tau("tau-reconcile", str(settled), input=json.dumps(observation(**changed)))
    assert proc.returncode == 65
    assert error_of(proc)["message"] == "tau-reconcile: " + message
    assert snapshot(settled) == before


def test_one_unknown_attempt_among_valid_ones_refuses_the_whole_document(settled):
    doc = observation(shard="shard-00000", task_index=0)
    bogus = copy.deepcopy(doc["attempts"][0])
    bogus.update(shard_id="shard-00001", attempt_id="attempt-0009")
    bogus["scheduler"]["task_index"] = 1
    doc["attempts"].append(bogus)
    before = snapshot(settled)
    proc = tau("tau-reconcile", str(settled), input=json.dumps(doc))
    assert proc.returncode == 65
    assert error_of(proc)["message"] == ("tau-reconcile: observations name shard-00001/attempt-0009, which this run "
                                         "does not have")
    assert snapshot(settled) == before


def _rfc3339(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_observations_dated_before_the_attempts_submission_are_refused_and_change_nothing(settled):
    submitted = json.loads((settled / "shards/shard-00001/attempts/attempt-0001/attempt.json").read_text())
    hour_before = jsonio.parse_time(submitted["created_at"]) - 3600
    doc = observation()
    doc["observed_at"] = _rfc3339(hour_before)
    before = snapshot(settled)
    proc = tau("tau-reconcile", str(settled), input=json.dumps(doc))
    assert proc.returncode == 65, proc.stderr
    err = error_of(proc)
    assert err["message"] == (
        f"tau-reconcile: observations on standard input are dated 3600s before shard-00001/attempt-0001 was "
        f"submitted ({submitted['created_at']}): evidence never predates its attempt, so tau-reconcile refuses the "
        "document; observe the run again, and check the clocks of the machines that submit and observe")
    assert proc.stdout == ""
    assert snapshot(settled) == before
    doc["observed_at"] = _rfc3339(hour_before + 3600 - 30)
    within = tau("tau-reconcile", str(settled), input=json.dumps(doc))  # 30 s of clock skew is tolerated
    assert within.returncode == 0, within.stderr


def test_a_view_with_its_own_unavailable_source_keeps_its_evidence_while_the_others_are_applied(settled, tmp_path):
    run_dir = copy_run(settled, tmp_path / "copy")
    doc = observation(shard="shard-00000", task_index=0)
    other = observation()["attempts"][0]
    other["accounting"] = None
    other["sources"] = {"queue": "observed", "accounting": "unavailable",
                        "reason": "sacct reports state 'ZOMBIE' for 7_1, which tau does not know"}
    doc["attempts"].append(other)
    evidence = run_dir / "shards/shard-00001/attempts/attempt-0001/observation.json"
    before = evidence.read_bytes() if evidence.exists() else None
    proc = tau("tau-reconcile", str(run_dir), input=json.dumps(doc))
    assert proc.returncode == 0, proc.stderr
    assert [c["shard_id"] for c in json.loads(proc.stdout)["changes"]] == ["shard-00000"]
    assert (evidence.read_bytes() if evidence.exists() else None) == before
