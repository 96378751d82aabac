"""The small blobs of tau-bundle-fetch and tau-bundle-verify --deep when no proxy applies (taulib.bundle.multiplex:
every GET multiplexed in one thread) against a real Azurite, behind a front of this module's that misbehaves as a
storage endpoint or a network can: answers 503, 412, 404, 403 or garbage instead of a blob, cuts an answer in its
middle, stalls it past the read timeout, closes every connection after one answer, or sends a head that never ends.
Each case checks the exit code, the one JSON error's words, that a fetch that succeeds has every byte, and that one that
fails leaves nothing beside the destination; the front counts what was asked, so a retry is seen, not assumed.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from pathlib import Path

import pytest

import azurite as az
from helpers import error_of, tau

pytestmark = pytest.mark.azurite

azurite_running = az.azurite_running  # the module's fixtures, shared
box = az.box


class Front:
    """A loopback endpoint in front of Azurite (its own port) that relays one request at a time per connection,
    except where `act(path, seen)` (seen: how many times that path was asked before) returns something else than
    None: bytes to answer instead; ("cut", n): relay the answer's first n bytes and close; ("stall", seconds):
    relay the head, wait, then the body; ("close",): relay the answer, then close the connection; ("interim",):
    an interim "100 Continue" answer first, then the answer; ("alter",): the answer with every byte of its body
    replaced (its length kept); ("drop-next",): relay the answer, then close the connection once the next request
    on it has come, unanswered (an endpoint closing an idle connection just as the client uses it again)."""

    def __init__(self, act) -> None:
        self.act, self.asked, self.connections, self.dropped, self.lock = act, {}, 0, 0, threading.Lock()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.server.close()

    def times(self, path: str) -> int:
        return self.asked.get(path, 0)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = None
        try:
            pending, drop = b"", False
            while True:
                while b"\r\n\r\n" not in pending:
                    data = client.recv(1 << 16)
                    if not data:
                        return
                    pending += data
                head, pending = pending.split(b"\r\n\r\n", 1)
                request = head + b"\r\n\r\n"
                path = head.split(b" ", 2)[1].decode()
                with self.lock:
                    seen = self.asked.get(path, 0)
                    self.asked[path] = seen + 1
                    if drop:
                        self.dropped += 1
                if drop:
                    return
                action = self.act(path, seen)
                if isinstance(action, bytes):
                    client.sendall(action)
                    continue
                if upstream is None:
                    upstream = socket.create_connection(("127.0.0.1", az.PORT))
                upstream.sendall(request)
                answer_head, body = _answer(upstream)
                if action and action[0] == "alter":
                    body = bytes(255 - c for c in body)
                if action and action[0] == "cut":
                    client.sendall((answer_head + body)[:action[1]])
                    return
                if action and action[0] == "interim":
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                client.sendall(answer_head)
                if action and action[0] == "stall":
                    time.sleep(action[1])
                client.sendall(body)
                if action and action[0] == "close":
                    return
                drop = bool(action) and action[0] == "drop-next"
        except OSError:
            pass
        finally:
            client.close()
            if upstream is not None:
                upstream.close()


def _answer(upstream: socket.socket) -> tuple[bytes, bytes]:
    """One whole answer read from Azurite: (head with its blank line, body as sent: chunked, or of its length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += _more(upstream)
    head, body = data.split(b"\r\n\r\n", 1)
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    if length is not None:
        while len(body) < int(length.group(1)):
            body += _more(upstream)
        return head + b"\r\n\r\n", body
    at = 0  # chunked: size line, chunk, CRLF ... up to the chunk of size 0 and its blank line
    while True:
        while b"\r\n" not in body[at:]:
            body += _more(upstream)
        line_end = body.index(b"\r\n", at)
        size = int(body[at:line_end].split(b";")[0], 16)
        at = line_end + 2 + size + 2
        while len(body) < at:
            body += _more(upstream)
        if not size:
            return head + b"\r\n\r\n", body


def _more(upstream: socket.socket) -> bytes:
    data = upstream.recv(1 << 16)
    if not data:
        raise OSError("Azurite closed the connection")
    return data


def payload(path: str) -> bool:
    """Whether a request path is one of the bundle's files (not its manifest, marker or the listing)."""
    return "/.tau/" not in path and "comp=list" not in path


def canned(status: str, body: bytes = b"", extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def bundle(box: str, tmp_path: Path, prefix: str, small: int = 40) -> tuple[dict, str]:
    root = tmp_path / "src"
    digests = az.make_tree(root, small=small)
    proc = tau("tau-bundle-seal", str(root), "--generation", "g1", "--upload", az.url(box, prefix), env=az.env())
    assert proc.returncode == 0, proc.stderr
    return digests, prefix


def fetch(front: Front, box: str, prefix: str, parent: Path, **extra: str):
    parent.mkdir(mode=0o700, exist_ok=True)
    env = az.env(TAU_TRUSTED_BLOB_ENDPOINTS=front.origin, **extra)
    env["AZURE_STORAGE_CONNECTION_STRING"] = az.connection_string().replace(az.ORIGIN, front.origin)
    return tau("tau-bundle-fetch", f"{front.origin}/{az.ACCOUNT}/{box}/{prefix}", "--generation", "g1",
               "--destination", str(parent / "d"), env=env)


def with_front(act, box, tmp_path, prefix, small=40, **extra):
    digests, prefix = bundle(box, tmp_path, prefix, small)
    front = Front(act)
    try:
        proc = fetch(front, box, prefix, tmp_path / "fetched", **extra)
    finally:
        front.close()
    return proc, front, digests


def first_payload(front: Front) -> list[str]:
    return sorted(p for p in front.asked if payload(p))


def test_blobs_answered_503_are_tried_again_and_arrive_byte_for_byte(box, tmp_path):
    busy = set()

    def act(path, seen):
        if payload(path) and not seen and len(busy) < 3:
            busy.add(path)
            return canned("503 Service Unavailable")
        return None

    proc, front, digests = with_front(act, box, tmp_path, "w503/out")
    assert proc.returncode == 0, proc.stderr
    assert az.tree_digests(tmp_path / "fetched" / "d") == digests
    assert len(busy) == 3 and all(front.times(p) == 2 for p in busy)
    assert sum(front.times(p) for p in first_payload(front)) == len(digests) + 3
    assert os.listdir(tmp_path / "fetched") == ["d"]


def test_a_blob_cut_in_the_middle_of_its_answer_is_fetched_again_from_its_start(box, tmp_path):
    cut = []

    def act(path, seen):
        if payload(path) and not seen and not cut and path.endswith("file-0049.txt"):
            cut.append(path)
            return ("cut", 700)  # the head and part of the body
        return None

    proc, front, digests = with_front(act, box, tmp_path, "wcut/out", small=60)
    assert proc.returncode == 0, proc.stderr
    assert cut and front.times(cut[0]) == 2
    assert az.tree_digests(tmp_path / "fetched" / "d") == digests


def test_connections_closed_after_every_answer_are_replaced_without_spending_a_try(box, tmp_path):
    proc, front, digests = with_front(lambda path, seen: ("close",), box, tmp_path, "wclose/out", small=120,
                                      TAU_BLOB_RETRIES="0")
    assert proc.returncode == 0, proc.stderr
    assert az.tree_digests(tmp_path / "fetched" / "d") == digests
    assert front.connections >= len(digests)  # a new connection for each blob: none was reused


def test_an_answer_stalled_past_the_read_timeout_is_tried_again(box, tmp_path):
    stalled = []

    def act(path, seen):
        if payload(path) and not seen and not stalled:
            stalled.append(path)
            return ("stall", 4)
        return None

    started = time.monotonic()
    proc, front, digests = with_front(act, box, tmp_path, "wstall/out", TAU_BLOB_READ_TIMEOUT="1")
    assert proc.returncode == 0, proc.stderr
    assert front.times(stalled[0]) == 2
    assert az.tree_digests(tmp_path / "fetched" / "d") == digests
    assert time.monotonic() - started < 60


def test_spent_tries_exit_69_naming_the_blob_and_the_answer_and_leave_nothing(box, tmp_path):
    proc, front, _ = with_front(lambda path, seen: canned("503 Service Unavailable") if payload(path) else None,
                                box, tmp_path, "wspent/out", small=5)
    assert proc.returncode == 69, proc.stderr
    message = error_of(proc)["message"]
    assert re.fullmatch(r"tau-bundle-fetch: downloading wspent/out/part-\d/file-\d{4}\.txt: Blob storage answered "
                        r"503 Service Unavailable", message), message
    assert os.listdir(tmp_path / "fetched") == []


def test_a_read_timeout_with_no_try_left_exits_69_saying_so(box, tmp_path):
    proc, front, _ = with_front(lambda path, seen: ("stall", 3) if payload(path) else None, box, tmp_path,
                                "wtimeout/out", small=3, TAU_BLOB_READ_TIMEOUT="1", TAU_BLOB_RETRIES="0")
    assert proc.returncode == 69, proc.stderr
    assert error_of(proc)["message"].endswith(": Blob storage cannot be reached (ReadTimeoutError)")
    assert os.listdir(tmp_path / "fetched") == []


def test_answers_that_refuse_a_blob_keep_their_exit_codes_and_words(box, tmp_path):
    cases = [("412 Condition Not Met", 1, "the blob changed after it was listed"),
             ("404 The specified blob does not exist.", 66, "not found (The specified blob does not exist.)"),
             ("403 Forbidden", 77, "access denied (403): Blob storage refused the account key of "
                                   "AZURE_STORAGE_CONNECTION_STRING")]
    for n, (status, code, words) in enumerate(cases):
        proc, front, _ = with_front(lambda path, seen, status=status: canned(status) if payload(path) else None,
                                    box, tmp_path / str(n), f"wrefused{n}/out", small=3)
        assert proc.returncode == code, (status, proc.stderr)
        message = error_of(proc)["message"]
        assert re.match(r"tau-bundle-fetch: downloading wrefused\d/out/part-\d/file-\d{4}\.txt: ", message), message
        assert words in message, message
        assert os.listdir(tmp_path / str(n) / "fetched") == []
        assert {front.times(p) for p in first_payload(front)} == {1}  # refused at once, never tried again


def test_a_blob_of_another_length_than_listed_fails_the_check(box, tmp_path):
    proc, front, _ = with_front(lambda path, seen: canned("200 OK", b"x" * 5) if payload(path) else None,
                                box, tmp_path, "wlength/out", small=3)
    assert proc.returncode == 1, proc.stderr
    assert re.search(r"wlength/out/part-\d/file-\d{4}\.txt has 5 bytes, the listing said \d+$",
                     error_of(proc)["message"]), proc.stderr
    assert os.listdir(tmp_path / "fetched") == []


def test_garbage_a_head_without_end_or_no_length_are_unavailable(box, tmp_path):
    cases = [(b"HELLO\r\n\r\n", "Blob storage cannot be reached (ProtocolError)"),
             (b"HTTP/1.1 200 OK\r\n" + b"X-Filler: " + b"y" * (80 << 10), "answered a head of more than 65536 bytes"),
             (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
              "Blob storage answered without a Content-Length")]
    for n, (answer, words) in enumerate(cases):
        proc, front, _ = with_front(lambda path, seen, answer=answer: answer if payload(path) else None,
                                    box, tmp_path / str(n), f"wgarbage{n}/out", small=2, TAU_BLOB_RETRIES="0",
                                    TAU_BLOB_READ_TIMEOUT="5")
        assert proc.returncode == 69, (answer[:20], proc.stderr)
        assert words in error_of(proc)["message"], proc.stderr
        assert os.listdir(tmp_path / str(n) / "fetched") == []


def test_an_interim_100_answer_is_skipped_and_the_blob_arrives(box, tmp_path):
    proc, front, digests = with_front(lambda path, seen: ("interim",) if payload(path) else None, box, tmp_path,
                                      "winterim/out", small=4)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["files"] == 4
    assert az.tree_digests(tmp_path / "fetched" / "d") == digests


def test_a_file_that_cannot_be_written_is_the_callers_error_never_retried_as_the_networks(box, tmp_path):
    import errno

    from taulib.bundle import blob, endpoint, small_blobs

    digests, prefix = bundle(box, tmp_path, "wfull/out", small=6)
    front = Front(lambda path, seen: None)
    try:
        env = az.env(TAU_TRUSTED_BLOB_ENDPOINTS=front.origin)
        env["AZURE_STORAGE_CONNECTION_STRING"] = az.connection_string().replace(az.ORIGIN, front.origin)
        client = blob.reader(endpoint.parse(f"{front.origin}/{az.ACCOUNT}/{box}/{prefix}", env), env)
        entries = [{"path": p, "size": s} for p, (s, _) in blob.list_prefix(client, prefix).items()
                   if not p.startswith(".tau/")]
        etags = {p: e for p, (_, e) in blob.list_prefix(client, prefix).items()}

        def full(entry):
            raise OSError(errno.ENOSPC, "No space left on device")

        try:
            small_blobs.download(client, prefix, entries, etags, full, lambda *a: None, None)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        else:
            raise AssertionError("the disk error was swallowed")
        client.close()
    finally:
        front.close()
    assert {front.times(p) for p in first_payload(front)} == {1}  # asked once each at most: never tried again
    assert len(entries) == len(digests)


def test_deep_verify_multiplexes_small_blobs_too_retrying_and_naming_a_blob_whose_bytes_differ(box, tmp_path):
    digests, prefix = bundle(box, tmp_path, "wverify/out", small=30)
    altered, busy = sorted(digests)[7], sorted(digests)[3]

    def act(path, seen):
        if path.endswith(altered):
            return ("alter",)
        if path.endswith(busy) and not seen:
            return canned("500 Internal Server Error")
        return None

    front = Front(act)
    try:
        env = az.env(TAU_TRUSTED_BLOB_ENDPOINTS=front.origin)
        env["AZURE_STORAGE_CONNECTION_STRING"] = az.connection_string().replace(az.ORIGIN, front.origin)
        proc = tau("tau-bundle-verify", f"{front.origin}/{az.ACCOUNT}/{box}/{prefix}", "--generation", "g1",
                   "--deep", env=env)
    finally:
        front.close()
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["digest_mismatch"] == [altered] and report["problems"] == [], report
    assert front.times(next(p for p in front.asked if p.endswith(busy))) == 2
    assert sum(front.times(p) for p in first_payload(front)) == len(digests) + 1


def test_an_address_that_refuses_is_passed_over_for_the_next_one_the_name_resolves_to(box, tmp_path, monkeypatch):
    import hashlib
    import socket as sockets

    from taulib.bundle import blob, endpoint, small_blobs
    from taulib.errors import Unavailable

    digests, prefix = bundle(box, tmp_path, "waddr/out", small=20)
    closed = sockets.socket()
    closed.bind(("127.0.0.1", 0))
    refusing = closed.getsockname()  # bound, never listening: connections to it are refused
    front = Front(lambda path, seen: None)
    real = sockets.getaddrinfo

    def resolve(host, port, *args, **kwargs):
        answers = real(host, port, *args, **kwargs)
        if port == front.port:  # the front's name resolves to a refusing address first, as a broken IPv6 would
            return [(sockets.AF_INET, sockets.SOCK_STREAM, 6, "", refusing)] + answers
        return answers

    monkeypatch.setattr(sockets, "getaddrinfo", resolve)
    got = {}
    try:
        env = az.env(TAU_TRUSTED_BLOB_ENDPOINTS=front.origin, TAU_BLOB_RETRIES="0")
        env["AZURE_STORAGE_CONNECTION_STRING"] = az.connection_string().replace(az.ORIGIN, front.origin)
        client = blob.reader(endpoint.parse(f"{front.origin}/{az.ACCOUNT}/{box}/{prefix}", env), env)
        listing = blob.list_prefix(client, prefix)
        entries = [{"path": p, "size": s} for p, (s, _) in listing.items() if not p.startswith(".tau/")]
        etags = {p: e for p, (_, e) in listing.items()}
        folder = tmp_path / "got"
        folder.mkdir()

        def open_fd(entry):
            return os.open(folder / entry["path"].replace("/", "_"), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)

        def finish(entry, sha, fd):
            os.close(fd)
            got[entry["path"]] = sha

        small_blobs.download(client, prefix, entries, etags, open_fd, finish, None)
        assert got == digests
        assert {p: hashlib.sha256((folder / p.replace("/", "_")).read_bytes()).hexdigest() for p in got} == digests

        def refused(host, port, *args, **kwargs):
            if port == front.port:
                return [(sockets.AF_INET, sockets.SOCK_STREAM, 6, "", refusing)]
            return real(host, port, *args, **kwargs)

        monkeypatch.setattr(sockets, "getaddrinfo", refused)
        try:
            small_blobs.download(client, prefix, entries, etags, lambda entry: None, finish, None)
        except Unavailable as exc:
            assert exc.message.endswith(": Blob storage cannot be reached (ConnectionRefusedError)"), exc.message
        else:
            raise AssertionError("no address answered, yet the download succeeded")
        client.close()
    finally:
        front.close()
        closed.close()
