"""Faults of the filesystem: a full disk (a real, small tmpfs) during attempts, reconciliation and collection, and
a FUSE filesystem without hard links and without renameat2's flags for the fallbacks. Each ends with no partial
output anywhere and the run recovering once the fault is gone.

The tmpfs tests mount and unmount their own filesystems, so they run as root (as `make check` does in CI).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import PYTHON, complete_run, error_of, plan, snapshot, tau
from taulib import jsonio

pytestmark = pytest.mark.root

# a client whose records are incompressible: 2 KiB of random bytes each, so that a small disk fills up
FAT_CLIENT = r"""
import os, pyarrow as pa, pyarrow.parquet as pq
start, end = int(os.environ["TAU_RECORD_START"]), int(os.environ["TAU_RECORD_END"])
ids = list(range(start, end))
table = pa.table({"id": ids, "payload": [os.urandom(2048) for _ in ids]})
pq.write_table(table, os.path.join(os.environ["TAU_OUTPUT_DIR"], "part-00000.parquet"), compression="none")
"""


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("the full-disk tests mount a tmpfs of their own: run them as root (make check in CI does)")


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    """A real tmpfs of `size` at `path` (0700, ours), unmounted at the end."""
    require_root()
    path.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], check=True,
                   capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def grow(path: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True, capture_output=True)


def fill(folder: Path) -> Path:
    """Fill the filesystem of `folder` to the last byte; the filler file."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for chunk in (1 << 16, 1 << 10, 1):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def records(run_dir: Path) -> dict:
    """The run's records and folders, byte for byte (its lock files, empty sidecars, aside)."""
    return {rel: value for rel, value in snapshot(run_dir).items() if not rel.startswith("locks")}


def status_when_possible(run_dir: Path) -> dict | None:
    obs = tau("tau-observe", str(run_dir))
    if obs.returncode != 0:
        assert obs.returncode == 74, obs.stderr
        return None
    rec = tau("tau-reconcile", str(run_dir), input=obs.stdout)
    if rec.returncode != 0:
        assert rec.returncode == 74 and "No space left on device" in error_of(rec)["message"], rec.stderr
        return None
    return json.loads(rec.stdout)


def debris(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.name.startswith(".tau.") or ".tau-stage-" in p.name or p.name.endswith(".tau-reserved"))


def test_a_disk_that_fills_during_the_attempts_publishes_nothing_partial_and_the_run_recovers_when_it_grows(
        tmp_path):
    client = tmp_path / "fat_client.py"
    client.write_text(FAT_CLIENT)
    with tmpfs(tmp_path / "disk", "3m") as disk:
        ws = disk / "ws"
        ws.mkdir(mode=0o700)
        run_dir = ws / "run"
        doc = plan(records=2400, shards=4, command=[PYTHON, str(client)], retry={"max_attempts": 10})
        proc = tau("tau-init", str(run_dir), input=json.dumps(doc))
        assert proc.returncode == 0, proc.stderr
        assert tau("tau-submit", str(run_dir)).returncode == 0
        deadline = time.monotonic() + 120
        while True:  # until every shard has won or given up: the disk holds about one shard's dataset
            doc = status_when_possible(run_dir)
            if doc is not None and not any(doc["counts"][k] for k in ("pending", "running", "accounting_lag",
                                                                      "candidate")):
                break
            assert time.monotonic() < deadline, doc
            time.sleep(0.5)
        assert doc["counts"]["succeeded"] < 4, doc  # the disk was too small for all of them
        for shard in doc["shards"]:
            if shard["winner"] is None:
                assert not (run_dir / "shards" / shard["id"] / "winner.json").exists()
        grow(disk, "64m")
        deadline = time.monotonic() + 180
        while doc["state"] != "succeeded":
            if doc["retryable"]:
                retry = tau("tau-retry", str(run_dir))
                assert retry.returncode == 0, retry.stderr
            time.sleep(0.5)
            doc = status_when_possible(run_dir) or doc
            assert time.monotonic() < deadline, doc
        dest = ws / "data"
        proc = tau("tau-collect", str(run_dir), "--destination", str(dest))
        assert proc.returncode == 0, proc.stderr
        assert sorted(pq.read_table(dest, columns=["id"]).column("id").to_pylist()) == list(range(2400))
        status_when_possible(run_dir)  # sweeps what a supervisor killed by the full disk left
        assert debris(ws) == []


def test_a_full_disk_makes_tau_reconcile_exit_74_and_change_nothing_then_it_applies_once_there_is_room(tmp_path):
    with tmpfs(tmp_path / "disk", "8m") as disk:
        ws = disk / "ws"
        ws.mkdir(mode=0o700)
        run_dir = complete_run(ws, records=20, shards=2)
        doc = {"kind": "tau.observations", "schema_version": 1, "run_id": "run", "observed_at": jsonio.now_rfc3339(),
               "executor": "local", "sources": {"queue": "observed", "accounting": "observed", "reason": None},
               "attempts": []}
        (run_dir / "index" / "sealed-0000.json").unlink()  # reconcile will want to write the index again
        filler = fill(disk)
        before = records(run_dir)
        proc = tau("tau-reconcile", str(run_dir), "--status-file", str(ws / "run.status.json"),
                   input=json.dumps(doc))
        assert proc.returncode == 74, proc.stderr
        error = error_of(proc)
        assert error["error"] == "io_error" and "No space left on device" in error["message"], error
        assert "nothing that was committed is lost" in error["message"]
        assert records(run_dir) == before
        assert debris(ws) == [] and not (ws / "run.status.json").exists()
        filler.unlink()
        proc = tau("tau-reconcile", str(run_dir), "--status-file", str(ws / "run.status.json"),
                   input=json.dumps(doc))
        assert proc.returncode == 0, proc.stderr
        assert json.loads((ws / "run.status.json").read_text())["state"] == "succeeded"
        assert (run_dir / "index" / "sealed-0000.json").exists()
        assert debris(ws) == []


def test_a_destination_disk_too_small_for_the_dataset_fails_the_collection_cleanly_and_a_larger_one_succeeds(
        tmp_path, workspace):
    client = tmp_path / "fat_client.py"
    client.write_text(FAT_CLIENT)
    with tmpfs(tmp_path / "disk", "1m") as disk:
        run_dir = complete_run(workspace, plan_doc=None, records=1200, shards=3, command=[PYTHON, str(client)],
                               collection={"allowed_roots": [str(disk)]})
        dest = disk / "data"
        proc = tau("tau-collect", str(run_dir), "--destination", str(dest))
        assert proc.returncode == 74, proc.stderr
        assert "No space left on device" in error_of(proc)["message"]
        status = json.loads((run_dir / "collections/collection-0001/status.json").read_text())
        assert status["state"] == "failed" and "No space left on device" in status["reason"], status
        assert os.listdir(disk) == []  # no stage, no partial dataset
        grow(disk, "64m")
        proc = tau("tau-collect", str(run_dir), "--destination", str(dest))
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert (doc["collection_id"], doc["records"]) == ("collection-0002", 1200), doc
        assert sorted(pq.read_table(dest, columns=["id"]).column("id").to_pylist()) == list(range(1200))
        assert os.listdir(disk) == ["data"]


# -- a filesystem without hard links and without renameat2's flags ----------------------------------------------------

def test_a_bundle_is_sealed_verified_and_resealed_on_a_filesystem_without_hard_links(nolink_workspace):
    out = nolink_workspace / "out"
    out.mkdir(mode=0o700)
    (out / "weights.bin").write_bytes(os.urandom(4096))
    first = tau("tau-bundle-seal", str(out), "--generation", "g1")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["created"] is True
    again = tau("tau-bundle-seal", str(out), "--generation", "g1")
    assert again.returncode == 0 and json.loads(again.stdout)["created"] is False, again.stderr
    verify = tau("tau-bundle-verify", str(out), "--generation", "g1")
    assert verify.returncode == 0, verify.stderr
    (out / "more.txt").write_text("x")
    other = tau("tau-bundle-seal", str(out), "--generation", "g1")
    assert other.returncode == 73, other.stderr  # an immutable generation stays so without hard links too
    assert debris(out) == []


@pytest.mark.parametrize("failpoint", ["store.publish.temp_synced", "store.publish.renamed", "publish.claimed"])
def test_a_collection_killed_on_a_filesystem_without_hard_links_recovers(nolink_workspace, failpoint):
    run_dir = complete_run(nolink_workspace, records=20, shards=2)
    dest = nolink_workspace / "data"
    crashed = tau("tau-collect", str(run_dir), "--destination", str(dest),
                  env={"TAU_FAILPOINTS": f"tau-collect:{failpoint}=crash"})
    assert crashed.returncode == -9
    again = tau("tau-collect", str(run_dir), "--destination", str(dest))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["records"] == 20
    assert sorted(pq.read_table(dest, columns=["id"]).column("id").to_pylist()) == list(range(20))
    assert debris(nolink_workspace) == []
