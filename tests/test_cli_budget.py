"""The retry budget: a shard stops after max_attempts, a run stops retrying past its failure budget, and
tau-retry --shard grants a named shard one more attempt, recorded as such."""

from __future__ import annotations

import json

import pytest

from helpers import PYTHON, init_run, settle, tau
from test_cli_run_environment import PROBE


def failing(**extra) -> dict:
    doc = {"command": [PYTHON, str(PROBE), "--fail"], "scheduler": {"profile": "local", "local": {"max_parallel": 4}},
           "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}
    doc.update(extra)
    return doc


def retry(run_dir, *args) -> dict:
    proc = tau("tau-retry", str(run_dir), *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_a_failing_shard_stops_after_max_attempts_and_a_named_retry_grants_one_more(workspace):
    run_dir = init_run(workspace, plan_doc=failing(records=2, shards=1, retry={"max_attempts": 2}))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    assert settle(run_dir)["shards"][0]["state"] == "failed"
    assert [t["shard_id"] for t in retry(run_dir)["tasks"]] == ["shard-00000"]
    doc = settle(run_dir)
    shard = doc["shards"][0]
    assert (shard["state"], shard["attempts"], shard["max_attempts"]) == ("exhausted", 2, 2)
    assert shard["reason"] == ("the client exited with status 3; 2 attempts used of a budget of 2, not retried "
                               "(tau-retry --shard grants one more)")
    assert shard["log"] == f"{run_dir}/shards/shard-00000/attempts/attempt-0002/client.log"
    assert doc["state"] == "failed" and doc["retryable"] == [] and doc["degraded"] is True
    nothing = retry(run_dir)
    assert (nothing["submission_id"], nothing["tasks"]) == (None, [])
    granted = retry(run_dir, "--shard", "shard-00000")
    assert granted["tasks"] == [{"shard_id": "shard-00000", "attempt_id": "attempt-0003", "ordinal": 3,
                                 "task_index": 0, "granted": True}]
    plan = json.loads((run_dir / "submissions" / granted["submission_id"] / "plan.json").read_text())
    assert plan["task_ranges"] == [{"first": 0, "count": 1, "ordinal": 3, "granted": True}]
    doc = settle(run_dir)
    assert (doc["shards"][0]["state"], doc["shards"][0]["attempts"]) == ("exhausted", 3)


@pytest.mark.slow
def test_a_run_of_twenty_always_failing_shards_stops_retrying_at_its_failure_budget(workspace):
    run_dir = init_run(workspace, plan_doc=failing(records=20, shards=20, retry={"max_attempts": 10}))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    doc = settle(run_dir)
    assert doc["budget"] == {"max_attempts": 10, "max_failed_attempts": 10, "max_failed_fraction": 0.1,
                             "failed_attempts": 20, "failed_shards": 20, "stopped": doc["budget"]["stopped"]}
    assert doc["budget"]["stopped"].startswith("past the run's failure budget: 20 failed attempts (more than 10) "
                                               "and 20 of 20 shards failed (more than 10%)")
    assert doc["retryable"] == [] and doc["budget"]["stopped"] in doc["reason"]
    result = retry(run_dir)
    assert (result["submission_id"], result["tasks"], result["stopped"]) == (None, [], doc["budget"]["stopped"])
    assert len(list((run_dir / "submissions").iterdir())) == 1
    named = retry(run_dir, "--shard", "shard-00004")  # a person may still retry a named shard
    assert [t["shard_id"] for t in named["tasks"]] == ["shard-00004"]


@pytest.mark.slow
def test_within_its_budget_a_run_keeps_retrying_what_failed(workspace):
    run_dir = init_run(workspace, plan_doc=failing(records=20, shards=20, retry={"max_attempts": 3,
                                                                                 "max_failed_attempts": 100}))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    settle(run_dir)
    assert len(retry(run_dir)["tasks"]) == 20
    doc = settle(run_dir)
    assert doc["budget"]["failed_attempts"] == 40 and doc["budget"]["stopped"] is None


@pytest.mark.slow
def test_a_failed_shard_shows_its_clients_last_words_bounded_and_printable(workspace):
    """Its cause shows without opening a log: the last lines the client wrote, in `last_output` and in the table's
    REASON, with nothing a client could use to garble a terminal."""
    client = workspace / "noisy.sh"
    client.write_text("#!/bin/sh\nprintf 'loading\\n\\n'\nprintf '\\033[31mValueError: bad row 17\\033[0m\\n' >&2\n"
                      "printf 'a%.0s' $(seq 400) >&2\nexit 1\n")
    client.chmod(0o700)
    run_dir = init_run(workspace, plan_doc=failing(records=2, shards=1, command=[str(client)],
                                                   retry={"max_attempts": 1}))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    shard = settle(run_dir)["shards"][0]
    assert shard["state"] == "exhausted" and shard["reason"].startswith("the client exited with status 1; ")
    assert shard["last_output"] == ["loading", "[31mValueError: bad row 17 [0m", "a" * 157 + "..."]
    table = tau("tau-status", str(run_dir), "-o", "table")
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith("shard-00000"))
    assert "; last output: loading / [31mValueError: bad row 17 [0m / aaa" in row and "\x1b" not in table.stdout
    assert row.endswith(f"; log {run_dir}/shards/shard-00000/attempts/attempt-0001/client.log")
