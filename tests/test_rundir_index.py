"""The sealed-shard index in segments (`taulib.rundir.index`): kept up to date by the winners' publishers, so the first
observe + reconcile of a run reads no sealed shard; a cache whose missing, busy, stale or misshapen parts only cost a
read of the shards they do not list; and concurrent writers (real processes) that lose nothing."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import (BIN, PYTHON, ROOT, complete_run, copy_run, env_for_tests, error_of, hold_lock, init_run,
                     module_workspace, plan, status, tau)
from taulib import jsonio

SEGMENT = "index/sealed-0000.json"


@pytest.fixture(scope="module")
def complete(tmp_path_factory) -> Path:
    ws = module_workspace(tmp_path_factory, "index")
    return complete_run(ws, records=60, shards=6)


def json_of(path: Path) -> dict:
    return json.loads(path.read_text())


def unseal(run_dir: Path, *sids: str) -> None:
    """Take these shards' winners away (the test owns the tree), and the whole index with them."""
    for sid in sids:
        (run_dir / "shards" / sid / "winner.json").unlink()
    shutil.rmtree(run_dir / "index", ignore_errors=True)


def debris(run_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob(".tau.*"))


def test_the_winners_publishers_keep_the_index_so_the_first_reconcile_reads_no_sealed_shard(complete, tmp_path):
    run_dir = copy_run(complete, tmp_path / "c")
    segment = json_of(run_dir / SEGMENT)
    assert (segment["first"], segment["count"], segment["ordinals"]) == (0, 6, "1,1,1,1,1,1")
    winner = run_dir / "shards" / "shard-00003" / "winner.json"
    winner.write_bytes(winner.read_bytes()[:20])  # a torn record that only a full scan would read
    doc = status(run_dir)  # would exit 65 if it read shard-00003's winner
    assert doc["state"] == "succeeded" and doc["counts"]["succeeded"] == 6
    (run_dir / SEGMENT).unlink()  # without the cache, the shard is read and refused, naming the record
    read = tau("tau-status", str(run_dir))
    assert read.returncode == 65
    assert error_of(read)["message"].startswith(f"tau-status: {winner} is not valid JSON"), read.stderr


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(5))
def test_winners_published_at_once_are_each_added_to_their_segment_exactly_once(complete, tmp_path, round_):
    run_dir = copy_run(complete, tmp_path / "c")
    sids = [f"shard-0000{i}" for i in range(6)]
    unseal(run_dir, *sids)
    env = env_for_tests({"TAU_FAILPOINTS": "winner.validated=delay:0.3"})  # all validate, then all publish
    racers = [subprocess.Popen([str(BIN / "tau-winner"), str(run_dir), "--shard", sid], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env) for sid in sids for _ in range(4)]
    outcomes = []
    for proc in racers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and err == "", err
        outcomes.append(json.loads(out)["shards"][0])
    assert sorted(o["shard_id"] for o in outcomes if o["published"]) == sids  # one publisher per shard
    segment = json_of(run_dir / SEGMENT)
    assert (segment["ordinals"], segment["revision"]) == ("1,1,1,1,1,1", 6), segment  # six adds, none lost
    assert debris(run_dir) == []
    before = (run_dir / SEGMENT).read_bytes()
    doc = status(run_dir)
    assert doc["counts"]["succeeded"] == 6 and (run_dir / SEGMENT).read_bytes() == before  # nothing left to add


WRITER = """
import random, sys, time
from taulib.rundir import index
from taulib.rundir.run import Run
shards = [int(v) for v in sys.argv[2].split(",")]
with Run(sys.argv[1]) as run:
    for i in shards:
        index.add(run, {i: (1 + i % 3, i % 7)})
        time.sleep(random.random() / 500)
"""


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_concurrent_writers_of_several_segments_lose_no_shard(workspace, round_):
    run_dir = init_run(workspace, plan_doc=plan(records=2500, shards=2500))
    chosen = random.Random(round_).sample(range(2500), 600)
    writers = [chosen[k::12] for k in range(12)]  # 12 processes, 50 shards each, spread over the 3 segments
    env = env_for_tests({"PYTHONPATH": str(ROOT)})
    procs = [subprocess.Popen([PYTHON, "-c", WRITER, str(run_dir), ",".join(map(str, shards))], env=env,
                              stderr=subprocess.PIPE, text=True) for shards in writers]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    from taulib.rundir import index
    from taulib.rundir.run import Run

    with Run(str(run_dir)) as run:
        ordinals, durations = index.load_all(run)
    assert {i for i, v in enumerate(ordinals) if v} == set(chosen)
    assert all(ordinals[i] == 1 + i % 3 and durations[i] == i % 7 for i in chosen)
    for k in range(3):
        segment = json_of(run_dir / f"index/sealed-{k:04d}.json")
        assert segment["revision"] == sum(1 for i in chosen if i // 1000 == k), segment  # one write per shard
        assert (segment["first"], segment["count"]) == (1000 * k, 1000 if k < 2 else 500)
    assert debris(run_dir) == []


@pytest.mark.slow
def test_a_winner_whose_segment_is_busy_is_added_by_the_next_reconcile(complete, tmp_path):
    run_dir = copy_run(complete, tmp_path / "c")
    unseal(run_dir, "shard-00001")
    with hold_lock(run_dir, "index"):
        proc = tau("tau-winner", str(run_dir), "--shard", "shard-00001")  # gives the index up after a moment
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["shards"][0]["published"] is True and proc.stderr == ""
        assert not (run_dir / "index" / "sealed-0000.json").exists()
        assert (run_dir / "shards" / "shard-00001" / "winner.json").exists()
    doc = status(run_dir)
    assert doc["counts"]["succeeded"] == 6
    segment = json_of(run_dir / SEGMENT)
    assert (segment["ordinals"], segment["revision"]) == ("1,1,1,1,1,1", 1)


def test_a_tau_winner_killed_after_publishing_leaves_its_shard_to_the_next_reconcile(complete, tmp_path):
    run_dir = copy_run(complete, tmp_path / "c")
    unseal(run_dir, "shard-00002")
    crashed = tau("tau-winner", str(run_dir), "--shard", "shard-00002",
                  env={"TAU_FAILPOINTS": "winner.published=crash"})
    assert (crashed.returncode, crashed.stdout, crashed.stderr) == (-9, "", "")
    assert (run_dir / "shards" / "shard-00002" / "winner.json").exists()
    assert not (run_dir / "index").exists()
    again = tau("tau-winner", str(run_dir), "--shard", "shard-00002")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["shards"][0]["published"] is False
    doc = status(run_dir)
    assert doc["state"] == "succeeded"
    segment = json_of(run_dir / SEGMENT)
    assert (segment["ordinals"], segment["revision"]) == ("1,1,1,1,1,1", 1)
    assert debris(run_dir) == []


@pytest.mark.parametrize("change", [{"count": 5, "ordinals": "1,1,1,1,1"}, {"first": 1000}, {"durations": "1,2"}],
                         ids=["count", "first", "durations"])
def test_a_segment_of_another_shape_is_ignored_then_rewritten_whole(complete, tmp_path, change):
    run_dir = copy_run(complete, tmp_path / "c")
    unseal(run_dir, "shard-00004")  # a shard the misshapen segment would wrongly call sealed
    (run_dir / "index").mkdir(mode=0o700)
    record = {"kind": "tau.sealed-segment", "schema_version": 1, "run_id": "run", "first": 0, "count": 6,
              "revision": 9, "updated_at": jsonio.now_rfc3339(), "ordinals": "1,1,1,1,1,1",
              "durations": "0,0,0,0,0,0", **change}
    (run_dir / SEGMENT).write_bytes(jsonio.canonical(record))
    os.chmod(run_dir / SEGMENT, 0o600)
    doc = status(run_dir)
    shards = {s["id"]: s["state"] for s in doc["shards"]}
    if "durations" in change:  # the ordinals still hold: only the durations are dropped
        assert shards["shard-00004"] == "succeeded" and doc["eta_seconds"] is None  # it ended
        return
    assert shards["shard-00004"] == "candidate" and list(shards.values()).count("succeeded") == 5
    segment = json_of(run_dir / SEGMENT)
    assert (segment["first"], segment["count"], segment["revision"]) == (0, 6, 10)
    assert segment["ordinals"] == "1,1,1,1,0,1"


def test_a_tampered_segment_is_refused_by_reconcile_and_never_fails_a_winner(complete, tmp_path):
    run_dir = copy_run(complete, tmp_path / "c")
    unseal(run_dir, "shard-00005")
    (run_dir / "index").mkdir(mode=0o700)
    (run_dir / SEGMENT).write_bytes(b'{"kind": "tau.sealed-segment"}')  # not canonical, not whole
    os.chmod(run_dir / SEGMENT, 0o600)
    won = tau("tau-winner", str(run_dir), "--shard", "shard-00005")  # the winner is what seals the shard
    assert won.returncode == 0, won.stderr
    assert json.loads(won.stdout)["shards"][0]["published"] is True
    obs = tau("tau-observe", str(run_dir))
    assert obs.returncode == 65
    assert error_of(obs)["message"] == (f"tau-observe: {run_dir / SEGMENT} does not match schema 'sealed-segment' "
                                        "at /: missing required property 'count'"), obs.stderr
    (run_dir / SEGMENT).unlink()  # deleting the cache is always safe
    assert status(run_dir)["counts"]["succeeded"] == 6
