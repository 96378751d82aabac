"""tau-winner under a race: 32 real processes publish one shard's winner; exactly one creates it.

The shards of a completed run already have winners (the in-allocation side publishes them), so each test takes a
shard's winner.json away (the test owns the tree): the shard is a candidate again, with a real finished attempt.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import module_workspace, BIN, complete_run, env_for_tests, error_of, status, tau
from taulib import jsonio
from taulib.rundir.records import RunDir

pytestmark = pytest.mark.slow

RACERS = 32


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    ws = module_workspace(tmp_path_factory, "race")
    return complete_run(ws, records=60, shards=6)


def unseal(run_dir: Path, sid: str) -> dict:
    """Remove the shard's winner.json and return the record it held."""
    path = run_dir / "shards" / sid / "winner.json"
    record = json.loads(path.read_bytes())
    path.unlink()
    shutil.rmtree(run_dir / "index", ignore_errors=True)  # the index caches winners: drop it too
    shard = next(s for s in status(run_dir)["shards"] if s["id"] == sid)
    assert (shard["state"], shard["winner"]) == ("candidate", None)
    return record


def temps(folder: Path) -> list[str]:
    return [n for n in os.listdir(folder) if n.startswith(".tau.")]


@pytest.mark.parametrize("sid, failpoints", [
    ("shard-00000", None),
    ("shard-00001", "winner.validated=delay:0.3"),  # every racer validates before any of them publishes
    ("shard-00002", "winner.validated=delay:0.3"),
])
def test_thirty_two_concurrent_tau_winner_processes_publish_exactly_one_winner(run_dir, sid, failpoints):
    before = unseal(run_dir, sid)
    env = env_for_tests({"TAU_FAILPOINTS": failpoints} if failpoints else None)
    racers = [subprocess.Popen([str(BIN / "tau-winner"), str(run_dir), "--shard", sid], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env) for _ in range(RACERS)]
    outcomes = []
    for proc in racers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert err == ""
        outcomes.append(json.loads(out)["shards"][0])

    assert sum(1 for o in outcomes if o["published"]) == 1
    for outcome in outcomes:
        assert outcome["shard_id"] == sid
        assert outcome["winner"] == before["attempt_id"]
        assert outcome["manifest_sha256"] == before["manifest"]["sha256"]
        assert outcome["reason"] is None

    folder = run_dir / "shards" / sid
    assert temps(folder) == []
    assert (folder / "winner.json").stat().st_nlink == 1
    with RunDir(str(run_dir)) as rd:
        after = rd.read(f"shards/{sid}/winner.json", "tau.winner")
    assert {k: v for k, v in after.items() if k != "published_at"} == \
        {k: v for k, v in before.items() if k != "published_at"}
    assert after["attempt_id"] == "attempt-0001"
    assert after["manifest"]["path"] == f"shards/{sid}/attempts/attempt-0001/manifest.json"
    assert next(s for s in status(run_dir)["shards"] if s["id"] == sid)["state"] == "succeeded"


def test_a_candidate_whose_dataset_file_was_modified_is_refused(run_dir):
    sid = "shard-00003"
    unseal(run_dir, sid)
    part = run_dir / "shards" / sid / "attempts" / "attempt-0001" / "dataset" / "part-00000.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))

    proc = tau("tau-winner", str(run_dir), "--shard", sid)

    assert proc.returncode == 1
    error = error_of(proc)
    assert (error["code"], error["error"]) == (1, "check_failed")
    assert error["message"] == "tau-winner: 1 shard(s) have no winner; see the reason of each on standard output"
    outcome = json.loads(proc.stdout)["shards"][0]
    assert (outcome["shard_id"], outcome["winner"], outcome["published"]) == (sid, None, False)
    assert f"shards/{sid}/attempts/attempt-0001/dataset/part-00000.parquet changed after it was recorded " \
           "(sha256 differs)" in outcome["reason"]
    assert not (run_dir / "shards" / sid / "winner.json").exists()


def test_a_candidate_whose_result_says_partial_is_refused(run_dir):
    sid = "shard-00004"
    unseal(run_dir, sid)
    path = run_dir / "shards" / sid / "attempts" / "attempt-0001" / "result.json"
    result = json.loads(path.read_bytes())
    result.update(outcome="partial", actual_records=result["requested_records"] - 1)
    path.write_bytes(jsonio.canonical(result))  # still canonical and schema-valid: only its meaning changed

    proc = tau("tau-winner", str(run_dir), "--shard", sid)

    assert proc.returncode == 1
    error = error_of(proc)
    assert (error["code"], error["error"]) == (1, "check_failed")
    assert "1 shard(s) have no winner" in error["message"]
    outcome = json.loads(proc.stdout)["shards"][0]
    assert (outcome["winner"], outcome["published"]) == (None, False)
    assert outcome["reason"] == f"{sid}/attempt-0001: the result is partial, not complete"
    assert not (run_dir / "shards" / sid / "winner.json").exists()


def test_the_untouched_shard_keeps_its_winner_through_the_other_tests(run_dir):
    proc = tau("tau-winner", str(run_dir), "--shard", "shard-00005")
    assert proc.returncode == 0, proc.stderr
    outcome = json.loads(proc.stdout)["shards"][0]
    assert (outcome["winner"], outcome["published"]) == ("attempt-0001", False)
