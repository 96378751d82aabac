"""Large bundles on real Blob storage (Azurite), and failures in the middle of a download.

The 1 GiB case: a sealed bundle of 200 small files and one 1 GiB file round-trips byte for byte (the one
slow test here, about 20 s). Then two failures while a large blob is being downloaded, each caught at a real
moment (the stage folder beside the destination already holds bytes), never by a failpoint:
  - Azurite killed with SIGKILL (a dedicated Azurite on its own port, TAU_TEST_AZURITE_KILL_PORT, default the test
    port + 1, so the kill hurts no other test): the fetch ends within seconds with exit 69;
  - the blob replaced by other bytes of the same size (its new blocks staged beforehand, committed at that moment
    with the azure SDK, so the new content appears at once): exit 1, saying the blob changed.
Each failure ends in one JSON error on stderr and leaves nothing beside the destination: no destination, no stage.
Big source files, copies and blobs are deleted at the end of each test (pytest keeps old tmp folders).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import azurite as az
from helpers import BIN, env_for_tests, error_of, tau
from taulib.bundle.transfer import SPAN, SPANS

pytestmark = pytest.mark.azurite

GIB_MIB = 1024
# Twice what a fetch asks for at once (SPANS ranges of SPAN bytes): ranges are still to be asked for when the
# test acts (a GET already answering goes on with the blob as it was when it was asked), small enough to upload
# quickly
MID_MIB = 2 * SPANS * SPAN >> 20
KILL_PORT = int(os.environ.get("TAU_TEST_AZURITE_KILL_PORT", str(az.PORT + 1)))
BIG = "model/weights.bin"


azurite_running = az.azurite_running  # the module's fixtures, shared


@pytest.fixture
def box():
    name = az.new_container()
    yield name
    az.service().delete_container(name)


def seal_and_upload(root: Path, url: str, env: dict, big_mib: int, small: int = 200) -> dict[str, str]:
    digests = az.make_tree(root, small=small, big_mib=big_mib)
    proc = tau("tau-bundle-seal", str(root), "--generation", "g1", "--run", "run-1", "--upload", url, env=env)
    assert proc.returncode == 0, proc.stderr
    return digests


def fresh_parent(tmp_path: Path) -> Path:
    parent = tmp_path / "fetched"
    parent.mkdir(mode=0o700)
    return parent


def start_fetch(url: str, destination: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "tau-bundle-fetch"), url, "--destination", str(destination),
                             "--generation", "g1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_for_tests(env))


def wait_for_staged_bytes(parent: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until the large file in the fetch's stage folder (beside the destination) has bytes; fails when the fetch
    ended before that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the fetch ended before the moment the test needs: {proc.communicate()}"
        for stage in parent.glob(".d.tau-fetch-*"):
            try:
                if (stage / BIG).stat().st_size > 0:
                    return
            except FileNotFoundError:
                pass
        time.sleep(0.005)
    raise AssertionError(f"no bytes of {BIG} arrived in a stage folder in {timeout} s")


def assert_nothing_written(parent: Path) -> None:
    assert os.listdir(parent) == [], f"the failed fetch left {os.listdir(parent)} behind"


def test_a_bundle_of_200_small_files_and_a_1_gib_file_round_trips_byte_for_byte(box, tmp_path):
    root, parent = tmp_path / "out", fresh_parent(tmp_path)
    dest = parent / "copy"
    url = az.url(box, "runs/run-1/out")
    try:
        digests = seal_and_upload(root, url, az.env(), GIB_MIB)
        assert (len(digests), (root / BIG).stat().st_size) == (201, GIB_MIB << 20)
        proc = tau("tau-bundle-fetch", url, "--destination", str(dest), "--generation", "g1", env=az.env(),
                   timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        result = json.loads(proc.stdout)
        assert (result["kind"], result["generation"], result["files"]) == ("tau.bundle-fetch", "g1", 201)
        assert result["bytes"] == sum(size for rel, kind, size in az.tree_listing(root)
                                      if kind == "file" and not rel.startswith(".tau/"))
        # the same tree, with the acknowledgement (.tau/bundles/), but not what is the source's own: its mutable
        # pointer and the lock its sealers share (.tau/locks/seal.lock), neither of which is ever uploaded
        local = {".tau/current", ".tau/locks", ".tau/locks/seal.lock"}
        assert {e[0] for e in az.tree_listing(root)} >= local
        assert az.tree_listing(dest) == [e for e in az.tree_listing(root) if e[0] not in local]
        assert az.tree_digests(dest) == digests
        for name in ("g1.json", "g1.complete"):
            assert (dest / ".tau" / "bundles" / name).read_bytes() == (root / ".tau" / "bundles" / name).read_bytes()
        assert os.listdir(parent) == ["copy"]
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(parent, ignore_errors=True)


def test_azurite_killed_mid_download_ends_the_fetch_within_seconds_with_69_and_nothing_written(tmp_path):
    server = az.Dedicated(KILL_PORT, tmp_path / "azurite")
    try:
        box = az.new_container(KILL_PORT)
        url = az.url(box, "killed/out", KILL_PORT)
        seal_and_upload(tmp_path / "src", url, az.env(KILL_PORT), MID_MIB, small=5)
        shutil.rmtree(tmp_path / "src")
        parent = fresh_parent(tmp_path)
        proc = start_fetch(url, parent / "d", az.env(KILL_PORT))
        try:
            wait_for_staged_bytes(parent, proc)
            os.kill(server.pid, signal.SIGKILL)
            killed = time.monotonic()
            _, stderr = proc.communicate(timeout=60)
            took = time.monotonic() - killed
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert not server.alive()
        assert proc.returncode == 69, stderr
        assert took < 15, f"the fetch took {took:.1f} s to give up on a dead endpoint"
        error = error_of(subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr))
        assert error["error"] == "unavailable"
        assert error["message"].startswith(f"tau-bundle-fetch: downloading killed/out/{BIG}: Blob storage cannot "
                                           "be reached (")
        assert_nothing_written(parent)
    finally:
        server.stop()
        shutil.rmtree(tmp_path / "azurite", ignore_errors=True)


def test_a_blob_replaced_by_other_bytes_of_the_same_size_mid_download_fails_and_nothing_is_written(box, tmp_path):
    from azure.storage.blob import BlobBlock

    prefix = "replaced/out"
    url = az.url(box, prefix)
    seal_and_upload(tmp_path / "src", url, az.env(), MID_MIB, small=5)
    shutil.rmtree(tmp_path / "src")
    blob = az.container_client(box).get_blob_client(f"{prefix}/{BIG}")
    ids = []
    for n in range(MID_MIB // 8):  # the new content, staged as uncommitted blocks: the blob is unchanged so far
        ids.append(f"new-{n:04d}")
        blob.stage_block(ids[-1], bytes([n % 251 + 1]) * (8 << 20))
    listed_etag = blob.get_blob_properties().etag
    parent = fresh_parent(tmp_path)
    proc = start_fetch(url, parent / "d", az.env())
    try:
        wait_for_staged_bytes(parent, proc)
        blob.commit_block_list([BlobBlock(block_id=i) for i in ids])
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    properties = blob.get_blob_properties()
    assert (properties.size, properties.etag != listed_etag) == (MID_MIB << 20, True)
    assert proc.returncode == 1, stderr
    error = error_of(subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr))
    assert error["message"] == (f"tau-bundle-fetch: downloading {prefix}/{BIG}: the blob changed after it was "
                                "listed")
    assert_nothing_written(parent)


def test_a_large_file_that_cannot_be_written_fails_the_transfer_with_that_error_and_no_thread_outlives_it(box,
                                                                                                        tmp_path):
    """The writer thread's failure (here EBADF: a descriptor open for reading only) ends the transfer: the error is
    the disk's, raised once; every transfer thread and the writer have ended when the call returns; the file whose
    transfer did not finish is closed."""
    import errno
    import threading

    from taulib.bundle import blob, endpoint, transfer

    root = tmp_path / "out"
    url = az.url(box, "wfail/out")
    try:
        seal_and_upload(root, url, az.env(), MID_MIB, small=2)
        client = blob.reader(endpoint.parse(url, az.env()), az.env())
        listing = blob.list_prefix(client, "wfail/out")
        entries = [{"path": BIG, "size": listing[BIG][0]}]
        target = tmp_path / "target"
        target.write_bytes(b"")
        opened, finished = [], []

        def read_only(entry):
            opened.append(os.open(target, os.O_RDONLY))
            return opened[-1]

        before = set(threading.enumerate())
        with pytest.raises(OSError) as caught:
            transfer.download_many(client, "wfail/out", entries, {BIG: listing[BIG][1]}, read_only,
                                   lambda *a: finished.append(a))
        assert caught.value.errno == errno.EBADF, caught.value
        assert set(threading.enumerate()) - before == set()  # every thread the transfer started has ended
        assert finished == [] and len(opened) == 1
        with pytest.raises(OSError) as closed:
            os.fstat(opened[0])
        assert closed.value.errno == errno.EBADF  # closed by the transfer, since its file did not finish
        assert target.stat().st_size == 0
        client.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
