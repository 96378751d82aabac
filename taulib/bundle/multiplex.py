"""Many GETs of whole blobs of one Blob storage endpoint at once, multiplexed over keep-alive connections in the
calling thread: the small blobs of tau-bundle-fetch and tau-bundle-verify --deep, without a thread per transfer.

Reads: blobs from the endpoint of a `rest.Client`, each into its connection's buffer. Writes: nothing (each `Get`
puts its body where it belongs). Why: with a thread per transfer, every recv and write hands the interpreter lock to
another thread (a 2,000-blob fetch made ~97 futex calls a blob, and used more CPU than the storage endpoint beside
it); here non-blocking sockets are multiplexed with `selectors`, so the only waits are for the network.

The rules are `rest.Client`'s, the same as for every other request tau makes: its headers and signature
(`Client.headers`), its checks of a body's length (`Client.check_length`) and its words and exit codes for an answer
that is not 200/206 (`Client.refuse`); TAU_BLOB_RETRIES more tries of a GET after a connection failure, a body cut
short, a read that timed out, 408 or a 5xx other than 501 and 505, backoff from about a second; a blob is read again
from its start; 5 s to connect, TAU_BLOB_READ_TIMEOUT without a byte while an answer is awaited. A connection kept
alive that the endpoint closed meanwhile is replaced once, without a try counted (the endpoint closed it while
idle). Used only when no proxy applies to the endpoint (through a proxy `rest.Client`'s connection pool is used);
https with the certificates requests would trust (`Client.verify`). Signals: the loop runs in the main thread, so a
stop signal's exception leaves it at once; `close` then closes every connection.
"""

from __future__ import annotations

import errno
import os
import random
import selectors
import socket
import ssl
import time
from typing import TYPE_CHECKING, TypeVar, TypeVarTuple
from urllib.parse import urlsplit

from taulib.bundle.connections import tls_context
from taulib.bundle.rest import Again, Client
from taulib.errors import Unavailable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    # what socket.getaddrinfo gives for each address: (family, type, proto, canonname, sockaddr)
    AddressInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str,
                        tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes]]

HEAD_LIMIT = 64 << 10  # bytes of status line and headers accepted in one answer
CONNECT_TIMEOUT = 5.0
TICK = 0.2  # longest wait without looking at deadlines and retries
RECV = 256 << 10  # bytes asked of the socket at a time while reading an answer's head
_R = TypeVar("_R")
_Ts = TypeVarTuple("_Ts")


class Get:
    """One GET of the whole blob `name`, which must have exactly `length` bytes (at most the engine's scratch
    size). Its body arrives into the connection's buffer (a try after a failure starts again from 0), and
    ended(body) is given it whole; what ended raises is the caller's, never tried again."""

    def __init__(self, name: str, etag: str | None, length: int) -> None:
        self.name, self.etag, self.length = name, etag, length
        self.got = 0  # body bytes arrived so far
        self.tries = 0  # failed tries so far
        self.not_before = 0.0

    def ended(self, body: memoryview) -> None:
        pass


class _Failed(Exception):
    """A try of a GET failed in a way another try may not (the reason, for the error once the tries are spent);
    `stale`: a kept-alive connection closed before any byte of the answer."""

    def __init__(self, reason: str, stale: bool = False) -> None:
        super().__init__(reason)
        self.stale = stale


class _Theirs(Exception):
    """What a Get's own code raised (a full disk, a file that cannot be made): never the network's, never tried
    again."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error


def _theirs(call: Callable[[*_Ts], _R], *args: *_Ts) -> _R:
    try:
        return call(*args)
    except BaseException as exc:
        raise _Theirs(exc) from None


class _Conn:
    __slots__ = ("sock", "state", "out", "head", "get", "left", "close_after", "reused", "deadline", "scratch",
                 "auth", "error", "address")

    def __init__(self, scratch: memoryview) -> None:
        self.sock: socket.socket | None = None  # an ssl.SSLSocket once wrapped; None until first dialled
        self.scratch, self.address = scratch, 0
        self.state = "connect"  # connect, handshake, send, head, body, idle
        self.out, self.head, self.left = b"", bytearray(), 0
        self.get: Get | None = None  # the GET on it, None while idle
        self.close_after = self.reused = False
        self.deadline, self.auth, self.error = time.monotonic() + CONNECT_TIMEOUT, "", 0

    def socket_in_use(self) -> socket.socket:
        """Its socket, which a connection in use always has."""
        assert self.sock is not None, "a connection in use has a socket"
        return self.sock

    def get_in_use(self) -> Get:
        """The GET on it, which a connection that is not idle always has."""
        assert self.get is not None, "a connection that is not idle has a GET"
        return self.get


class Engine:
    """GETs of `client`'s endpoint over at most `connections` connections, each with a scratch buffer of
    `scratch` bytes (anonymous memory: only the pages a body fills are resident)."""

    def __init__(self, client: Client, connections: int, scratch: int) -> None:
        import mmap

        self.client, self.limit = client, connections
        url = urlsplit(client.account_url)
        self.tls = url.scheme == "https"
        self.host, self.port = url.hostname or "", url.port or (443 if self.tls else 80)
        default = (443 if self.tls else 80) == self.port
        self.host_header = (f"[{self.host}]" if ":" in self.host else self.host) + ("" if default else f":{self.port}")
        self.context = tls_context(client.verify) if self.tls else None
        self.addresses: Sequence[AddressInfo] = []  # the endpoint's, resolved at the first connection
        self.selector = selectors.DefaultSelector()
        self.conns: list[_Conn] = []
        self.buffers = [memoryview(mmap.mmap(-1, scratch)) for _ in range(connections)]
        self.read_timeout = float(client.read_timeout)

    def close(self) -> None:
        for conn in list(self.conns):
            self._drop(conn)
        self.selector.close()

    def run(self, gets: Iterable[Get]) -> None:
        """Every Get of the iterable `gets`, one per connection at a time, taken from it in order as connections
        free up; returns when all ended, raises the first failure that is not tried again."""
        source, exhausted = iter(gets), False
        retries: list[Get] = []  # GETs waiting for their next try, the soonest first
        busy = 0
        while True:
            now = time.monotonic()
            while busy < self.limit:
                get = retries.pop(0) if retries and retries[0].not_before <= now else None
                if get is None and not exhausted:
                    get = next(source, None)
                    exhausted = get is None
                if get is None:
                    break
                self._start(get, now)
                busy += 1
            if not busy and exhausted and not retries:
                return
            wake = min([c.deadline for c in self.conns if c.get is not None] + [g.not_before for g in retries]
                       + [now + TICK])
            for key, _ in self.selector.select(max(0.0, min(TICK, wake - now))):
                conn = key.data
                try:
                    if self._advance(conn):
                        busy -= 1
                except _Failed as failed:
                    busy -= 1
                    self._retry(conn, failed, retries)
            now = time.monotonic()
            for conn in [c for c in self.conns if c.get is not None and c.deadline < now]:
                if conn.state == "connect" and conn.address + 1 < len(self.addresses):
                    self._dial(conn, conn.address + 1)
                    continue
                busy -= 1
                self._retry(conn, _Failed("Blob storage cannot be reached (ReadTimeoutError)" if conn.state in
                                          ("head", "body") else "Blob storage cannot be reached (ConnectTimeoutError)"),
                            retries)

    # -- one GET on one connection ---------------------------------------------------------------------------------
    def _start(self, get: Get, now: float) -> None:
        conn = next((c for c in self.conns if c.state == "idle"), None)
        if conn is None:
            conn = self._connect()
        conn.get, get.got = get, 0  # a blob tried again is read again from its start
        what = f"downloading {get.name}"
        path = self.client.blob_path(get.name)
        headers = self.client.headers(what, path, None, get.etag, None)
        conn.auth = headers.get("Authorization", "")
        lines = [f"GET {path} HTTP/1.1", f"Host: {self.host_header}", "Accept-Encoding: identity"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        conn.out = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        conn.head, conn.close_after = bytearray(), False
        if conn.state == "idle":
            conn.state, conn.reused = "send", True
            conn.deadline = now + self.read_timeout
            self.selector.modify(conn.socket_in_use(), selectors.EVENT_WRITE, conn)

    def _connect(self) -> _Conn:
        if not self.addresses:
            try:
                self.addresses = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            except OSError as exc:
                raise Unavailable(f"Blob storage cannot be reached ({type(exc).__name__})") from None
        conn = _Conn(self.buffers.pop())
        self.conns.append(conn)
        try:
            self._dial(conn, 0)
        except BaseException:
            self._drop(conn)
            raise
        return conn

    def _dial(self, conn: _Conn, index: int) -> None:
        """Start connecting conn to the endpoint's address `index` (as create_connection does, the next address is
        tried when one cannot be reached), its earlier socket closed."""
        if conn.sock is not None:
            self.selector.unregister(conn.sock)
            conn.sock.close()
            conn.sock = None
        family, kind, proto, _, address = self.addresses[index]
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sock, conn.address, conn.error = sock, index, 0
        conn.deadline = time.monotonic() + CONNECT_TIMEOUT
        code = sock.connect_ex(address)
        self.selector.register(sock, selectors.EVENT_WRITE, conn)
        if code not in (0, errno.EINPROGRESS):
            conn.error = code  # said when the socket is next ready (a failed socket is)

    def _drop(self, conn: _Conn) -> None:
        """Close conn; again after a stop signal cut a first call short, it does what is left."""
        if conn in self.conns:
            self.conns.remove(conn)
            self.buffers.append(conn.scratch)
        if conn.sock is not None:
            try:
                self.selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.sock.close()

    def _retry(self, conn: _Conn, failed: _Failed, retries: list[Get]) -> None:
        """The try of conn's GET failed: the connection is closed; the GET goes back to wait for its next try,
        or its failure is raised when its tries are spent."""
        get, stale = conn.get_in_use(), failed.stale and conn.reused
        self._drop(conn)
        if not stale:
            get.tries += 1
            if get.tries >= self.client.tries:
                raise Unavailable(f"downloading {get.name}: {failed}")
            get.not_before = time.monotonic() + random.uniform(0.5, 1.5) * 2 ** (get.tries - 1)
        retries.append(get)
        retries.sort(key=lambda g: g.not_before)

    def _advance(self, conn: _Conn) -> bool:
        """Do what conn is ready for; whether its GET ended."""
        try:
            if conn.state == "idle":  # the endpoint closed a connection kept alive, or said what was not asked
                self._drop(conn)
                return False
            if conn.state == "connect":
                code = conn.error or conn.socket_in_use().getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code and conn.address + 1 < len(self.addresses):
                    self._dial(conn, conn.address + 1)
                    return False
                if code:
                    raise OSError(code, os.strerror(code))
                if self.context is not None:  # https
                    conn.sock = self.context.wrap_socket(conn.socket_in_use(), server_hostname=self.host,
                                                         do_handshake_on_connect=False)
                    self.selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
                    conn.state = "handshake"
                else:
                    conn.state = "send"
            if conn.state == "handshake":
                tls = conn.socket_in_use()
                assert isinstance(tls, ssl.SSLSocket), "only a TLS connection has a handshake"
                tls.do_handshake()
                conn.state = "send"
            if conn.state == "send":
                while conn.out:
                    conn.out = conn.out[conn.socket_in_use().send(conn.out):]
                conn.state, conn.deadline = "head", time.monotonic() + self.read_timeout
                self.selector.modify(conn.socket_in_use(), selectors.EVENT_READ, conn)
                return False
            return self._receive(conn)
        except _Theirs as theirs:
            raise theirs.error from None
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError) as want:
            self.selector.modify(conn.socket_in_use(), selectors.EVENT_READ if isinstance(want, ssl.SSLWantReadError)
                                 else selectors.EVENT_WRITE, conn)
            return False
        except BlockingIOError:
            return False
        except ssl.SSLError as exc:  # an end of the connection where an answer should begin is a stale one too
            stale = isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError)) and conn.state == "head" \
                and not conn.head
            raise _Failed("Blob storage cannot be reached (SSLError)", stale) from None
        except OSError as exc:
            stale = conn.state == "head" and not conn.head
            raise _Failed(f"Blob storage cannot be reached ({type(exc).__name__})", stale) from None

    def _receive(self, conn: _Conn) -> bool:
        get, sock = conn.get_in_use(), conn.socket_in_use()
        while True:
            if conn.state == "head":
                data = sock.recv(RECV)
                if not data:
                    raise _Failed("Blob storage cannot be reached (ProtocolError)", stale=not conn.head)
                conn.head += data
                if not self._parsed(conn):
                    continue
                if conn.state == "body" and not conn.left:
                    return self._ended(conn)
                continue
            n = sock.recv_into(conn.scratch[get.got:get.got + conn.left])
            if not n:
                raise _Failed("Blob storage cannot be reached (IncompleteRead)")
            self._received(conn, n)
            if not conn.left:
                return self._ended(conn)

    def _received(self, conn: _Conn, n: int) -> None:
        conn.get_in_use().got += n
        conn.left -= n
        conn.deadline = time.monotonic() + self.read_timeout

    def _parsed(self, conn: _Conn) -> bool:
        """Whether conn's answer head is complete (then checked, and the body bytes that came with it given)."""
        end = conn.head.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.head) > HEAD_LIMIT:
                raise Unavailable(f"downloading {conn.get_in_use().name}: Blob storage answered a head of more than "
                                  f"{HEAD_LIMIT} bytes")
            return False
        head, rest = bytes(conn.head[:end]).decode("latin-1"), memoryview(bytes(conn.head[end + 4:]))
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise _Failed("Blob storage cannot be reached (ProtocolError)")
        status, reason = int(parts[1]), parts[2] if len(parts) > 2 else ""
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if colon:
                fields[name.strip().lower()] = value.strip()
        if 100 <= status < 200:  # an interim answer: the real one follows
            conn.head = bytearray(rest)
            return self._parsed(conn)
        get = conn.get_in_use()
        what = f"downloading {get.name}"
        conn.close_after = fields.get("connection", "").lower() == "close" or parts[0] == "HTTP/1.0"
        if status not in (200, 206):
            try:
                self.client.refuse(what, status, reason, {"Authorization": conn.auth})
            except Again as again:
                raise _Failed(str(again)) from None
        length = fields.get("content-length")
        available = int(length) if length and length.isdigit() and "transfer-encoding" not in fields else None
        conn.left = self.client.check_length(available, what, get.name, get.length, True)
        conn.state = "body"
        if len(rest) > conn.left:
            raise _Failed("Blob storage cannot be reached (ProtocolError)")
        conn.scratch[:len(rest)] = rest  # the body's first bytes came with the head
        self._received(conn, len(rest))
        return True

    def _ended(self, conn: _Conn) -> bool:
        get = conn.get_in_use()
        conn.get, conn.state = None, "idle"
        if conn.close_after:
            self._drop(conn)
        _theirs(get.ended, conn.scratch[:get.length])
        return True
