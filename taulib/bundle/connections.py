"""The connections of rest.Client when no proxy applies: http.client connections to one Blob storage
endpoint, kept alive between requests and shared by the threads of a transfer, one request on a connection at a
time.

Reads and Writes: sockets to the endpoint; the certificate files named. Promises: a connection is made within
CONNECT_TIMEOUT, then each read waits at most the read timeout (a timeout is named as urllib3 and `multiplex` name it:
`named`); an idle connection the endpoint closed meanwhile is found before it is used and opened again, without a try
counted (one whose close was still on the way fails its request before any answer: `rest.Client` sends it again over a
`take(new=True)` connection, without a try counted either); https with `tls_context`'s certificates and the endpoint's
host name checked; `interrupt` cuts the connections requests are using, so that the threads reading them wake at once,
and no request waits for an answer after it; the reader of a long body is woken per LOW_WATER bytes, not per packet
(`low_water`: ~0.2 CPU-s less for each GiB read).
"""

from __future__ import annotations

import http.client
import os
import select
import socket
import threading
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import ssl

CONNECT_TIMEOUT = 5.0
ERROR_BODY = 64 << 10  # bytes of an error answer's body read before its connection is given back
LOW_WATER = 1 << 20  # bytes a reader of a long body is woken for (SO_RCVLOWAT), not for every packet
TAIL = LOW_WATER + (64 << 10)  # a body's last bytes, read as they come (more than a TLS record past LOW_WATER)


class Pool:
    """Kept-alive connections to `account_url` (http or https; `verify` as `tls_context` takes it)."""

    def __init__(self, account_url: str, verify: bool | str, read_timeout: float) -> None:
        url = urlsplit(account_url)
        self.host, self.port, self.read_timeout = url.hostname or "", url.port, read_timeout
        self.context = tls_context(verify) if url.scheme == "https" else None
        self.idle: list[http.client.HTTPConnection] = []
        self.busy: set[http.client.HTTPConnection] = set()  # those a request is using now
        self.cut = False  # interrupted: no request is to wait for an answer any more
        self.lock = threading.Lock()

    def take(self, new: bool = False) -> http.client.HTTPConnection:
        """An idle connection whose endpoint has not closed it meanwhile, as far as can be seen (a closed one opens
        again when used), or a new one (always, when `new`)."""
        with self.lock:
            conn = self.idle.pop() if self.idle and not new else None
        if conn is None:
            conn = (_Plain(self.host, self.port, self.read_timeout) if self.context is None
                    else _Secure(self.host, self.port, self.read_timeout, self.context))
        elif conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
            conn.close()  # readable while idle: the endpoint closed it (or said what was not asked)
        with self.lock:
            self.busy.add(conn)
        return conn

    def give(self, conn: http.client.HTTPConnection, whole: bool) -> None:
        """conn back, its answer read `whole` (else it is closed: a connection is never reused mid-body)."""
        if not whole:
            conn.close()
        with self.lock:
            self.busy.discard(conn)
            self.idle.append(conn)

    def interrupt(self) -> None:
        """Cut the connections requests are using now: a thread waiting on one wakes at once, its request failed.
        Until `resume`, every request fails before it waits for its answer (`cut`, which a request checks once it
        is sent: a connection made after the sockets were cut is never waited on)."""
        with self.lock:
            self.cut = True
            socks = [conn.sock for conn in self.busy if conn.sock is not None]
        for sock in socks:
            try:  # the socket's own shutdown, also under TLS (SSLSocket's would drop its state under the reader)
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

    def resume(self) -> None:
        """Requests wait for their answers again (the threads of the transfer that was interrupted have ended)."""
        with self.lock:
            self.cut = False

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.close()


def low_water(response: http.client.HTTPResponse, on: bool) -> None:
    """Wake the reader of `response` (http.client's) only once LOW_WATER bytes have arrived (on), or for any byte
    (off: the socket's default, as every request starts). A body is read with it on only while more than TAIL
    bytes of it are still to come, so that the bytes waited for are always on their way (under TLS too, whose
    reader may hold part of a record); a read still waits at most the read timeout."""
    sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, LOW_WATER if on else 1)
        except OSError:
            pass  # a socket already cut: the read fails as it would have


class _ConnectTimeout(OSError):
    """No connection within CONNECT_TIMEOUT."""


def named(exc: BaseException) -> str:
    """A failure's name in an error's words (a timeout named as urllib3 and `multiplex` name it)."""
    if isinstance(exc, _ConnectTimeout):
        return "ConnectTimeoutError"
    if isinstance(exc, TimeoutError):
        return "ReadTimeoutError"
    return type(exc).__name__


class _Timed(http.client.HTTPConnection):
    """A connection made within CONNECT_TIMEOUT, then waiting at most its `read_timeout` for a byte."""

    read_timeout: float

    def connect(self) -> None:
        try:
            super().connect()
        except TimeoutError:
            raise _ConnectTimeout() from None
        self.sock.settimeout(self.read_timeout)


class _Plain(_Timed):
    def __init__(self, host: str, port: int | None, read_timeout: float) -> None:
        super().__init__(host, port, timeout=CONNECT_TIMEOUT)
        self.read_timeout = read_timeout


class _Secure(_Timed, http.client.HTTPSConnection):
    def __init__(self, host: str, port: int | None, read_timeout: float, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=CONNECT_TIMEOUT, context=context)
        self.read_timeout = read_timeout


def tls_context(verify: bool | str) -> ssl.SSLContext:
    """The TLS context requests would use for `verify` (True: certifi's certificates; a path: that file or folder
    of certificates, as REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE named it)."""
    import ssl

    context = ssl.create_default_context()
    if verify is True:
        import certifi

        context.load_verify_locations(cafile=certifi.where())
    elif isinstance(verify, str):
        if os.path.isdir(verify):
            context.load_verify_locations(capath=verify)
        else:
            context.load_verify_locations(cafile=verify)
    return context
