"""Every failpoint an allocation with services reaches, crashed with a real SIGKILL: the run converges, every record
is valid, nothing is left half-written, and no service outlives its allocation.

The life of a one-shard run whose service is the stand-in model server (with a child in its process group, as a
server's worker would be) runs once with TAU_FAILPOINT_TRACE: the trace says which failpoints tau-attempt reaches
with services (the new steps of the order of work, readiness version 2 and endpoints.json among the writes). Then,
for each, the same life runs again with that failpoint armed `once-crash` in tau-attempt, driven as a cron line
would drive it (observe | reconcile, retry, winner, until it succeeded). A crashed allocation leaves its backends to
the kernel's parent-death signal and its other processes to the local supervisor, their subreaper: by the time the
supervisor has exited, none of them may be running.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from harness import EXERCISED
from services_fixtures import running, services_plan
from test_crash_matrix import debris, records_valid

from helpers import module_workspace, quiesce, status, tau

pytestmark = pytest.mark.slow

NEW = ("attempt.services_started", "attempt.endpoints_published", "attempt.cleaned_up")


def life(ws: Path, env: dict) -> dict:
    """A run with a service driven to success (each step repeated while it is busy or crashed); its end state: the
    winner's rows, without the URL (a port tau picked)."""
    run_dir = ws / "run"
    plan = services_plan(ws / "pids", records=4, backends=1, server=("--child",), retry={"max_attempts": 4})
    assert tau("tau-init", str(run_dir), input=json.dumps(plan), env=env).returncode == 0
    assert tau("tau-submit", str(run_dir), env=env).returncode == 0
    deadline = time.monotonic() + 120
    while (doc := status(run_dir))["state"] != "succeeded":
        assert time.monotonic() < deadline, doc
        if doc["retryable"]:
            assert tau("tau-retry", str(run_dir), env=env).returncode in (0, 75)
        elif doc["counts"]["candidate"]:
            assert tau("tau-winner", str(run_dir), env=env).returncode in (0, 1, 75)
        time.sleep(0.3)
    quiesce(run_dir)
    winner = json.loads((run_dir / "shards" / "shard-00000" / "winner.json").read_text())["attempt_id"]
    rows = pq.read_table(run_dir / "shards" / "shard-00000" / "attempts" / winner / "dataset").to_pylist()
    return {"rows": [(r["id"], r["prompt"], r["answer"]) for r in rows], "state": doc["state"]}


def started(ws: Path) -> set[int]:
    """Every process the run's services ran (each server and its child, by their pid files)."""
    return {int(p.read_text()) for p in (ws / "pids").glob("*.pid") if not p.name.startswith("setsid-")}


@pytest.fixture(scope="module")
def uncrashed(tmp_path_factory) -> tuple[dict, list[str]]:
    ws = module_workspace(tmp_path_factory, "services-uncrashed")
    trace = ws.parent / "trace"
    end = life(ws, {"TAU_FAILPOINT_TRACE": str(trace)})
    names = []
    for line in trace.read_text().splitlines():
        command, name = line.split(" ", 1)
        if command == "tau-attempt" and name not in names:
            names.append(name)
    return end, names


def test_an_allocation_with_services_reaches_every_new_failpoint(uncrashed):
    _, names = uncrashed
    assert set(NEW) <= set(names), names


@pytest.mark.parametrize("name", [
    "attempt.running", *NEW, "attempt.result_written", "attempt.manifest_written", "store.mkdir.created",
    "store.replace.temp_written", "store.replace.renamed", "store.publish.linked"])
def test_an_allocation_with_services_crashed_at_a_failpoint_converges_and_leaves_no_service(uncrashed, tmp_path,
                                                                                          name):
    expected, names = uncrashed
    assert name in names, f"tau-attempt never reaches {name} with services"
    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    marker = tmp_path / "crashed"
    end = life(ws, {"TAU_FAILPOINTS": f"tau-attempt:{name}=once-crash", "TAU_FAILPOINT_ONCE": str(marker)})
    assert marker.exists(), f"tau-attempt never reached {name}"
    EXERCISED.add(("tau-attempt", name))
    assert end == expected
    assert started(ws) and running(started(ws)) == set(), "a service outlived its allocation"
    assert debris(ws) == []
    records_valid(ws / "run")
