"""The Python API (taulib.api) drives a whole run alone, returns typed values, and raises the exit table's errors.

A whole run on the local executor, from Python only: created from a plan dict, submitted, driven to success (its
failing shard retried), its status read as typed values, the failed attempt's log read, collected and read back with
pyarrow; a second run has a shard cancelled and is collected without it. The errors are the commands' own, with
their codes and messages; `import taulib.api` imports nothing heavy; README's "From Python" example runs as shown.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import taulib.api as tau
from helpers import PYTHON, ROOT, env_for_tests, error_of, plan, quiesce, snapshot
from helpers import tau as run_command

FAILED_MESSAGE = "demo client: failing shard-00001 on its first attempt, as asked"


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[tau.Run, tau.RunStatus]:
    """A run of 4 shards, shard-00001 failing its first attempt, created and driven to success through the API."""
    ws = tmp_path_factory.mktemp("api") / "ws"
    ws.mkdir(mode=0o700)
    run = tau.create(ws / "run", plan(fail_first=("shard-00001",)))
    run.submit()
    status = run.wait(timeout=120, interval=0.2)
    quiesce(Path(run.path))
    return run, status


# -- a whole run ------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_run_driven_through_the_api_succeeds_with_its_failing_shard_retried(finished):
    run, status = finished
    assert isinstance(status, tau.RunStatus) and status.succeeded
    assert (status.state, status.lifecycle, status.degraded, status.reason) == ("succeeded", "succeeded", False, None)
    assert status.counts["succeeded"] == 4 and sum(status.counts.values()) == 4
    assert status.retryable == () and status.eta_seconds is None and status.cancelled is None
    assert [s.id for s in status.shards] == [f"shard-0000{i}" for i in range(4)]
    failed = status.shard(1)
    assert failed is status.shard("shard-00001") is status.shard("1") and failed.number == 1
    with pytest.raises(KeyError):
        status.shard(4)
    assert (failed.state, failed.attempts, failed.winner, failed.max_attempts) == \
        ("succeeded", 2, "attempt-0002", status.raw["shards"][1]["max_attempts"])
    assert all(s.attempts == 1 and s.winner == "attempt-0001" for s in status.shards if s.id != "shard-00001")
    assert status.budget["failed_attempts"] == 1
    assert status.raw["kind"] == "tau.status" and status.run_id == run.run_id == "run"


@pytest.mark.slow
def test_the_api_status_is_the_document_tau_status_prints(finished):
    run, _ = finished
    proc = run_command("tau-status", run.path)
    assert proc.returncode == 0, proc.stderr
    printed, read = json.loads(proc.stdout), run.status().raw
    assert {k: v for k, v in read.items() if k != "sources"} == {k: v for k, v in printed.items() if k != "sources"}


@pytest.mark.slow
def test_the_logs_of_the_failed_attempt_hold_the_clients_message_and_a_shard_is_named_by_id_or_number(finished):
    run, _ = finished
    first = run.logs(1, "attempt-0001")
    assert FAILED_MESSAGE in first
    assert run.logs("shard-00001", "attempt-0001") == run.logs("1", "attempt-0001") == first
    proc = run_command("tau-logs", run.path, "1", "--attempt", "attempt-0001")
    assert proc.returncode == 0 and proc.stdout == first
    assert FAILED_MESSAGE not in run.logs(1)  # the newest attempt, which succeeded


@pytest.mark.slow
def test_a_collection_through_the_api_is_read_back_with_pyarrow_and_is_never_overwritten(finished):
    import pyarrow.dataset as ds

    run, _ = finished
    where = Path(run.path).parent / "dataset"
    collection = run.collect(where)
    assert isinstance(collection, tau.Collection) and collection.state == "succeeded" and collection.created
    assert (collection.destination, collection.format, collection.records) == (str(where), "parquet", 80)
    assert collection.complete and collection.missing == ()
    assert collection.paths == [str(where / f"part-0000{i}.parquet") for i in range(3)]
    assert [f.rows for f in collection.files] == [30, 30, 20]
    table = ds.dataset(collection.paths, format=collection.format).to_table()
    assert table.num_rows == 80 and table.column("id").to_pylist() == list(range(80))
    again = run.collect(where)
    assert not again.created and again.files == collection.files, "asked again, it is reported, not redone"
    before = snapshot(where)
    with pytest.raises(tau.Conflict) as err:
        run.collect(where, "csv")
    assert err.value.code == 73 and "parquet" in err.value.message
    assert snapshot(where) == before
    status = run.status()
    assert [c["collection_id"] for c in status.collections] == [collection.collection_id]


@pytest.mark.slow
def test_a_cancelled_shard_of_a_second_run_ends_cancelled_and_the_rest_is_collected_without_it(tmp_path, workspace):
    gate = tmp_path / "go"
    doc = plan()
    doc["command"] += ["--wait-for", str(gate)]
    run = tau.create(workspace / "second", doc)
    submitted = run.submit()
    assert submitted.purpose == "initial" and submitted.shards == tuple(f"shard-0000{i}" for i in range(4))
    cancelled = run.cancel(2)
    assert (cancelled.scope, cancelled.cancelled, cancelled.noop) == ("shards", ("shard-00002",), None)
    seen: list[tau.DriveResult] = []
    with pytest.raises(tau.Timeout) as err:  # the attempts wait for the gate: the run cannot finish yet
        run.drive(interval=0.1, timeout=0.5, on_cycle=seen.append)
    assert err.value.code == 75 and seen and all(r.finished is None and r.cycles == 1 for r in seen)
    assert run.reconcile().shard("shard-00002").state == "cancelled"
    gate.touch()
    with pytest.raises(tau.CheckFailed) as err:
        run.wait(timeout=120, interval=0.2)
    assert err.value.code == 1 and "finished without succeeding" in err.value.message
    quiesce(Path(run.path))
    status = run.status()
    assert status.shard(2).state == "cancelled" and status.counts["succeeded"] == 3
    assert run.cancel(2).noop is None  # cancelling again keeps the cancellation in force
    assert run.retry().submission_id is None and run.retry().reason
    partial = run.collect(workspace / "partial", allow_missing=True)
    assert not partial.complete and [m["shard_id"] for m in partial.missing] == ["shard-00002"]
    assert partial.records == 60
    reopened = run.retry(2, reopen=True)
    assert reopened.shards == ("shard-00002",) and reopened.raw["reopened"][0]["shard_id"] == "shard-00002"
    assert run.wait(timeout=120, interval=0.2).counts["succeeded"] == 4
    quiesce(Path(run.path))
    complete = run.collect(workspace / "complete")
    assert complete.complete and complete.records == 80


# -- the errors are the commands' -------------------------------------------------------------------------------------

def test_a_bad_plan_raises_bad_input_with_tau_inits_message_and_creates_nothing(workspace):
    bad = plan(records=0)
    with pytest.raises(tau.BadInput) as err:
        tau.create(workspace / "run", bad)
    proc = run_command("tau-init", str(workspace / "other"), input=json.dumps(bad))
    assert err.value.code == 65 == proc.returncode
    assert error_of(proc)["message"] == f"tau-init: {err.value.message}"
    assert not (workspace / "run").exists()
    with pytest.raises(tau.BadInput) as err:
        tau.create(workspace / "run", {**plan(), "command": [Path(PYTHON)]})
    assert err.value.code == 65 and "JSON" in err.value.message, "a Path is no JSON: refused, never guessed"


def test_creating_a_run_again_is_a_no_op_and_with_another_plan_a_conflict(workspace):
    first = tau.create(workspace / "run", plan())
    assert first.created is not None and first.created["created"] is True and first.shard_count == 4
    before = snapshot(workspace / "run")
    again = tau.create(workspace / "run", plan())
    assert again.created is not None and again.created["created"] is False
    with pytest.raises(tau.Conflict) as err:
        tau.create(workspace / "run", plan(shards=2))
    assert err.value.code == 73 and "different plan" in err.value.message
    assert snapshot(workspace / "run") == before


def test_an_unknown_run_shard_or_attempt_raises_not_found(workspace):
    with pytest.raises(tau.NotFound) as err:
        tau.open(workspace / "nothing")
    assert err.value.code == 66
    run = tau.open(tau.create(workspace / "run", plan()).path)
    assert (run.run_id, run.shard_count, run.plan["records"]) == ("run", 4, 80)
    for shard in (7, "shard-00004", -1, "seven"):
        with pytest.raises(tau.NotFound) as err:
            run.logs(shard)
        assert err.value.code == 66 and "has no shard" in err.value.message, shard
    with pytest.raises(tau.NotFound) as err:
        run.logs(0)
    assert "no attempt yet" in err.value.message
    with pytest.raises(tau.NotFound) as err:
        run.cancel([0, 9])
    assert err.value.message == "run 'run' has no shard 'shard-00009'"
    with pytest.raises(tau.UsageError) as err:  # a mistake in the call, as a bad option is for a command
        run.submit(shards=[1.5])
    assert err.value.code == 2 and "1.5" in err.value.message
    for call in (lambda: run.submit(limit=0), lambda: run.drive(interval=0)):
        with pytest.raises(tau.UsageError):
            call()
    assert not (Path(run.path) / "submissions").exists()


def test_every_error_of_the_exit_table_is_reachable_from_the_api_with_its_code():
    for name, code in (("CheckFailed", 1), ("UsageError", 2), ("BadInput", 65), ("NotFound", 66),
                       ("Unavailable", 69), ("Internal", 70), ("Conflict", 73), ("IOFailure", 74), ("Busy", 75),
                       ("Refused", 77)):
        error = getattr(tau, name)
        assert issubclass(error, tau.TauError) and error.code == code and tau.EXIT_CODES[code][0] == error("x").name
    assert issubclass(tau.Timeout, tau.Busy) and issubclass(tau.Timeout, TimeoutError)


def test_the_api_holds_no_descriptor_between_calls(workspace):
    run = tau.create(workspace / "run", plan())
    fds = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        run.status()
        tau.open(run.path)
    assert len(os.listdir("/proc/self/fd")) == fds


# -- cheap to import, and README's example works ----------------------------------------------------------------------

def test_importing_the_api_imports_nothing_heavy():
    code = ("import sys, taulib.api; print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'pyarrow', 'azure', 'kubernetes', 'click', 'jsonschema', 'portalocker', 'requests', 'orjson'}))")
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr
    modules = ("import sys, taulib.api; print(sorted(m for m in sys.modules if m.startswith('taulib')))")
    proc = subprocess.run([PYTHON, "-c", modules], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.stdout.split() == ["['taulib',", "'taulib.api',", "'taulib.api.run',", "'taulib.api.values',",
                                   "'taulib.errors']"]


def readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("```python\n", text.index("\n## From Python\n")) + len("```python\n")
    return text[start:text.index("```", start)]


@pytest.mark.slow
def test_the_readme_example_runs_as_shown(tmp_path):
    """Run from a folder like the checkout (its contrib/ linked there), so that what it makes stays in tmp_path."""
    (tmp_path / "contrib").symlink_to(ROOT / "contrib")
    proc = subprocess.run([PYTHON, "-c", readme_example()], cwd=tmp_path, capture_output=True, text=True,
                          env=env_for_tests({"PYTHONPATH": str(ROOT)}), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "succeeded 2" and lines[-1] == "800", proc.stdout
    assert "demo client: failing shard-00003 on its first attempt, as asked" in proc.stdout
    assert (tmp_path / "demo" / "py-dataset" / "_tau_collection.json").is_file()
