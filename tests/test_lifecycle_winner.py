"""taulib.lifecycle.winner called in this process (tau-winner's library) on a real completed run: a shard-owned
dataset is never hashed while its allocation may write it (the shard's resume lock, held here by another process),
a winner whose attempt record is gone is refused by name, and a run's winners are published shard by shard, each
reported, with what a crashed writer left tidied and the sealed-shard index told. In this process so that
`make mutation` can run them against its mutants; tests/test_winner_race.py races real processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import complete_run, hold_lock
from taulib import jsonio
from taulib.errors import Busy, CheckFailed, NotFound
from taulib.lifecycle import winner
from taulib.rundir.run import Run

pytestmark = pytest.mark.slow


REQUEST = {"records": 30, "shards": 3}
RESUME = ("always", "never")  # a shard-owned dataset (its resume lock held while hashed), and a plain one


def build(parent: Path) -> Path:
    """The completed runs these tests start from (every shard won), parent/<resume>/run for each of RESUME."""
    for resume in RESUME:
        (parent / resume).mkdir(mode=0o700)
        complete_run(parent / resume, **REQUEST, resume=resume)
    return parent


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    parent = tmp_path_factory.mktemp("winner-lib")
    # make mutation (bench/mutation.py) builds them once and names them here: each mutant's run then only copies
    template = os.environ.get("TAU_TEST_WINNER_RUNS")
    if template:
        for resume in RESUME:
            (parent / resume).mkdir(mode=0o700)
            shutil.copytree(Path(template) / resume / "run", parent / resume / "run", symlinks=True)
        return parent
    return build(parent)


@pytest.fixture(scope="module")
def done(runs) -> Path:
    return runs / "always" / "run"


@pytest.fixture(scope="module")
def plain(runs) -> Path:
    return runs / "never" / "run"


def unseal(run_dir: Path, sid: str) -> None:
    (run_dir / "shards" / sid / "winner.json").unlink()
    shutil.rmtree(run_dir / "index", ignore_errors=True)


def test_a_resumable_shards_winner_waits_for_its_resume_lock_and_publishes_once_it_is_free(done, monkeypatch):
    # another process holds the shard's resume lock, as a resumable shard's allocation does
    monkeypatch.setenv("TAU_LOCK_TIMEOUT", "0.5")
    unseal(done, "shard-00001")
    with hold_lock(done, "resume-shard-00001"):
        with Run(str(done)) as run, pytest.raises(Busy) as caught:
            winner.publish(run, "shard-00001")
        assert caught.value.code == 75
        assert "locks/resume-shard-00001.lock" in caught.value.message and "waited 0.5s" in caught.value.message
        assert not (done / "shards" / "shard-00001" / "winner.json").exists()
    with Run(str(done)) as run:
        published = winner.publish(run, "shard-00001")
    assert (published["winner"], published["published"]) == ("attempt-0001", True)


def test_an_allocation_that_holds_the_resume_lock_itself_publishes_without_taking_it_again(done, monkeypatch):
    # tau-attempt publishes its own shard's winner while it holds the lock (resume_held): the lock held by the
    # other process here stands for it
    monkeypatch.setenv("TAU_LOCK_TIMEOUT", "0.5")
    unseal(done, "shard-00001")
    with hold_lock(done, "resume-shard-00001"), Run(str(done)) as run:
        assert winner.publish(run, "shard-00001", resume_held=True)["published"] is True


def copied(done: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "ws"
    copy.mkdir(mode=0o700)
    shutil.copytree(done, copy / done.name, symlinks=True)
    return copy / done.name


def test_a_winner_naming_an_attempt_that_never_existed_is_refused_naming_the_missing_file(done, tmp_path):
    run_dir = copied(done, tmp_path)
    path = run_dir / "shards" / "shard-00002" / "winner.json"
    path.write_bytes(jsonio.canonical(dict(json.loads(path.read_bytes()), attempt_id="attempt-0007")))
    with Run(str(run_dir)) as run, pytest.raises(NotFound) as caught:
        winner.publish(run, "shard-00002")
    assert caught.value.code == 66
    assert caught.value.message.endswith("shards/shard-00002/attempts/attempt-0007/attempt.json does not exist")


def test_a_winner_whose_attempt_record_is_gone_no_longer_stands(done, tmp_path):
    # the journal still says the attempt was submitted: without its own record it never succeeded
    run_dir = copied(done, tmp_path)
    (run_dir / "shards" / "shard-00002" / "attempts" / "attempt-0001" / "attempt.json").unlink()
    with Run(str(run_dir)) as run, pytest.raises(CheckFailed) as caught:
        winner.publish(run, "shard-00002")
    assert caught.value.code == 1
    assert caught.value.message == "shard-00002/attempt-0001: the attempt is submitted, not succeeded"
    assert caught.value.details == {"shard_id": "shard-00002", "attempt_id": "attempt-0001"}


def test_publishing_a_runs_winners_reports_each_shard_and_counts_them(done, tmp_path):
    from taulib.rundir import index

    run_dir = copied(done, tmp_path)
    unseal(run_dir, "shard-00000")
    attempt = run_dir / "shards" / "shard-00000" / "attempts" / "attempt-0001"
    debris = attempt / ".tau.0123456789abcdef.tmp"  # what a writer killed mid-write left in the ended attempt
    debris.write_bytes(b"half")
    manifest_sha = jsonio.sha256_hex((attempt / "manifest.json").read_bytes())
    with Run(str(run_dir)) as run:
        doc = winner.publish_many(run, ["shard-00000", "shard-00001"])
        assert index.load(run)[0] == 1  # the shard just sealed is in the index again
    assert doc == {"kind": "tau.winners", "schema_version": 1, "run_id": "run",
                   "counts": {"won": 2, "without_winner": 0},
                   "shards": [{"shard_id": "shard-00000", "winner": "attempt-0001", "published": True,
                               "manifest_sha256": manifest_sha, "reason": None},
                              dict(doc["shards"][1], shard_id="shard-00001", winner="attempt-0001", published=False,
                                   reason=None)]}
    assert not debris.exists()
    record = json.loads((run_dir / "shards" / "shard-00000" / "winner.json").read_bytes())
    assert (record["attempt_id"], record["ordinal"], record["manifest"]["sha256"]) == ("attempt-0001", 1, manifest_sha)


def test_a_shard_without_a_valid_candidate_is_reported_without_a_winner_and_the_others_still_win(done, tmp_path):
    run_dir = copied(done, tmp_path)
    for sid in ("shard-00000", "shard-00001"):
        unseal(run_dir, sid)
    (run_dir / "shards" / "shard-00001" / "attempts" / "attempt-0001" / "result.json").unlink()
    with Run(str(run_dir)) as run:
        doc = winner.publish_many(run, ["shard-00000", "shard-00001", "shard-00002"])
    assert doc["counts"] == {"won": 2, "without_winner": 1}
    assert doc["shards"][1] == {"shard_id": "shard-00001", "winner": None, "published": False,
                                "reason": "shard-00001/attempt-0001 has no result.json: the attempt never finished"}
    assert [s["published"] for s in doc["shards"]] == [True, False, False]


def test_an_unknown_shard_is_refused_before_any_winner_is_published(done, tmp_path):
    run_dir = copied(done, tmp_path)
    unseal(run_dir, "shard-00000")
    with Run(str(run_dir)) as run, pytest.raises(NotFound) as caught:
        winner.publish_many(run, ["shard-00000", "shard-00009"])
    assert caught.value.code == 66 and "shard-00009" in caught.value.message
    assert not (run_dir / "shards" / "shard-00000" / "winner.json").exists()


def test_a_busy_run_stops_the_whole_call(done, tmp_path, monkeypatch):
    run_dir = copied(done, tmp_path)
    unseal(run_dir, "shard-00000")
    monkeypatch.setenv("TAU_LOCK_TIMEOUT", "0.3")
    with hold_lock(run_dir, "shard-00000"), Run(str(run_dir)) as run, pytest.raises(Busy):
        winner.publish_many(run, ["shard-00000", "shard-00001"])


def test_a_publisher_that_loses_the_race_while_it_hashes_reports_the_winner_that_won(plain, tmp_path, monkeypatch):
    """Another tau-winner publishes the shard while this one verifies the files (at failpoint winner.validated):
    this one finds that winner, re-validates it and reports it as not published by itself; nothing is replaced."""
    from helpers import BIN, env_for_tests
    from taulib import failpoints

    run_dir = copied(plain, tmp_path)
    unseal(run_dir, "shard-00002")
    reached, real = [], failpoints.hit

    def hit(name: str) -> None:
        reached.append(name)
        if name == "winner.validated":
            other = subprocess.run([str(BIN / "tau-winner"), str(run_dir), "--shard", "shard-00002"],
                                   capture_output=True, text=True, env=env_for_tests(), timeout=60)
            assert other.returncode == 0, other.stderr
        real(name)

    monkeypatch.setattr(failpoints, "hit", hit)
    with Run(str(run_dir)) as run:
        lost = winner.publish(run, "shard-00002")
    path = run_dir / "shards" / "shard-00002" / "winner.json"
    record = json.loads(path.read_bytes())
    assert lost == {"shard_id": "shard-00002", "winner": "attempt-0001", "published": False,
                    "manifest_sha256": record["manifest"]["sha256"], "reason": None}
    assert reached == ["winner.validated"]  # it never published: the other process's winner stands


def test_a_publisher_that_wins_passes_its_failpoints_in_order_and_confirms_on_the_next_call(done, tmp_path,
                                                                                           monkeypatch):
    from taulib import failpoints

    run_dir = copied(done, tmp_path)
    unseal(run_dir, "shard-00002")
    reached, real = [], failpoints.hit
    monkeypatch.setattr(failpoints, "hit", lambda name: (reached.append(name), real(name)))
    with Run(str(run_dir)) as run:
        first = winner.publish(run, "shard-00002")
        again = winner.publish(run, "shard-00002")
    assert [n for n in reached if n.startswith("winner.")] == ["winner.validated", "winner.published"]
    assert (first["published"], again["published"]) == (True, False)
    assert first == dict(again, published=True)
    folder = "shards/shard-00002/attempts/attempt-0001"
    record = json.loads((run_dir / "shards" / "shard-00002" / "winner.json").read_bytes())
    digest = {name: jsonio.sha256_hex((run_dir / folder / name).read_bytes()) for name in ("manifest.json",
                                                                                          "result.json")}
    assert dict(record, published_at=None) == {
        "kind": "tau.winner", "schema_version": 1, "run_id": "run", "shard_id": "shard-00002",
        "attempt_id": "attempt-0001", "ordinal": 1, "published_at": None,
        "manifest": {"path": f"{folder}/manifest.json", "sha256": digest["manifest.json"]},
        "result": {"path": f"{folder}/result.json", "sha256": digest["result.json"]}}


def test_a_winner_is_published_while_other_commands_read_the_run(plain, tmp_path, monkeypatch):
    # every command holds the run lock shared: a publisher must not need it exclusively
    run_dir = copied(plain, tmp_path)
    unseal(run_dir, "shard-00001")
    monkeypatch.setenv("TAU_LOCK_TIMEOUT", "0.5")
    with hold_lock(run_dir, "run", shared=True), Run(str(run_dir)) as run:
        assert winner.publish(run, "shard-00001")["published"] is True
        assert winner.publish_many(run, ["shard-00001"])["counts"] == {"won": 1, "without_winner": 0}
