"""Blob storage as tau-bundle-fetch and tau-bundle-verify read it, without the SDK: List Blobs and Get Blob, each
request signed here (or carrying the identity's token), a blob's body read from the socket straight into the
caller's buffer.

Reads: a container's listing under a prefix, and blobs (whole, or one range). Writes: nothing (the caller puts the
bytes where they belong). Why not azure-storage-blob, measured against Azurite: importing it and building a client
cost ~0.2 s, listing 2,000 blobs through its deserializer ~0.26 CPU-s, and its download path (StorageStreamDownloader
over azure-core's pipeline over requests) ~1.3 ms of Python per request with three copies of every byte; this costs
a fraction of each, and copies each byte once. Uploads stay with the SDK (`taulib.bundle.upload`).

What the SDK's clients promised, kept: the host is the Location's, which `taulib.bundle.endpoint` checked; the
credential is `taulib.bundle.credentials`' (the account key signs each request as SharedKey; an identity's token
goes as Bearer, only over https, as that module decides; none: anonymous); a blob read carries the etag it is
pinned to (If-Match: a changed blob is 412, never other bytes); retries as `blob.container`'s (TAU_BLOB_RETRIES more
tries after a connection failure, a body cut short, 408 or a 5xx other than 501 and 505, backoff from about a
second; a range resumes where it was cut), 5 s to connect, TAU_BLOB_READ_TIMEOUT per read; and `blob.translated`'s
exit codes and words: 401/403 or no token refused (77), 404 not found (66), 412 the blob changed (1), the rest
unavailable (69).
Connections, two ways, decided once per client:
- no proxy variable in the environment (no HTTP(S)_PROXY or ALL_PROXY, any case: `env.proxy_named`): connections of
  this client's own (`taulib.bundle.connections`), kept alive and shared by the threads of one transfer, one per
  request at a time; https with the certificates requests would trust (REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE, else
  certifi's). requests and urllib3 are not imported (~40 ms of every fetch and verify). The small blobs of a fetch
  then go over `taulib.bundle.multiplex`, with this client's headers, length checks and answers (`headers`,
  `check_length`, `refuse`);
- a proxy variable set: requests decides, as it always has, which proxy applies (or none, NO_PROXY) and which
  certificates are trusted, and urllib3's pool of at most `pool_size` connections sends the requests (`proxied`:
  whether a proxy applies, else `multiplex` still connects straight to the endpoint).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import random
import threading
from email.utils import formatdate
from typing import TYPE_CHECKING, Callable, NoReturn, TypeVar
from urllib.parse import quote, unquote, urlsplit

from taulib import __version__, env
from taulib.bundle import connections
from taulib.bundle.credentials import STORAGE_SCOPE, denied_to, what_to_set
from taulib.bundle.endpoint import Location
from taulib.errors import CheckFailed, NotFound, Refused, Unavailable

if TYPE_CHECKING:  # imported only through a proxy (~40 ms), or only for a token (azure-core)
    from azure.core.credentials import TokenCredential
    from urllib3 import HTTPConnectionPool

API_VERSION = "2025-01-05"  # Blob storage's REST version asked for (TAU_BLOB_API_VERSION overrides it)
RETRIED = frozenset({408, 500, 502, 503, 504})  # what the SDK's StorageRetryPolicy retries (5xx but 501 and 505)
USER_AGENT = f"tau/{__version__}"
LIST_PAGE = 5000  # blobs per List Blobs answer (the service's most)

_R = TypeVar("_R")
Consume = Callable[[http.client.HTTPResponse, int | None, str], _R]  # consume(response, length, what): `_tried`
Span = tuple[int, int]  # (start, length) of a range


class Again(Exception):
    """A failure that another try may not meet: the reason, for the error once the tries are spent."""


class _Stale(Exception):
    """A kept-alive connection found closed by the endpoint before any of the answer came."""


class Client:
    """Requests to the container of `location` with `credential` (`credentials.credential`'s: the key's fields, a
    token credential, or None); through a proxy over a pool of at most `pool_size` connections."""

    def __init__(self, location: Location, credential: dict[str, str] | TokenCredential | None, pool_size: int,
                 environ: dict[str, str] | None = None) -> None:
        self.account = location.account
        self.key: bytes | None = None
        self.token: TokenCredential | None = None
        if isinstance(credential, dict):
            self.account, self.key = credential["account_name"], base64.b64decode(credential["account_key"])
        else:
            self.token = credential
        self.account_url = location.account_url
        self.api_version = env.get("TAU_BLOB_API_VERSION", environ) or API_VERSION
        self.tries = 1 + env.get("TAU_BLOB_RETRIES", environ)
        self.read_timeout = env.get("TAU_BLOB_READ_TIMEOUT", environ)
        self.stopped = threading.Event()  # set by close(): no more retries are waited for
        root = f"{location.account_url}/{location.container}/"
        self.pool: HTTPConnectionPool | None = None  # urllib3's pool, through a proxy
        if env.proxy_named(urlsplit(root).scheme, environ):
            self._through_proxy(root, pool_size)
            return
        # no proxy variable: what requests would do, without importing it (~40 ms): a connection straight to the
        # endpoint, the certificates of REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE, else certifi's
        self.proxied = False
        self.verify: bool | str = env.get("REQUESTS_CA_BUNDLE", environ) or env.get("CURL_CA_BUNDLE", environ) or True
        self.container_path = urlsplit(root).path  # /CONTAINER/, or /ACCOUNT/CONTAINER/ at a trusted endpoint
        self.unproxied = connections.Pool(location.account_url, self.verify, self.read_timeout)

    def _through_proxy(self, root: str, pool_size: int) -> None:
        """The environment names a proxy: requests decides, as it always has, which one applies to `root` (or none,
        NO_PROXY) and which certificates are trusted; its urllib3 pool sends the requests."""
        import requests
        from requests.adapters import HTTPAdapter
        from requests.utils import select_proxy
        from urllib3.util.timeout import Timeout

        self.timeout = Timeout(connect=connections.CONNECT_TIMEOUT, read=self.read_timeout)
        with requests.Session() as session:  # the environment's proxy and certificates, as requests sees them
            settings = session.merge_environment_settings(root, {}, True, True, None)
        self._adapter = HTTPAdapter(pool_connections=1, pool_maxsize=pool_size)
        prepared = requests.Request("GET", root).prepare()
        self.pool = self._adapter.get_connection_with_tls_context(prepared, settings["verify"], settings["proxies"])
        self.container_path = prepared.path_url  # /CONTAINER/, or /ACCOUNT/CONTAINER/ at a trusted endpoint
        target = self._adapter.request_url(prepared, settings["proxies"])  # the whole URL through an http proxy
        self.request_base = target[:len(target) - len(prepared.path_url)]
        self.verify = settings["verify"]  # True (certifi's certificates), or the file or folder of them named
        self.proxied = select_proxy(root, settings["proxies"]) is not None  # else `multiplex` may connect straight

    def close(self) -> None:
        self.stopped.set()
        if self.pool is not None:
            self._adapter.close()
        else:
            self.unproxied.close()

    def interrupt(self) -> None:
        """Cut the connections requests are using now, so that a thread waiting on one wakes at once (its request
        fails; a transfer that stops does not wait for a read to time out). Through a proxy: nothing is cut."""
        if self.pool is None:
            self.unproxied.interrupt()

    def resume(self) -> None:
        """After `interrupt`, once the threads that used the connections have ended: requests wait again."""
        if self.pool is None:
            self.unproxied.resume()

    # -- what the commands ask --------------------------------------------------------------------------------------
    def list_prefix(self, prefix: str) -> dict[str, tuple[int, str]]:
        """{path below prefix: (size, etag)} of every blob under `prefix/`."""
        from xml.etree import ElementTree

        out: dict[str, tuple[int, str]] = {}
        marker = ""
        while True:
            query = {"restype": "container", "comp": "list", "prefix": prefix + "/", "maxresults": str(LIST_PAGE)}
            if marker:
                query["marker"] = marker
            body = self._tried(f"listing {prefix}/", self.container_path[:-1], query, None, None, None,
                               lambda response, length, what: response.read())
            root = ElementTree.fromstring(body)
            for item in root.iterfind("Blobs/Blob"):
                element, size = item.find("Name"), item.findtext("Properties/Content-Length") or ""
                if element is None or not size.isdigit():
                    raise Unavailable(f"listing {prefix}/: Blob storage answered a blob without a name or a size")
                name = element.text or ""
                if element.get("Encoded") == "true":
                    name = unquote(name)
                out[name[len(prefix) + 1:]] = (int(size), item.findtext("Properties/Etag") or "")
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return out

    def read_small(self, name: str, limit: int) -> bytes | None:
        """The bytes of blob `name`, None when it does not exist; CheckFailed when it has more than `limit`."""

        def whole(response: http.client.HTTPResponse, length: int | None, what: str) -> bytes:
            if (length or 0) > limit:
                raise CheckFailed(f"{name} is larger than {limit} bytes")
            data = response.read(limit + 1)
            if len(data) > limit:
                raise CheckFailed(f"{name} is larger than {limit} bytes")
            return data

        try:
            return self._tried(f"reading {name}", self.blob_path(name), None, None, None, None, whole)
        except NotFound:
            return None

    def read(self, name: str, etag: str | None, view: memoryview, start: int | None,
             stop: threading.Event | None = None) -> int:
        """Blob `name` into `view`: bytes start .. start + len(view) (a range), or with start None the whole blob,
        which must then have exactly len(view) bytes. Returns how many arrived (fewer than len(view) only for a
        range past the blob's end). Once `stop` is set, a failure is not tried again."""

        def whole(response: http.client.HTTPResponse, available: int | None, what: str) -> int:
            length = self.check_length(available, what, name, len(view), start is None)
            got = 0
            while got < length:
                n = response.readinto(view[got:length])  # from the socket straight into the view
                if not n:
                    raise http.client.IncompleteRead(b"", length - got)
                got += n
            return got

        return self._tried(f"downloading {name}", self.blob_path(name), None, etag,
                           None if start is None else (start, len(view)), stop, whole)

    def fill(self, name: str, etag: str | None, start: int, view: memoryview,
             stop: threading.Event | None = None) -> int:
        """Bytes start .. start + len(view) of blob `name` into `view`, read from the socket straight into it; a try
        after a failure resumes where the last one stopped. Returns how many arrived (fewer than len(view) only past
        the blob's end). Once `stop` is set, a failure is not tried again."""
        done = 0

        def pipe(response: http.client.HTTPResponse, length: int | None, what: str) -> int:
            nonlocal done
            end = done + self.check_length(length, what, name, len(view) - done, False)
            bulk = end - connections.TAIL  # up to here, woken per LOW_WATER bytes
            if bulk - done >= connections.LOW_WATER:
                connections.low_water(response, True)
                try:
                    _read(response, bulk)
                finally:
                    connections.low_water(response, False)
            _read(response, end)
            return done

        def _read(response: http.client.HTTPResponse, end: int) -> None:
            nonlocal done
            while done < end:
                n = response.readinto(view[done:end])
                if not n:
                    raise http.client.IncompleteRead(b"", end - done)
                done += n

        return self._tried(f"downloading {name}", self.blob_path(name), None, etag,
                           lambda: (start + done, len(view) - done), stop, pipe)

    # -- one request, tried again ---------------------------------------------------------------------------------
    def blob_path(self, name: str) -> str:
        return self.container_path + quote(name, safe="~/")

    @staticmethod
    def check_length(available: int | None, what: str, name: str, expected: int, exact: bool) -> int:
        """The body's length as the answer gave it (None: not given), checked against the `expected` bytes (exactly
        them when `exact`, at most them for a range)."""
        if available is None:
            raise Unavailable(f"{what}: Blob storage answered without a Content-Length")
        if exact and available != expected:
            raise CheckFailed(f"{name} has {available} bytes, the listing said {expected}")
        if available > expected:
            raise CheckFailed(f"{what}: Blob storage answered {available} bytes for a range of {expected}")
        return available

    def _tried(self, what: str, path: str, query: dict[str, str] | None, etag: str | None,
               span: Span | Callable[[], Span] | None, stop: threading.Event | None, consume: Consume[_R]) -> _R:
        """consume(response, length, what) of a GET of `path` (response: http.client's, its body to read; length:
        the body's bytes, None when the answer did not say), tried up to TAU_BLOB_RETRIES more times; `span` is None
        (all of it), (start, length), or a function giving them afresh for each try."""
        for attempt in range(self.tries):
            try:
                return self._once(what, path, query, etag, span() if callable(span) else span, consume)
            except Again as again:
                if attempt + 1 == self.tries or (stop or self.stopped).wait(random.uniform(0.5, 1.5) * 2 ** attempt):
                    raise Unavailable(f"{what}: {again}") from None
        raise AssertionError("unreachable")

    def _once(self, what: str, path: str, query: dict[str, str] | None, etag: str | None, span: Span | None,
              consume: Consume[_R]) -> _R:
        headers = self.headers(what, path, query, etag, span)
        if query:
            path += "?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
        if self.pool is None:
            return self._unproxied(what, path, headers, consume)
        from urllib3.exceptions import HTTPError
        from urllib3.response import HTTPResponse

        response = None
        try:
            response = self.pool.urlopen("GET", self.request_base + path, headers=headers, retries=False,
                                         redirect=False, preload_content=False, decode_content=False,
                                         release_conn=False, assert_same_host=False, timeout=self.timeout)
            assert isinstance(response, HTTPResponse), "urllib3's pool answers with its HTTPResponse"
            if response.status not in (200, 206):
                response.drain_conn()
                self.refuse(what, response.status, response.reason, headers)
            fp = response._fp
            assert fp is not None, "an answer not preloaded has its http.client response"
            result = consume(fp, response.length_remaining, what)
            response.release_conn()
            response = None
            return result
        except (HTTPError, http.client.HTTPException, OSError) as exc:
            raise Again(f"Blob storage cannot be reached ({type(exc).__name__})") from None
        finally:
            if response is not None:  # failed part way: the connection is closed, never reused mid-body
                response.close()
                response.release_conn()

    def _unproxied(self, what: str, target: str, headers: dict[str, str], consume: Consume[_R]) -> _R:
        """One GET over a kept-alive connection of this client's own, given back once its answer was read whole. A
        kept-alive connection the endpoint closed before a byte of the answer came (its close still on the way
        when the connection was taken) is replaced by a new one, without a try counted."""
        try:
            return self._over(self.unproxied.take(), what, target, headers, consume)
        except _Stale:
            return self._over(self.unproxied.take(new=True), what, target, headers, consume)

    def _over(self, conn: http.client.HTTPConnection, what: str, target: str, headers: dict[str, str],
              consume: Consume[_R]) -> _R:
        reused, whole = conn.sock is not None, False
        try:
            try:
                conn.request("GET", target, headers=headers)
                if self.unproxied.cut:  # interrupted meanwhile, maybe before this connection was made
                    raise Again("Blob storage cannot be reached (the transfer stopped)")
                response = conn.getresponse()
            except OSError as exc:  # (RemoteDisconnected is one: the answer's first line never came)
                # closed, reset, a TLS end: not a slow endpoint, nor a connection `interrupt` cut
                if reused and not isinstance(exc, TimeoutError) and not self.unproxied.cut:
                    raise _Stale() from None
                raise
            if response.status not in (200, 206):
                response.read(connections.ERROR_BODY)  # an error's short body; a longer one closes the connection
                whole = response.isclosed()
                self.refuse(what, response.status, response.reason, headers)
            result = consume(response, response.length, what)
            whole = response.isclosed() and not response.will_close
            return result
        except (http.client.HTTPException, OSError) as exc:
            raise Again(f"Blob storage cannot be reached ({connections.named(exc)})") from None
        finally:
            self.unproxied.give(conn, whole)

    def headers(self, what: str, path: str, query: dict[str, str] | None, etag: str | None,
                span: Span | None) -> dict[str, str]:
        """The headers of a GET of `path` (span: None, or (start, length) of a range), signed."""
        headers = {"User-Agent": USER_AGENT, "x-ms-date": formatdate(usegmt=True), "x-ms-version": self.api_version}
        if span is not None:
            headers["x-ms-range"] = f"bytes={span[0]}-{span[0] + span[1] - 1}"
        if etag:
            headers["If-Match"] = etag
        self._authorize(what, path, query, headers)
        return headers

    def refuse(self, what: str, status: int, reason: str | None, headers: dict[str, str]) -> NoReturn:
        """Raise what an answer other than 200/206 means (`Again` for one another try may not get); `headers`:
        the request's (its Authorization says which credential was refused)."""
        if status in (401, 403):
            scheme = headers.get("Authorization", "").split(" ", 1)[0]
            raise Refused(denied_to(what, status, scheme, self.account_url))
        if status == 404:
            raise NotFound(f"{what}: not found ({reason or 'ResourceNotFound'})")
        if status == 412:
            raise CheckFailed(f"{what}: the blob changed after it was listed")
        if status in RETRIED:
            raise Again(f"Blob storage answered {status} {reason or ''}".strip())
        raise Unavailable(f"{what}: Blob storage answered {status} {reason or ''}".strip())

    def _authorize(self, what: str, path: str, query: dict[str, str] | None, headers: dict[str, str]) -> None:
        if self.key is not None:  # SharedKey, as the SDK's StorageSharedKeyCredentialPolicy signs a GET
            signed = "".join(f"{k}:{headers[k]}\n" for k in sorted(k for k in headers if k.startswith("x-ms-")))
            resource = f"/{self.account}{path}" + "".join(f"\n{k}:{v}" for k, v in sorted((query or {}).items()))
            text = f"GET\n\n\n\n\n\n\n\n{headers.get('If-Match', '')}\n\n\n\n{signed}{resource}"
            mac = hmac.new(self.key, text.encode(), hashlib.sha256).digest()
            headers["Authorization"] = f"SharedKey {self.account}:{base64.b64encode(mac).decode()}"
        elif self.token is not None:
            from azure.core.exceptions import ClientAuthenticationError

            try:
                headers["Authorization"] = f"Bearer {self.token.get_token(STORAGE_SCOPE).token}"
            except ClientAuthenticationError:
                raise Refused(f"{what}: the Azure identity gave no new token; {what_to_set('https://')}") from None
