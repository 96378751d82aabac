"""The local executor's time limit (`scheduler.local.time_limit`) and requests that grow on retry
(`retry.escalate`): a hung attempt ends timed out and is retried within the budget, its retry gets more time (up to
the cap) while a plain failure's retry asks for the same, and tau-init refuses what could never grow."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import error_of, init_run, settle, tau

CLIENT = """#!/bin/sh
# hangs on the first HANG_ATTEMPTS attempts of HANG_SHARD, fails FAIL_SHARD's first attempt, else wins at once
if [ "$TAU_SHARD_ID" = "$HANG_SHARD" ] && [ "$TAU_ATTEMPT_ORDINAL" -le "$HANG_ATTEMPTS" ]; then exec sleep 600; fi
if [ "$TAU_SHARD_ID" = "$FAIL_SHARD" ] && [ "$TAU_ATTEMPT_ORDINAL" = 1 ]; then exit 3; fi
exec cp "$TEMPLATE" "$TAU_OUTPUT_DIR/part-00000.parquet"
"""


def limited_plan(workspace: Path, time_limit, hang_attempts: int, escalate: dict | None = None,
                 max_attempts: int = 3) -> dict:
    template = workspace / "one.parquet"
    pq.write_table(pa.table({"id": [0]}), template)
    client = workspace / "client.sh"
    client.write_text(CLIENT)
    client.chmod(0o700)
    retry = {"max_attempts": max_attempts, **({"escalate": escalate} if escalate else {})}
    return {"records": 2, "shards": 2, "command": [str(client)],
            "env": {"TEMPLATE": str(template), "HANG_SHARD": "shard-00001", "HANG_ATTEMPTS": str(hang_attempts),
                    "FAIL_SHARD": "shard-00000"},
            "scheduler": {"profile": "local", "local": {"max_parallel": 2, "time_limit": time_limit}},
            "retry": retry,
            "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}


def shard(doc: dict, sid: str) -> dict:
    return next(s for s in doc["shards"] if s["id"] == sid)


def retried(run: Path) -> dict:
    proc = tau("tau-retry", str(run))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def window_resources(run: Path, result: dict) -> dict[str, dict]:
    """{shard id: the resources of the window that holds its new attempt}."""
    out = {}
    for window in result["windows"]:
        plan = json.loads((run / "submissions" / window["submission_id"] / "plan.json").read_bytes())
        for task in window["tasks"]:
            out[task["shard_id"]] = plan["resources"]
    return out


def task_record(run: Path, submission: str, index: int) -> dict:
    return json.loads((run / "submissions" / submission / "local" / f"task-{index:05d}.json").read_bytes())


def test_a_hung_attempt_ends_timed_out_and_its_retries_get_more_time_up_to_the_cap(workspace):
    run = init_run(workspace, plan_doc=limited_plan(workspace, 2, hang_attempts=2,
                                                    escalate={"time": 2, "max_time": "00:00:05"}))
    assert tau("tau-submit", str(run)).returncode == 0
    doc = settle(run)
    hung = shard(doc, "shard-00001")
    assert hung["state"] == "failed" and "TIMEOUT" in hung["reason"] and "time limit" in hung["reason"], hung
    assert shard(doc, "shard-00000")["state"] == "failed"
    first = task_record(run, "submission-0001", 1)
    assert first["timed_out"] is True and 2 <= first["usage"]["elapsed_seconds"] < 2 + 5 + 3, first
    assert task_record(run, "submission-0001", 0)["timed_out"] is False

    # one retry, two windows: the timed-out shard asks for twice the time, the plainly failed one for the same
    result = retried(run)
    assert len(result["windows"]) == 2, result
    assert window_resources(run, result) == {"shard-00000": {"mem": None, "time": "00:00:02"},
                                             "shard-00001": {"mem": None, "time": "00:00:04"}}
    doc = settle(run)
    assert shard(doc, "shard-00000")["state"] == "succeeded"
    second = [w for w in result["windows"] if w["tasks"][0]["shard_id"] == "shard-00001"][0]
    timed = task_record(run, second["submission_id"], 1)
    assert timed["timed_out"] is True and 4 <= timed["usage"]["elapsed_seconds"] < 4 + 5 + 3, timed

    # 4 s grown by 2 would be 8 s: the cap holds it at 5 s, and the third attempt (not hung) wins
    result = retried(run)
    assert window_resources(run, result) == {"shard-00001": {"mem": None, "time": "00:00:05"}}
    doc = settle(run)
    assert shard(doc, "shard-00001")["state"] == "succeeded" and doc["state"] == "succeeded", doc["counts"]


def test_without_escalation_a_timed_out_attempt_is_retried_with_the_same_limit_within_the_budget(workspace):
    run = init_run(workspace, plan_doc=limited_plan(workspace, "0:02", hang_attempts=1, max_attempts=2))
    assert tau("tau-submit", str(run)).returncode == 0
    doc = settle(run)
    assert shard(doc, "shard-00001")["evidence"]["observation"]["state"] == "timed_out", shard(doc, "shard-00001")
    result = retried(run)
    assert sorted(t["shard_id"] for t in result["tasks"]) == ["shard-00000", "shard-00001"]
    plan = json.loads((run / "submissions" / result["submission_id"] / "plan.json").read_bytes())
    assert "resources" not in plan  # nothing grows: the window asks what the plan asks
    doc = settle(run)
    assert doc["state"] == "succeeded", doc["counts"]


@pytest.mark.parametrize(("scheduler", "escalate", "message"), [
    ({"profile": "local", "local": {"time_limit": 60}}, {"mem": 2},
     "grows memory on retry (retry.escalate.mem) but asks for none: set scheduler.local.mem"),
    ({"profile": "local"}, {"time": 2},
     "grows time on retry (retry.escalate.time) but asks for none: set scheduler.local.time_limit"),
    ({"profile": "slurm", "slurm": {"time": "10:00"}}, {"mem": 2, "max_mem": "8G"},
     "grows memory on retry (retry.escalate.mem) but asks for none: set scheduler.slurm.mem"),
    ({"profile": "slurm", "slurm": {"mem": "4G"}}, {"mem": 2, "max_mem": "2G"},
     "caps mem at '2G' (retry.escalate.max_mem), below the '4G' it asks for; a grown request never shrinks"),
    ({"profile": "local", "local": {"time_limit": "1:00:00"}}, {"time": 2, "max_time": "30:00"},
     "caps time at '30:00' (retry.escalate.max_time), below the '01:00:00' it asks for"),
    ({"profile": "slurm", "slurm": {"mem": "1G", "collect_mem": "4G"}}, {"mem": 2, "max_mem": "2G"},
     "caps mem at '2G' (retry.escalate.max_mem), below the '4G' a collection job asks for; a grown request never "
     "shrinks"),
    ({"profile": "slurm", "slurm": {"time": "10:00", "collect_time": "2:00:00"}}, {"time": 2, "max_time": "1:00:00"},
     "caps time at '1:00:00' (retry.escalate.max_time), below the '2:00:00' a collection job asks for"),
    ({"profile": "slurm", "slurm": {"collect_mem": "1 GB"}}, None, "at /scheduler/slurm/collect_mem"),
    ({"profile": "local", "local": {"time_limit": "0:00"}}, None,
     "scheduler.local.time_limit is zero"),
    ({"profile": "local"}, {"mem": 32},
     "at /retry/escalate/mem: 32 is greater than 16"),
])
def test_tau_init_refuses_a_request_that_could_never_grow_as_asked(workspace, scheduler, escalate, message):
    doc = {"records": 2, "shards": 2, "command": ["true"], "scheduler": scheduler,
           **({"retry": {"escalate": escalate}} if escalate else {})}
    proc = tau("tau-init", str(workspace / "run"), input=json.dumps(doc))
    assert proc.returncode == 65, proc.stderr
    assert message in error_of(proc)["message"]
    assert not (workspace / "run").exists()
