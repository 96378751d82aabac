"""tau-bundle-fetch's own reader of Blob storage (taulib.bundle.rest, no SDK) on a real Azurite: what the SDK used to
do for it, done the same way.

Names that must be percent-encoded are signed and fetched byte for byte; a listing that takes several pages is read
whole; a wrong account key is refused (77) with the words the SDK's errors had; a connection cut in the middle of a
range is tried again from where it was cut (a relay of this module's between tau and Azurite cuts it), and the fetch
is byte for byte; a fetch stopped by one SIGTERM while its transfers run removes its stage and its claim.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

import azurite as az
from helpers import BIN, env_for_tests, error_of, tau

pytestmark = pytest.mark.azurite

azurite_running = az.azurite_running  # the module's fixtures, shared
box = az.box


def seal(root: Path, url: str) -> None:
    proc = tau("tau-bundle-seal", str(root), "--generation", "g1", "--upload", url, env=az.env())
    assert proc.returncode == 0, proc.stderr


def fresh_parent(tmp_path: Path) -> Path:
    parent = tmp_path / "fetched"
    parent.mkdir(mode=0o700)
    return parent


NAMES = ["with space.txt", "plus+and%25percent%.bin", "q?mark#hash&amp=eq;semi.txt", "ünïcødé/日本語.txt",
         "quotes'\"and`tick.txt", "~tilde/(paren)[bracket]{brace}!$*,@:.txt"]


def test_names_that_must_be_percent_encoded_are_fetched_and_deep_verified_byte_for_byte(box, tmp_path):
    root = tmp_path / "src"
    for n, name in enumerate(NAMES):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(f"{n}:{name}\n".encode() * (n + 1))
    url = az.url(box, "encoded/out")
    seal(root, url)
    parent = fresh_parent(tmp_path)
    proc = tau("tau-bundle-fetch", url, "--generation", "g1", "--destination", str(parent / "d"), env=az.env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["files"] == len(NAMES)
    assert az.tree_digests(parent / "d") == az.tree_digests(root)
    proc = tau("tau-bundle-verify", url, "--generation", "g1", "--deep", env=az.env())
    assert proc.returncode == 0, proc.stderr


def test_a_listing_of_several_pages_is_read_whole(box, tmp_path, monkeypatch):
    from taulib.bundle import blob, endpoint, rest

    root = tmp_path / "src"
    az.make_tree(root, small=11)
    url = az.url(box, "paged/out")
    seal(root, url)
    monkeypatch.setattr(rest, "LIST_PAGE", 3)  # 11 files and the generation's own: five answers
    reader = blob.reader(endpoint.parse(url, az.env()), az.env())
    listing = blob.list_prefix(reader, "paged/out")
    assert sorted(listing) == az.blob_names(box, "paged/out")
    sdk = blob.list_prefix(blob.container(endpoint.parse(url, az.env()), az.env()), "paged/out")
    assert listing == sdk  # sizes and etags as the SDK lists them


def test_a_wrong_account_key_is_refused_saying_which_credential_and_nothing_is_written(box, tmp_path):
    root = tmp_path / "src"
    az.make_tree(root, small=3)
    url = az.url(box, "wrong-key/out")
    seal(root, url)
    wrong = az.connection_string().replace(az.KEY, "A" * 86 + "==")
    parent = fresh_parent(tmp_path)
    proc = tau("tau-bundle-fetch", url, "--generation", "g1", "--destination", str(parent / "d"),
               env=az.env(AZURE_STORAGE_CONNECTION_STRING=wrong))
    assert proc.returncode == 77, proc.stderr
    assert error_of(proc)["message"] == (
        "tau-bundle-fetch: reading wrong-key/out/.tau/bundles/g1.json: access denied (403): Blob storage refused the "
        "account key of AZURE_STORAGE_CONNECTION_STRING; check the key, or unset it to use an Azure identity")
    assert os.listdir(parent) == []


class CuttingRelay:
    """A TCP relay to Azurite on 127.0.0.1 (its own port) that cuts the first connection whose answer grows past
    `cut_after` bytes, once; it notes the x-ms-range of every request it relays."""

    def __init__(self, cut_after: int) -> None:
        self.cut_after, self.cut, self.ranges = cut_after, 0, []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", az.PORT))
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client), daemon=True).start()

    def _requests(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(1 << 16):
                self.ranges += re.findall(rb"x-ms-range: bytes=(\d+)-(\d+)", data, re.IGNORECASE)
                target.sendall(data)
        except OSError:
            pass
        finally:
            target.close()

    def _answers(self, source: socket.socket, target: socket.socket) -> None:
        relayed = 0
        try:
            while data := source.recv(1 << 16):
                target.sendall(data)
                relayed += len(data)
                if not self.cut and relayed > self.cut_after:
                    self.cut += 1
                    target.shutdown(socket.SHUT_RDWR)
                    break
        except OSError:
            pass
        finally:
            target.close()
            source.close()

    def close(self) -> None:
        self.server.close()


def test_a_connection_cut_in_the_middle_of_a_range_is_resumed_where_it_was_cut(box, tmp_path):
    from taulib.bundle import transfer

    root = tmp_path / "src"
    digests = az.make_tree(root, small=5, big_mib=40)
    seal(root, az.url(box, "cut/out"))
    relay = CuttingRelay(cut_after=5 << 20)
    try:
        origin = f"http://127.0.0.1:{relay.port}"
        parent = fresh_parent(tmp_path)
        proc = tau("tau-bundle-fetch", f"{origin}/{az.ACCOUNT}/{box}/cut/out", "--generation", "g1",
                   "--destination", str(parent / "d"), env=az.env(TAU_TRUSTED_BLOB_ENDPOINTS=origin))
    finally:
        relay.close()
    assert proc.returncode == 0, proc.stderr
    assert relay.cut == 1
    assert az.tree_digests(parent / "d") == digests
    starts = sorted(int(a) for a, _ in relay.ranges)
    planned = transfer.spans(40 << 20, transfer.SPAN)
    resumed = [s for s in starts if s not in {o for o, _ in planned}]  # where the cut one stopped
    assert len(resumed) == 1 and any(o < resumed[0] < o + n for o, n in planned), starts
    assert sorted(set(starts) - set(resumed)) == [o for o, _ in planned]
    assert sorted(os.listdir(parent)) == ["d"]


def test_one_sigterm_while_the_transfers_run_removes_the_stage_and_the_claim(box, tmp_path):
    root = tmp_path / "src"
    az.make_tree(root, small=600, big_mib=48)
    url = az.url(box, "sigterm/out")
    seal(root, url)
    parent = fresh_parent(tmp_path)
    proc = subprocess.Popen([str(BIN / "tau-bundle-fetch"), url, "--generation", "g1", "--destination",
                             str(parent / "model")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_for_tests(az.env()))
    stage = None
    deadline = time.monotonic() + 60
    while stage is None or not any((parent / stage).rglob("*.txt")):  # small files are arriving
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        stage = next((n for n in os.listdir(parent) if n.startswith(".model.tau-fetch-")), None)
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert out == ""
    error = json.loads(err.strip())  # exactly one error object
    assert (error["error"], error["message"], error["details"]) == ("interrupted",
                                                                    "tau-bundle-fetch: interrupted by SIGTERM",
                                                                    {"signal": "SIGTERM"})
    assert os.listdir(parent) == []
