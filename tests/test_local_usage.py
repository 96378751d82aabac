"""What each local attempt cost: the supervisor's rusage of every task, asked by tau-observe, recorded by
tau-reconcile in the submission's usage.json, shown by tau-status per shard and for the run; a document that
names a task the run does not have is refused whole; a finished attempt without figures is unmeasured, not zero."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from taulib import jsonio

from helpers import error_of, init_run, quiesce, snapshot, tau

CLIENT = """\
import os, time
if os.environ["TAU_SHARD_ID"] == "shard-00000":  # a peak of 300 MiB, held long enough to be the peak
    held = bytearray(300 << 20)
    for i in range(0, len(held), 4096):
        held[i] = 1
    time.sleep(0.5)
    del held  # the peak is the 300 MiB and the interpreter, not the Parquet writer loaded after it
import pyarrow as pa, pyarrow.parquet as pq
pq.write_table(pa.table({"id": [1]}), os.path.join(os.environ["TAU_OUTPUT_DIR"], "part-00000.parquet"))
"""


@pytest.fixture
def finished(workspace: Path) -> Path:
    client = workspace / "client.py"
    client.write_text(CLIENT)
    run = init_run(workspace, plan_doc={"records": 2, "shards": 2, "command": [sys.executable, str(client)],
                                        "scheduler": {"profile": "local", "local": {"max_parallel": 2}}})
    assert tau("tau-submit", str(run)).returncode == 0
    quiesce(run)
    return run


def observed(run: Path) -> dict:
    proc = tau("tau-observe", str(run))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def reconciled(run: Path, doc: dict) -> dict:
    proc = tau("tau-reconcile", str(run), input=json.dumps(doc))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_every_finished_local_attempt_has_its_rusage_and_a_300_mib_peak_is_the_sum_of_its_processes(finished):
    doc = observed(finished)
    entry, = doc["usage"]["submissions"]
    assert doc["usage"]["reason"] is None and entry["submission_id"] == "submission-0001"
    assert [t["task_index"] for t in entry["tasks"]] == [0, 1]
    status = reconciled(finished, doc)
    big, small = (s["usage"] for s in status["shards"])
    for used in (big, small):
        assert used["measured"] is True and used["source"] == "rusage" and used["state"] == "COMPLETED"
        assert used["elapsed_seconds"] > 0 and used["cpu_seconds"] > 0 and used["cpus"] == 1
        assert used["mem_requested_bytes"] is None and used["memory_efficiency"] is None
    # the peak is its process tree's, summed as Slurm sums a step's (the supervisor samples it every second), and
    # at least its largest process's (wait4's ru_maxrss): the client's 300 MiB, with tau-attempt and Python beside
    assert 300 << 20 <= big["max_rss_bytes"] <= 400 << 20, big["max_rss_bytes"]
    assert small["max_rss_bytes"] < 200 << 20  # the other shard's own peak, not its neighbour's
    assert big["elapsed_seconds"] >= 0.5
    efficiency = status["efficiency"]
    assert (efficiency["measured"], efficiency["unmeasured"]) == (2, 0)
    assert efficiency["max_rss_bytes"] == big["max_rss_bytes"]
    assert efficiency["core_hours"] == round((big["elapsed_seconds"] + small["elapsed_seconds"]) / 3600, 4)
    assert efficiency["slowest"][0] == {"shard_id": "shard-00000", "attempt_id": "attempt-0001",
                                        "elapsed_seconds": big["elapsed_seconds"]}
    record = json.loads((finished / "submissions" / "submission-0001" / "usage.json").read_bytes())
    assert record["complete"] is True and [t["shard_id"] for t in record["tasks"]] == ["shard-00000", "shard-00001"]
    assert oct(os.stat(finished / "submissions" / "submission-0001" / "usage.json").st_mode & 0o777) == "0o600"
    # a complete submission is not asked about again
    assert observed(finished)["usage"] == {"submissions": [], "reason": None}


def test_tau_status_shows_the_figures_tau_reconcile_would_record_and_writes_nothing(finished):
    before = snapshot(finished)
    proc = tau("tau-status", str(finished))
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert [s["usage"]["measured"] for s in status["shards"]] == [True, True]
    assert snapshot(finished) == before and not (finished / "submissions" / "submission-0001" / "usage.json").exists()


def test_figures_are_recorded_once_and_never_replaced(finished):
    doc = observed(finished)
    reconciled(finished, doc)
    path = finished / "submissions" / "submission-0001" / "usage.json"
    first = path.read_bytes()
    doc["usage"]["submissions"][0]["tasks"][0]["elapsed_seconds"] = 9999.0  # a replayed, altered document
    assert reconciled(finished, doc)["shards"][0]["usage"]["elapsed_seconds"] != 9999.0
    assert path.read_bytes() == first


@pytest.mark.parametrize(("change", "message"), [
    (lambda e: e.update(task_index=7), "observations give usage of task 7 of submission-0001, which has no such task"),
    (lambda e: None, "observations give usage of submission-0009 (job submission-0009), which is not a submission "
                     "of this run bound to that job"),
])
def test_a_document_naming_a_task_the_run_does_not_have_is_refused_whole(finished, change, message):
    doc = observed(finished)
    entry = doc["usage"]["submissions"][0]
    if "task 7" in message:
        change(entry["tasks"][1])
    else:
        entry.update(submission_id="submission-0009", job_id="submission-0009")
    before = snapshot(finished)
    proc = tau("tau-reconcile", str(finished), input=json.dumps(doc))
    assert proc.returncode == 65
    assert message in error_of(proc)["message"]
    assert snapshot(finished) == before


def test_a_finished_attempt_without_figures_is_unmeasured_never_zero(finished):
    for index in (0, 1):  # as a tau that measured nothing left its task records
        path = finished / "submissions" / "submission-0001" / "local" / f"task-{index:05d}.json"
        record = json.loads(path.read_bytes())
        del record["usage"]
        path.write_bytes(jsonio.canonical(record))
    status = reconciled(finished, observed(finished))
    assert [s["usage"]["measured"] for s in status["shards"]] == [False, False]
    assert all(s["usage"]["elapsed_seconds"] is None for s in status["shards"])
    efficiency = status["efficiency"]
    assert (efficiency["measured"], efficiency["unmeasured"], efficiency["cpu_efficiency"]) == (0, 2, None)
    table = tau("tau-status", str(finished), "-o", "table").stdout
    assert "efficiency: 0 attempts measured (2 finished attempts not measured yet: accounting lags); " in table
    assert table.count("not measured yet") == 3  # the summary and each shard's USED
    doc = dict(observed(finished), usage={"submissions": [], "reason": "sacct failed: timed out after 30s"})
    assert reconciled(finished, doc)["efficiency"]["reason"] == "sacct failed: timed out after 30s"
