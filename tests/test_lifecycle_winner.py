"""taulib.lifecycle.winner called in this process (tau-winner's library) on a real completed run: a shard-owned
dataset is never hashed while its allocation may write it (the shard's resume lock, held here by another process),
and a winner whose attempt record is gone is refused by name. tests/test_winner_race.py races real processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import complete_run, module_workspace
from taulib import jsonio
from taulib.errors import Busy, CheckFailed, NotFound
from taulib.lifecycle import winner
from taulib.rundir.run import Run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    ws = module_workspace(tmp_path_factory, "winner-lib")
    return complete_run(ws, records=30, shards=3, resume="always")


def unseal(run_dir: Path, sid: str) -> None:
    (run_dir / "shards" / sid / "winner.json").unlink()
    shutil.rmtree(run_dir / "index", ignore_errors=True)


@pytest.fixture
def holder(done):
    """Another process holding shard-00001's resume lock (as a resumable shard's allocation does), until released."""
    path = done / "locks" / "resume-shard-00001.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    proc = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                             f"f = open({str(path)!r}, 'r+b'); fcntl.flock(f, fcntl.LOCK_EX)\n"
                             "print('held', flush=True); sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    yield proc
    if proc.poll() is None:
        proc.stdin.close()
        proc.wait(timeout=10)


def test_a_resumable_shards_winner_waits_for_its_resume_lock_and_publishes_once_it_is_free(done, holder,
                                                                                          monkeypatch):
    monkeypatch.setenv("TAU_LOCK_TIMEOUT", "0.5")
    unseal(done, "shard-00001")
    with Run(str(done)) as run, pytest.raises(Busy) as caught:
        winner.publish(run, "shard-00001")
    assert caught.value.code == 75
    assert "locks/resume-shard-00001.lock" in caught.value.message and "waited 0.5s" in caught.value.message
    assert not (done / "shards" / "shard-00001" / "winner.json").exists()
    holder.stdin.close()
    holder.wait(timeout=10)
    with Run(str(done)) as run:
        published = winner.publish(run, "shard-00001")
    assert (published["winner"], published["published"]) == ("attempt-0001", True)


def test_an_allocation_that_holds_the_resume_lock_itself_publishes_without_taking_it_again(done, holder, monkeypatch):
    # tau-attempt publishes its own shard's winner while it holds the lock (resume_held): the lock held by the
    # other process here stands for it
    monkeypatch.setenv("TAU_LOCK_TIMEOUT", "0.5")
    unseal(done, "shard-00001")
    with Run(str(done)) as run:
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
