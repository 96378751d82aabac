"""The requests of tau-bundle-fetch outside `multiplex` when no proxy applies (no proxy variable: http.client
connections of rest.Client's own, kept alive; requests and urllib3 never imported): the marker, the manifest, the
listing and the ranges of the large blobs, against a real Azurite behind test_azurite_multiplex's misbehaving front;
and the large blobs' own path (ranges into buffers, hashed in order from memory, written with direct I/O on a local
block file system, through the page cache on tmpfs), byte for byte at a size that is no multiple of anything.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import azurite as az
import pytest
from helpers import BIN, env_for_tests, error_of, tau
from test_azurite_multiplex import Front, canned, fetch

from taulib.bundle import transfer

pytestmark = pytest.mark.azurite

azurite_running = az.azurite_running  # the module's fixtures, shared
box = az.box

ODD = 2 * transfer.SPAN + 3 * 4096 + 123  # three ranges, the last one ending inside a block


def odd_bundle(box: str, tmp_path: Path, prefix: str) -> dict[str, str]:
    """A bundle of a few small files and one large file of ODD bytes, sealed and uploaded under `prefix`."""
    root = tmp_path / "src"
    az.make_tree(root, small=12)
    data = bytes((i * 7919) % 251 for i in range(1 << 16)) * (ODD // (1 << 16) + 1)
    (root / "model").mkdir()
    (root / "model" / "odd.bin").write_bytes(data[:ODD])
    proc = tau("tau-bundle-seal", str(root), "--generation", "g1", "--upload", az.url(box, prefix), env=az.env())
    assert proc.returncode == 0, proc.stderr
    return az.tree_digests(root)


def is_range(path: str) -> bool:
    return path.endswith("/model/odd.bin")


def fronted(act, box: str, tmp_path: Path, prefix: str, **extra: str):
    digests = odd_bundle(box, tmp_path, prefix)
    front = Front(act)
    try:
        proc = fetch(front, box, prefix, tmp_path / "fetched", **extra)
    finally:
        front.close()
    return proc, front, digests


def test_every_request_answered_then_closed_is_made_again_on_a_new_connection_without_spending_a_try(box, tmp_path):
    proc, front, digests = fronted(lambda path, seen: ("close",), box, tmp_path, "rclose/out", TAU_BLOB_RETRIES="0")
    assert proc.returncode == 0, proc.stderr
    assert az.tree_digests(tmp_path / "fetched" / "d") == digests
    manifest = next(p for p in front.asked if p.endswith("/.tau/bundles/g1.json"))
    assert front.times(manifest) == 1
    assert front.times(next(p for p in front.asked if is_range(p))) == 3  # one GET a range, none repeated


def test_a_kept_alive_connection_closed_as_it_is_used_again_is_replaced_without_spending_a_try(box, tmp_path):
    # every connection answers once, then closes when the next request on it has come: with no try to spare,
    # each request sent over a kept-alive connection is sent again over a new one, and the fetch still succeeds
    proc, front, digests = fronted(lambda path, seen: ("drop-next",), box, tmp_path, "rdrop/out",
                                   TAU_BLOB_RETRIES="0")
    assert proc.returncode == 0, proc.stderr
    assert az.tree_digests(tmp_path / "fetched" / "d") == digests
    assert front.dropped >= 1  # the marker, the manifest, the listing and the ranges reuse the first connections
    assert front.connections >= sum(front.asked.values()) - front.dropped  # each answer on a connection of its own


def test_the_manifest_the_listing_and_a_range_answered_503_are_tried_again(box, tmp_path):
    busy = []

    def act(path, seen):
        if not seen and (path.endswith("/g1.json") or "comp=list" in path or is_range(path)):
            busy.append(path)
            return canned("503 Service Unavailable")
        return None

    proc, front, digests = fronted(act, box, tmp_path, "r503/out")
    assert proc.returncode == 0, proc.stderr
    assert az.tree_digests(tmp_path / "fetched" / "d") == digests
    assert len(busy) == 3 and all(front.times(p) >= 2 for p in busy)
    assert front.times(next(p for p in busy if is_range(p))) == 4  # three ranges and the one answered 503


def test_a_range_stalled_past_the_read_timeout_with_no_try_left_exits_69_saying_so_and_leaves_nothing(box, tmp_path):
    proc, front, _ = fronted(lambda path, seen: ("stall", 3) if is_range(path) else None, box, tmp_path,
                             "rstall/out", TAU_BLOB_READ_TIMEOUT="1", TAU_BLOB_RETRIES="0")
    assert proc.returncode == 69, proc.stderr
    assert error_of(proc)["message"] == ("tau-bundle-fetch: downloading rstall/out/model/odd.bin: Blob storage "
                                         "cannot be reached (ReadTimeoutError)")
    assert os.listdir(tmp_path / "fetched") == []


def test_a_range_refused_keeps_its_exit_code_and_words_and_is_never_tried_again(box, tmp_path):
    proc, front, _ = fronted(lambda path, seen: canned("412 Condition Not Met") if is_range(path) else None, box,
                             tmp_path, "r412/out")
    assert proc.returncode == 1, proc.stderr
    assert error_of(proc)["message"] == ("tau-bundle-fetch: downloading r412/out/model/odd.bin: the blob changed "
                                         "after it was listed")
    assert os.listdir(tmp_path / "fetched") == []


def test_a_large_file_of_odd_size_arrives_byte_for_byte_with_direct_io_and_through_the_page_cache(box, tmp_path):
    from taulib.fs import writeback

    digests = odd_bundle(box, tmp_path, "rodd/out")
    targets = [tmp_path / "disk"]
    assert writeback.fstype(os.stat(tmp_path).st_dev) in writeback.DIRECT_TYPES, "the test folder should be on disk"
    if os.path.isdir("/dev/shm") and writeback.fstype(os.stat("/dev/shm").st_dev) == "tmpfs":
        targets.append(Path("/dev/shm") / f"tau-test-{os.getpid()}")
    try:
        for parent in targets:
            parent.mkdir(mode=0o700)
            # no try again, and a read timeout shorter than Azurite's keep-alive (5 s): a reader that waited for
            # bytes that are not coming (the tail of a range under SO_RCVLOWAT) would fail, not be woken by its close
            proc = tau("tau-bundle-fetch", az.url(box, "rodd/out"), "--generation", "g1", "--destination",
                       str(parent / "d"), env=az.env(TAU_BLOB_RETRIES="0", TAU_BLOB_READ_TIMEOUT="4"))
            assert proc.returncode == 0, proc.stderr
            assert az.tree_digests(parent / "d") == digests
            assert (parent / "d" / "model" / "odd.bin").stat().st_size == ODD
            assert os.listdir(parent) == ["d"]
            verify = tau("tau-bundle-verify", str(parent / "d"), "--generation", "g1")
            assert verify.returncode == 0, verify.stdout
    finally:
        for parent in targets[1:]:
            shutil.rmtree(parent, ignore_errors=True)


def test_a_sigterm_while_a_range_is_stalled_ends_the_fetch_at_once_and_leaves_nothing(box, tmp_path):
    odd_bundle(box, tmp_path, "rsig/out")
    front = Front(lambda path, seen: ("stall", 40) if is_range(path) else None)
    parent = tmp_path / "fetched"
    parent.mkdir(mode=0o700)
    env = env_for_tests(az.env(TAU_TRUSTED_BLOB_ENDPOINTS=front.origin))
    env["AZURE_STORAGE_CONNECTION_STRING"] = az.connection_string().replace(az.ORIGIN, front.origin)
    try:
        proc = subprocess.Popen([str(BIN / "tau-bundle-fetch"), f"{front.origin}/{az.ACCOUNT}/{box}/rsig/out",
                                 "--generation", "g1", "--destination", str(parent / "d")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 30
        while sum(front.times(p) for p in list(front.asked) if is_range(p)) < 3:  # every range asked, and stalled
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.5)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)  # the stall lasts 40 s: only a cut connection ends it sooner
    finally:
        front.close()
    assert proc.returncode == 143, err
    assert time.monotonic() - started < 5
    assert out == ""
    assert json.loads(err)["message"] == "tau-bundle-fetch: interrupted by SIGTERM"
    assert os.listdir(parent) == []


WATCH = """
import atexit, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(" ".join(sorted(sys.modules))))
sys.argv[:] = ["tau-bundle-fetch", *sys.argv[2:]]
from taulib.cli.bundle_fetch import main
main()
"""


@pytest.mark.parametrize("proxy", [None, "HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_requests_is_imported_only_where_a_proxy_variable_is_set(box, tmp_path, proxy):
    prefix = f"rimport-{proxy}/out"
    digests = odd_bundle(box, tmp_path, prefix)
    env = {k: v for k, v in env_for_tests(az.env()).items() if not k.lower().endswith("_proxy")}
    if proxy is not None:  # a proxy that is never used: NO_PROXY exempts the emulator, as requests decides
        env.update({proxy: "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1"})
    modules = tmp_path / "modules"
    proc = subprocess.run([sys.executable, "-c", WATCH, str(modules), az.url(box, prefix), "--generation", "g1",
                           "--destination", str(tmp_path / "d")], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert az.tree_digests(tmp_path / "d") == digests
    imported = set(modules.read_text().split())
    assert ("requests" in imported) is (proxy is not None)
    assert ("urllib3" in imported) is (proxy is not None)
