"""tau-submit: the first attempt of every shard, handed to the executor once, however often it is called."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from helpers import BIN, env_for_tests, error_of, init_run, settle, tau


def attempts_of(run_dir) -> dict[str, list[str]]:
    shards = run_dir / "shards"
    return {sid: sorted(os.listdir(shards / sid / "attempts")) if (shards / sid / "attempts").exists() else []
            for sid in sorted(os.listdir(shards))}


def test_submit_gives_every_shard_its_first_attempt_at_its_own_task_index(workspace):
    run_dir = init_run(workspace, fail_first=("shard-00001",))
    proc = tau("tau-submit", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["submission_id"], doc["purpose"], doc["created"], doc["state"], doc["job_id"]) == (
        "submission-0001", "initial", True, "submitted", "submission-0001")
    assert doc["tasks"] == [{"shard_id": f"shard-0000{i}", "attempt_id": "attempt-0001", "ordinal": 1,
                             "task_index": i} for i in range(4)]
    doc = settle(run_dir)
    assert {k: v for k, v in doc["counts"].items() if v} == {"succeeded": 3, "failed": 1}
    assert doc["retryable"] == ["shard-00001"]


@pytest.mark.slow
def test_submitting_twice_submits_once(workspace):
    run_dir = init_run(workspace, records=40, shards=2)
    first = tau("tau-submit", str(run_dir))
    second = tau("tau-submit", str(run_dir))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert one["created"] is True and two["created"] is False
    assert two["submission_id"] == one["submission_id"] == "submission-0001"
    assert two["tasks"] == one["tasks"]
    settle(run_dir)
    again = tau("tau-submit", str(run_dir))
    assert again.returncode == 0 and json.loads(again.stdout)["created"] is False
    assert sorted(os.listdir(run_dir / "submissions")) == ["submission-0001"]
    assert attempts_of(run_dir) == {"shard-00000": ["attempt-0001"], "shard-00001": ["attempt-0001"]}


def test_concurrent_submits_converge_on_one_submission(workspace):
    run_dir = init_run(workspace, records=40, shards=2)
    procs = [subprocess.Popen([str(BIN / "tau-submit"), str(run_dir)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env_for_tests()) for _ in range(3)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1] for o in outs]
    docs = [json.loads(out) for out, _ in outs]
    assert sorted(d["created"] for d in docs) == [False, False, True]
    assert {d["submission_id"] for d in docs} == {"submission-0001"}
    assert settle(run_dir)["state"] == "succeeded"
    assert sorted(os.listdir(run_dir / "submissions")) == ["submission-0001"]
    assert attempts_of(run_dir) == {"shard-00000": ["attempt-0001"], "shard-00001": ["attempt-0001"]}


def test_a_run_directory_that_is_a_plain_file_is_a_usage_error_and_is_left_alone(workspace):
    path = workspace / "run"
    path.write_text("not a run\n")
    proc = tau("tau-submit", str(path))
    assert proc.returncode == 2
    assert error_of(proc)["message"] == (f"tau-submit: Invalid value for 'RUN_DIR': Directory {str(path)!r} is a "
                                         "file.")
    assert path.read_text() == "not a run\n"


@pytest.mark.slow
def test_a_canary_submits_the_first_shards_and_the_next_submit_the_rest(workspace):
    import time

    from helpers import quiesce, status

    run_dir = init_run(workspace)
    first = tau("tau-submit", str(run_dir), "--limit", "1")
    assert first.returncode == 0, first.stderr
    canary = json.loads(first.stdout)
    assert [t["shard_id"] for t in canary["tasks"]] == ["shard-00000"] and canary["held_back"] == 3
    quiesce(run_dir)  # the canary's attempt has ended; the held-back shards stay pending until the next submit
    doc = status(run_dir)
    deadline = time.monotonic() + 60
    while doc["shards"][0]["state"] != "succeeded" and time.monotonic() < deadline:
        time.sleep(0.3)
        doc = status(run_dir)
    assert [s["state"] for s in doc["shards"]] == ["succeeded", "pending", "pending", "pending"]
    assert doc["shards"][1]["reason"] == "not submitted yet"
    rest = json.loads(tau("tau-submit", str(run_dir)).stdout)
    assert [t["shard_id"] for t in rest["tasks"]] == ["shard-00001", "shard-00002", "shard-00003"]
    assert rest["held_back"] == 0 and rest["submission_id"] != canary["submission_id"]
    assert settle(run_dir)["state"] == "succeeded"


def test_a_canary_of_named_shards_submits_only_those_and_an_unknown_one_is_refused(workspace):
    run_dir = init_run(workspace)
    refused = tau("tau-submit", str(run_dir), "--shard", "shard-00009")
    assert refused.returncode == 66
    assert error_of(refused)["message"] == "tau-submit: run 'run' has no shard 'shard-00009'"
    assert not (run_dir / "submissions").exists()
    named = tau("tau-submit", str(run_dir), "--shard", "shard-00002")
    assert named.returncode == 0, named.stderr
    doc = json.loads(named.stdout)
    assert [t["shard_id"] for t in doc["tasks"]] == ["shard-00002"] and doc["held_back"] == 3
