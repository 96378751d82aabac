"""Every failpoint crashed in every command that reaches it, and SIGKILL of a running collection at random moments.

The whole life of a run (tau-init, tau-submit, the attempts the local supervisor starts, observe | reconcile,
tau-retry, tau-winner, tau-collect, tau-bundle-seal of an output tree) runs once with TAU_FAILPOINT_TRACE: the
trace says which (command, failpoint) pairs it reaches. Then, for each pair, the same life runs again with that
one failpoint armed `once-crash` in that one command (a real SIGKILL the first time it is reached), driven the
way a person or a cron line would (each step run again until it succeeds, failed shards retried): it must end
in the uncrashed end state (the same dataset, row for row, every shard succeeded, the bundle verified), with
every record valid and no debris anywhere in the workspace.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from harness import EXERCISED, scaled

from helpers import module_workspace, BIN, complete_run, env_for_tests, plan, tau
from taulib import failpoints
from taulib.rundir.records import RunDir

pytestmark = pytest.mark.slow

DEBRIS = re.compile(r"^\.tau\.[0-9a-f]{16}\.tmp$|\.tau-stage-|\.tau-reserved$|\.tau-fetch-|\.tau-[0-9a-f]{16}\.tmp$")
REACHED_ELSEWHERE = {  # failpoints this life cannot reach, and the tests that crash them
    "store.publish.renamed": "tests/test_failpoints.py (on a FUSE filesystem without hard links)",
    "publish.reserved": "test_a_collection_killed_in_the_no_renameat2_fallback_recovers (below)",
    "publish.claimed": "test_a_collection_killed_in_the_no_renameat2_fallback_recovers (below)",
    "publish.renamed": "test_a_collection_killed_in_the_no_renameat2_fallback_recovers (below)",
    "submit.attempts_published": "tests/test_protocol_crashes.py (a format-1 run: its tau-submit publishes attempts)",
    "collect.handed_off": "tests/integration/test_slurm_adversity.py (real sbatch)",
    "collect.task_written": "tests/test_collect_tasks.py and tests/integration/test_slurm_collect_tasks.py (--tasks)",
    "cancel.recorded": "test_a_cancel_killed_after_its_records_stops_the_attempts_when_run_again (below)",
    "fetch.staged": "tests/integration/test_azurite_bundles.py (real Azurite)",
    "fetch.published": "tests/integration/test_azurite_bundles.py (real Azurite)",
    "attempt.services_started": "tests/adversarial/test_crash_services.py (a run with services)",
    "attempt.endpoints_published": "tests/adversarial/test_crash_services.py (a run with services)",
    "init.input_written": "tests/test_input_runs.py (a run over a dataset)",
    "attempt.input_cut": "tests/test_input_runs.py (a run over a dataset)",
}
MAY_REACH = {  # pairs the life reaches or not by timing alone, and the tests that crash them
    ("tau-reconcile", "store.mkdir.created"):
        "test_a_reconcile_killed_making_the_folder_of_a_pending_attempt_converges (below): an observation of an "
        "attempt whose allocation has not made its folder yet",
}


class Life:
    """One run's whole life in workspace `ws`, each step repeated until it succeeds (a crash is a SIGKILL: -9)."""

    def __init__(self, ws: Path, env: dict | None = None) -> None:
        self.ws, self.env = ws, env or {}
        self.run_dir = ws / "run"
        self.dest = ws / "data"
        self.out = ws / "bundle"

    def step(self, command: str, *args: str, input: str | None = None, ok=(0,)) -> dict | None:
        for _ in range(4):
            proc = tau(command, *args, input=input, env=self.env, timeout=180)
            if proc.returncode in ok:
                return json.loads(proc.stdout) if proc.stdout.strip() else None
            assert proc.returncode in (-9, 75), (command, proc.returncode, proc.stderr)  # crashed, or busy
            time.sleep(0.2)
        raise AssertionError(f"{command} did not succeed in 4 tries: {proc.stderr}")

    def status(self) -> dict:
        for _ in range(4):
            obs = tau("tau-observe", str(self.run_dir), env=self.env)
            if obs.returncode == 0:
                rec = tau("tau-reconcile", str(self.run_dir), input=obs.stdout, env=self.env)
                if rec.returncode == 0:
                    return json.loads(rec.stdout)
                assert rec.returncode in (-9, 75), rec.stderr
            else:
                assert obs.returncode in (-9, 75), obs.stderr
        raise AssertionError("observe | reconcile did not succeed in 4 tries")

    def live(self) -> None:
        gate = self.ws / "go"
        doc = plan(records=20, shards=2, fail_first=("shard-00001",), retry={"max_attempts": 6})
        # the first attempts wait until a reconcile has seen them live: the same trace however busy the machine
        doc["command"] += ["--wait-for", str(gate)]
        self.step("tau-init", str(self.run_dir), input=json.dumps(doc))
        self.step("tau-submit", str(self.run_dir))
        deadline = time.monotonic() + 180
        while True:
            status = self.status()
            if not gate.exists():
                gate.touch()
            if status["state"] == "succeeded":
                break
            assert time.monotonic() < deadline, status
            if status["retryable"]:
                self.step("tau-retry", str(self.run_dir))
            elif status["counts"]["candidate"]:
                self.step("tau-winner", str(self.run_dir), ok=(0, 1))
            time.sleep(0.3)
        self.step("tau-collect", str(self.run_dir), "--destination", str(self.dest))
        self.out.mkdir(mode=0o700, exist_ok=True)
        (self.out / "model.txt").write_text("weights\n")
        self.step("tau-bundle-seal", str(self.out), "--generation", "g1")
        self.step("tau-bundle-verify", str(self.out), "--generation", "g1")

    def end_state(self) -> dict:
        table = pq.read_table(self.dest).sort_by("id")
        result = json.loads((self.dest / "_tau_collection.json").read_text())
        return {"rows": table.to_pylist(), "files": sorted(p.name for p in self.dest.iterdir()),
                "records": result["records"], "partitions": [(f["path"], f["rows"]) for f in result["files"]],
                "bundle": sorted(os.listdir(self.out / ".tau" / "bundles"))}


def debris(ws: Path) -> list[str]:
    return sorted(str(p.relative_to(ws)) for p in ws.rglob("*") if DEBRIS.search(p.name))


def records_valid(run_dir: Path) -> None:
    with RunDir(str(run_dir)) as rd:
        for path in sorted(run_dir.rglob("*.json")):
            rel = str(path.relative_to(run_dir))
            if "/local/" not in f"/{rel}":
                assert rd.read(rel, json.loads(path.read_bytes())["kind"]) is not None, rel


@pytest.fixture(scope="module")
def uncrashed(tmp_path_factory) -> tuple[dict, list[tuple[str, str]]]:
    """The end state of an uncrashed life, and the (command, failpoint) pairs it reached, in order."""
    ws = module_workspace(tmp_path_factory, "uncrashed")
    trace = ws.parent / "trace"
    life = Life(ws, {"TAU_FAILPOINT_TRACE": str(trace)})
    life.live()
    pairs = []
    for line in trace.read_text().splitlines():
        command, name = line.split(" ", 1)
        if (command, name) not in pairs:
            pairs.append((command, name))
    return life.end_state(), pairs


KNOWN = [  # (command, failpoint) the uncrashed life reaches: exactly its trace (checked below)
    *[("tau-attempt", name) for name in (
        "attempt.cleaned_up", "attempt.manifest_written", "attempt.recorded", "attempt.result_written",
        "attempt.running",
        "store.mkdir.created", "store.publish.linked", "store.publish.temp_removed", "store.publish.temp_synced",
        "store.publish.temp_written", "store.replace.renamed", "store.replace.temp_synced",
        "store.replace.temp_written", "winner.published", "winner.validated",)],
    *[("tau-bundle-seal", name) for name in (
        "seal.current_replaced", "seal.manifest_written", "seal.marker_written", "store.mkdir.created",
        "store.publish.linked", "store.publish.temp_removed", "store.publish.temp_synced",
        "store.publish.temp_written", "store.replace.renamed", "store.replace.temp_synced",
        "store.replace.temp_written",)],
    *[("tau-collect", name) for name in (
        "collect.planned", "collect.renamed", "collect.staged", "store.mkdir.created", "store.publish.linked",
        "store.publish.temp_removed", "store.publish.temp_synced", "store.publish.temp_written",
        "store.replace.renamed", "store.replace.temp_synced", "store.replace.temp_written",)],
    *[("tau-init", name) for name in (
        "init.plan_written", "init.shards_written", "store.mkdir.created", "store.publish.linked",
        "store.publish.temp_removed", "store.publish.temp_synced", "store.publish.temp_written",)],
    *[("tau-local", name) for name in (
        "store.replace.renamed", "store.replace.temp_synced", "store.replace.temp_written",)],
    *[("tau-reconcile", name) for name in (
        "reconcile.applied", "store.replace.renamed", "store.replace.temp_synced", "store.replace.temp_written",)],
    *[("tau-retry", name) for name in (  # it observes and reconciles first (reconcile.applied), then submits
        "reconcile.applied", "store.mkdir.created", "store.publish.linked", "store.publish.temp_removed",
        "store.publish.temp_synced", "store.publish.temp_written", "store.replace.renamed", "store.replace.temp_synced",
        "store.replace.temp_written", "submit.handed_off", "submit.prepared", "submit.submitted",)],
    *[("tau-submit", name) for name in (
        "store.mkdir.created", "store.publish.linked", "store.publish.temp_removed", "store.publish.temp_synced",
        "store.publish.temp_written", "store.replace.renamed", "store.replace.temp_synced",
        "store.replace.temp_written", "submit.handed_off", "submit.prepared", "submit.submitted",)],
]


def test_the_trace_of_a_whole_life_reaches_the_listed_pairs_and_every_failpoint_is_accounted_for(uncrashed):
    _, reached = uncrashed
    reached = set(reached) - set(MAY_REACH)
    assert reached == set(KNOWN), (sorted(set(KNOWN) - reached), sorted(reached - set(KNOWN)))
    names = {n for _, n in reached}
    unaccounted = set(failpoints.NAMES) - names - set(REACHED_ELSEWHERE)
    assert not unaccounted, f"failpoints neither reached by the life nor crashed elsewhere: {sorted(unaccounted)}"


@pytest.mark.parametrize("command, name", KNOWN, ids=[f"{c}:{n}" for c, n in KNOWN])
def test_a_life_crashed_at_one_failpoint_of_one_command_converges_to_the_uncrashed_end(
        uncrashed, tmp_path, command, name):
    expected, _ = uncrashed
    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    marker = tmp_path / "crashed"
    life = Life(ws, {"TAU_FAILPOINTS": f"{command}:{name}=once-crash", "TAU_FAILPOINT_ONCE": str(marker)})
    life.live()
    assert marker.exists(), f"{command} never reached {name}"
    EXERCISED.add((command, name))
    assert life.end_state() == expected
    assert debris(ws) == []
    records_valid(life.run_dir)


# -- failpoints this life does not reach -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["publish.reserved", "publish.claimed", "publish.renamed"])
def test_a_collection_killed_in_the_no_renameat2_fallback_recovers(tmp_path, name):
    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    run_dir = complete_run(ws, records=20, shards=2)
    dest = ws / "data"
    env = {"TAU_NO_RENAMEAT2": "1"}
    crashed = tau("tau-collect", str(run_dir), "--destination", str(dest),
                  env={**env, "TAU_FAILPOINTS": f"{name}=crash"})
    assert crashed.returncode == -9
    assert (ws / ".data.tau-reserved").exists()  # the reservation marker of the fallback
    again = tau("tau-collect", str(run_dir), "--destination", str(dest), env=env)
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert (doc["state"], doc["records"], doc["collection_id"]) == ("succeeded", 20, "collection-0001"), doc
    assert sorted(pq.read_table(dest, columns=["id"]).column("id").to_pylist()) == list(range(20))
    assert debris(ws) == [] and sorted(os.listdir(ws)) == ["data", "run"]
    EXERCISED.add(("tau-collect", name))


def test_a_cancel_killed_after_its_records_stops_the_attempts_when_run_again(tmp_path):
    from test_cli_cancel import alive, process_groups, sleeping

    from helpers import init_run, wait_settled

    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    run_dir = init_run(ws, plan_doc=sleeping(60, records=20, shards=2))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    deadline = time.monotonic() + 30
    while not all((run_dir / f"shards/shard-0000{i}/attempts/attempt-0001/client.log").exists() for i in (0, 1)):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    crashed = tau("tau-cancel", str(run_dir), env={"TAU_FAILPOINTS": "cancel.recorded=crash"})
    assert crashed.returncode == -9
    assert (run_dir / "cancel.json").exists()  # the record came first
    again = tau("tau-cancel", str(run_dir))
    assert again.returncode == 0, again.stderr
    stopped = {s["shard_id"] for s in json.loads(again.stdout)["stopped"]}
    assert stopped <= {"shard-00000", "shard-00001"}
    deadline = time.monotonic() + 30
    while alive(process_groups(run_dir)):
        assert time.monotonic() < deadline, "the attempts were not stopped"
        time.sleep(0.2)
    # each attempt was stopped by the second call, or had stopped itself on seeing the record (its allocation looks
    # every second, and a slow start of the second call lets it): either way it ended cancelled
    for sid in {"shard-00000", "shard-00001"} - stopped:
        attempt = json.loads((run_dir / f"shards/{sid}/attempts/attempt-0001/attempt.json").read_text())
        assert (attempt["state"], attempt["terminal"]["classification"]) == ("failed", "cancelled"), attempt
    assert wait_settled(run_dir)["state"] == "cancelled"
    EXERCISED.add(("tau-cancel", "cancel.recorded"))


def test_a_reconcile_killed_making_the_folder_of_a_pending_attempt_converges(tmp_path):
    from test_cli_cancel import alive, process_groups, sleeping

    from helpers import init_run

    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    run_dir = init_run(ws, plan_doc=sleeping(60, records=20, shards=2, scheduler={
        "profile": "local", "local": {"max_parallel": 1}}))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    running = run_dir / "shards/shard-00000/attempts/attempt-0001/client.log"
    deadline = time.monotonic() + 30
    while not running.exists():  # else the crash may come making the folder of shard-00000, not of shard-00001
        assert time.monotonic() < deadline, "shard-00000 never started"
        time.sleep(0.1)
    pending = run_dir / "shards" / "shard-00001"  # the one slot runs shard-00000: shard-00001 has no folder yet
    observations = tau("tau-observe", str(run_dir))
    assert observations.returncode == 0 and not pending.exists(), observations.stderr
    crashed = tau("tau-reconcile", str(run_dir), input=observations.stdout,
                  env={"TAU_FAILPOINTS": "tau-reconcile:store.mkdir.created=crash"})
    assert crashed.returncode == -9 and pending.exists()
    again = tau("tau-reconcile", str(run_dir), input=observations.stdout)
    assert again.returncode == 0, again.stderr
    shard = json.loads(again.stdout)["shards"][1]
    assert (shard["id"], shard["state"], shard["attempt"]) == ("shard-00001", "pending", "attempt-0001"), shard
    assert (pending / "attempts" / "attempt-0001" / "observation.json").exists()
    assert not (pending / "attempts" / "attempt-0001" / "attempt.json").exists()  # its submission records it
    assert tau("tau-cancel", str(run_dir)).returncode == 0
    deadline = time.monotonic() + 30
    while alive(process_groups(run_dir)):
        assert time.monotonic() < deadline, "the attempts were not stopped"
        time.sleep(0.2)
    assert debris(ws) == []
    records_valid(run_dir)
    EXERCISED.add(("tau-reconcile", "store.mkdir.created"))


# -- SIGKILL of a running collection at random moments ----------------------------------------------------------------

@pytest.fixture(scope="module")
def larger(tmp_path_factory) -> tuple[Path, list]:
    """A complete run large enough that its collection takes a moment, and its clean collection's rows."""
    ws = module_workspace(tmp_path_factory, "kill-collect")
    run_dir = complete_run(ws, records=60000, shards=6, output={"format": "parquet", "rows_per_partition": 7000})
    clean = ws / "clean"
    assert tau("tau-collect", str(run_dir), "--destination", str(clean)).returncode == 0
    rows = pq.read_table(clean).sort_by("id").to_pylist()
    return run_dir, rows


@pytest.mark.parametrize("round_", range(scaled(8)))
def test_sigkill_of_a_running_collection_at_a_random_moment_never_leaves_a_partial_dataset(larger, tmp_path, round_):
    import shutil

    source, rows = larger
    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    run_dir = ws / "run"
    shutil.copytree(source, run_dir, symlinks=True)
    shutil.rmtree(run_dir / "collections", ignore_errors=True)
    dest = ws / "data"
    proc = subprocess.Popen([str(BIN / "tau-collect"), str(run_dir), "--destination", str(dest)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_for_tests())
    time.sleep(random.Random(round_).uniform(0.05, 2.0))
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    if dest.exists():  # killed after the rename: the dataset is whole
        assert pq.read_table(dest).sort_by("id").to_pylist() == rows
    again = tau("tau-collect", str(run_dir), "--destination", str(dest))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["records"] == 60000
    assert pq.read_table(dest).sort_by("id").to_pylist() == rows
    assert debris(ws) == [] and sorted(os.listdir(ws)) == ["data", "run"]
