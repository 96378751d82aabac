"""Azure Blob storage for bundles: clients with an explicit retry policy, listing, reading, uploading with sha256
computed from the bytes sent, and downloading with sha256 computed while the bytes arrive.

Imported only inside the Blob code paths of the bundle commands (azure.storage.blob costs ~300 ms to import).
Credentials come from the environment only: `AZURE_STORAGE_CONNECTION_STRING` (its account key, for the account the
checked URL names; its endpoints are ignored: the endpoint is the URL tau checked), else Azure identity
(`DefaultAzureCredential`) when the azure-identity package is installed, else anonymous access. A dead endpoint
fails in seconds: at most TAU_BLOB_RETRIES retries (default 2) with short backoff, 5 s to connect,
TAU_BLOB_READ_TIMEOUT (default 60 s) per read. Errors become tau's exit codes: 403 refused (77), 404 not found (66),
a blob changed since it was listed check failed (1), connection failures and other answers unavailable (69).
Nothing the SDK logs reaches stderr: stderr carries tau's one JSON error and its progress bar only.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager

from taulib import env
from taulib.bundle.endpoint import Location
from taulib.errors import CheckFailed, Conflict, NotFound, Refused, Unavailable

RANGE = 8 << 20  # bytes per ranged GET or staged block: 8-16 MiB reach the best throughput measured against Azurite
WINDOW = 8  # ranges (or blocks) in flight per large blob: memory is bounded by about 2 * WINDOW * RANGE
WORKERS = 8  # small blobs transferred at once
POOL = 32  # HTTP connections kept per host: more than WINDOW and WORKERS, so none is discarded


def _connection_string_key(text: str, account: str) -> dict:
    fields = dict(part.split("=", 1) for part in text.split(";") if "=" in part)
    name, key = fields.get("AccountName"), fields.get("AccountKey")
    if not name or not key:
        raise Refused("AZURE_STORAGE_CONNECTION_STRING holds no AccountName/AccountKey")
    if name != account:
        raise Refused(f"AZURE_STORAGE_CONNECTION_STRING is for account {name!r}, not {account!r}; tau never sends a "
                      "key to another account")
    return {"account_name": name, "account_key": key}


def credential(location: Location, environ: dict | None = None):
    text = env.get("AZURE_STORAGE_CONNECTION_STRING", environ)
    if text:
        return _connection_string_key(text, location.account)
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        return None
    return DefaultAzureCredential()


def _session():
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    session = requests.Session()
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=POOL,
                          max_retries=Retry(total=False, redirect=False, raise_on_status=False))
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


def container(location: Location, environ: dict | None = None):
    from azure.storage.blob import ContainerClient, ExponentialRetry

    for name in ("azure", "urllib3"):  # a handler of our own: the SDK's warnings never fall through to stderr
        logging.getLogger(name).addHandler(logging.NullHandler())
    retries = env.get("TAU_BLOB_RETRIES", environ)
    read_timeout = env.get("TAU_BLOB_READ_TIMEOUT", environ)
    kwargs = {}
    if env.get("TAU_BLOB_API_VERSION", environ):
        kwargs["api_version"] = env.get("TAU_BLOB_API_VERSION", environ)
    return ContainerClient(location.account_url, location.container, credential=credential(location, environ),
                           retry_policy=ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=retries),
                           connection_timeout=5, read_timeout=read_timeout, session=_session(),
                           max_single_get_size=RANGE, max_chunk_get_size=RANGE, **kwargs)


@contextmanager
def translated(what: str):
    """Turn Azure SDK errors into tau's exit codes, naming what was being done."""
    from azure.core.exceptions import (
        HttpResponseError, ResourceModifiedError, ResourceNotFoundError, ServiceRequestError, ServiceResponseError,
    )

    try:
        yield
    except ResourceNotFoundError as exc:
        raise NotFound(f"{what}: not found ({exc.reason or 'ResourceNotFound'})") from None
    except ResourceModifiedError:
        raise CheckFailed(f"{what}: the blob changed after it was listed") from None
    except HttpResponseError as exc:
        if exc.status_code in (401, 403):
            raise Refused(f"{what}: access denied ({exc.status_code}); check the credentials in the environment") \
                from None
        if exc.status_code == 412:
            raise CheckFailed(f"{what}: the blob changed after it was listed") from None
        raise Unavailable(f"{what}: Blob storage answered {exc.status_code} {exc.reason or ''}".strip()) from None
    except (ServiceRequestError, ServiceResponseError) as exc:
        raise Unavailable(f"{what}: Blob storage cannot be reached ({type(exc).__name__})") from None


def list_prefix(client, prefix: str) -> dict[str, tuple[int, str]]:
    """{path below prefix: (size, etag)} of every blob under `prefix/`."""
    out = {}
    with translated(f"listing {prefix}/"):
        for item in client.list_blobs(name_starts_with=prefix + "/"):
            out[item.name[len(prefix) + 1:]] = (item.size, item.etag)
    return out


def read_small(client, name: str, limit: int = 16 << 20) -> bytes | None:
    from azure.core.exceptions import ResourceNotFoundError

    with translated(f"reading {name}"):
        try:
            downloader = client.download_blob(name)
        except ResourceNotFoundError:
            return None
        if downloader.size > limit:
            raise CheckFailed(f"{name} is larger than {limit} bytes")
        return downloader.readall()


class Progress:
    """A progress bar on stderr, only when stderr is a terminal; callable with the bytes just done."""

    def __init__(self, total: int, verb: str = "fetched") -> None:
        self.total, self.done, self.verb, self.lock = total, 0, verb, threading.Lock()
        self.enabled = sys.stderr.isatty()

    def __call__(self, n: int) -> None:
        if not self.enabled:
            return
        with self.lock:
            self.done += n
            width = 30
            filled = width * self.done // max(self.total, 1)
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done >> 20}/{self.total >> 20} MiB "
                             f"{self.verb}")
            sys.stderr.flush()

    def finish(self) -> None:
        if self.enabled and self.done:
            sys.stderr.write("\n")


def run_all(items: list, fn, workers: int = WORKERS) -> None:
    """fn(item) for every item on `workers` threads; the first failure cancels what has not started and is
    raised once the running calls have returned (no call outlives this function)."""
    if not items:
        return
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        futures = [pool.submit(fn, item) for item in items]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
            _raise_first(futures)
        finally:
            for future in futures:
                future.cancel()


def download(client, name: str, fd: int | None, size: int, etag: str | None, progress=None) -> str:
    """Read blob `name` (into fd with positional writes, or nowhere when fd is None) and return its sha256,
    computed in order as ranges arrive. The blob must keep its etag (IfMatch on every range) and have exactly
    `size` bytes."""
    from azure.core import MatchConditions

    condition = {"etag": etag, "match_condition": MatchConditions.IfNotModified} if etag else {}
    sha = hashlib.sha256()
    if size <= RANGE:
        with translated(f"downloading {name}"):
            data = client.download_blob(name, **condition).readall()
        if len(data) != size:
            raise CheckFailed(f"{name} has {len(data)} bytes, the listing said {size}")
        if fd is not None:
            os.pwrite(fd, data, 0)
        sha.update(data)
        if progress:
            progress(len(data))
        return sha.hexdigest()
    offsets = list(range(0, size, RANGE))
    done: dict[int, bytes] = {}
    lock = threading.Condition()
    stop = threading.Event()

    def fetch(offset: int) -> None:
        if stop.is_set():
            return
        length = min(RANGE, size - offset)
        with translated(f"downloading {name}"):
            data = client.download_blob(name, offset=offset, length=length, **condition).readall()
        if len(data) != length:
            raise CheckFailed(f"{name} ended early: {offset + len(data)} of {size} bytes")
        if fd is not None:
            os.pwrite(fd, data, offset)
        with lock:
            done[offset] = data
            lock.notify_all()

    with ThreadPoolExecutor(max_workers=min(WINDOW, len(offsets))) as pool:
        futures = []
        try:
            for next_hash, offset in enumerate(offsets):
                while len(futures) < len(offsets) and len(futures) - next_hash < WINDOW:
                    futures.append(pool.submit(fetch, offsets[len(futures)]))
                with lock:
                    while offset not in done:
                        failed = [f for f in futures if f.done() and f.exception() is not None]
                        if failed:
                            raise failed[0].exception()
                        lock.wait(0.2)
                    data = done.pop(offset)
                sha.update(data)
                if progress:
                    progress(len(data))
        finally:
            stop.set()
    return sha.hexdigest()


def download_many(client, prefix: str, entries: list[dict], etags: dict[str, str], open_fd, finish,
                  progress=None) -> None:
    """Download manifest entries: each large blob in turn (its ranges concurrently), then the small ones on
    WORKERS threads. open_fd(entry) gives the file descriptor to write into (or None: hash only); finish(entry,
    sha256, fd) checks and closes it. The first failure stops the rest."""

    def one(entry: dict) -> None:
        fd = open_fd(entry)
        try:
            sha = download(client, f"{prefix}/{entry['path']}", fd, entry["size"], etags.get(entry["path"]),
                           progress)
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        finish(entry, sha, fd)

    for entry in [e for e in entries if e["size"] > RANGE]:
        one(entry)
    run_all([e for e in entries if e["size"] <= RANGE], one)


def _block_id(n: int) -> str:
    return base64.b64encode(f"tau-{n:08d}".encode()).decode()


def upload_file(client, name: str, fd: int, size: int) -> str:
    """Upload size bytes of fd (read once, in order) as blob `name`; returns the sha256 of the bytes sent."""
    from azure.storage.blob import BlobBlock

    sha = hashlib.sha256()
    sent = 0
    with translated(f"uploading {name}"):
        if size <= RANGE:
            data = os.pread(fd, size + 1, 0)
            sha.update(data)
            client.upload_blob(name, data, overwrite=True)
            return sha.hexdigest() if len(data) == size else f"size {len(data)}"
        blob = client.get_blob_client(name)
        ids = []
        with ThreadPoolExecutor(max_workers=WINDOW) as pool:
            futures = []
            try:
                while True:
                    data = os.pread(fd, RANGE, sent)
                    if not data:
                        break
                    sha.update(data)
                    block_id = _block_id(len(ids))
                    ids.append(block_id)
                    futures.append(pool.submit(blob.stage_block, block_id, data, length=len(data)))
                    sent += len(data)
                    while sum(not f.done() for f in futures) >= WINDOW:
                        wait(futures, return_when=FIRST_COMPLETED)
                        _raise_first(futures)
                        futures = [f for f in futures if not f.done()]
                wait(futures)
                _raise_first(futures)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        if sent != size:
            return f"size {sent}"
        blob.commit_block_list([BlobBlock(block_id=i) for i in ids])
    return sha.hexdigest()


def _raise_first(futures) -> None:
    for future in futures:
        if future.done() and not future.cancelled() and future.exception() is not None:
            raise future.exception()


def upload_bundle(root: str, record: dict, manifest_bytes: bytes, url: str) -> dict:
    """Upload a sealed generation: every payload file (its bytes hashed as they are sent and compared with the
    manifest), then the manifest, then the marker, then the current pointer. Refused before anything is sent: a
    different manifest of the generation already there (73), blobs under the prefix that are not in the
    manifest (73)."""
    from taulib import jsonio
    from taulib.bundle import endpoint
    from taulib.bundle import manifest as mf

    location = endpoint.parse(url)
    client = container(location)
    generation = record["generation"]
    where = location.url()
    existing = read_small(client, f"{location.prefix}/{mf.manifest_name(generation)}")
    if existing is not None and existing != manifest_bytes:
        raise Conflict(f"{where} already holds another manifest of generation {generation!r}; a generation is "
                       "immutable: choose a new one", generation=generation)
    listing = list_prefix(client, location.prefix)
    expected = {f["path"] for f in record["files"]}
    strangers = sorted(p for p in listing if p not in expected and not p.startswith(mf.TAU_DIR + "/"))
    if strangers:
        raise Conflict(f"{where} holds blobs that are not in generation {generation!r} ({', '.join(strangers[:5])}"
                       f"{', ...' if len(strangers) > 5 else ''}); a reader would see them as extra: upload to a "
                       "fresh prefix", extra=strangers[:100])
    with mf.open_tree(root) as tree:
        def one(entry: dict) -> None:
            fd = mf.open_payload(tree, entry["path"])
            try:
                sent = upload_file(client, f"{location.prefix}/{entry['path']}", fd, entry["size"])
            finally:
                os.close(fd)
            if sent != entry["sha256"]:
                raise Conflict(f"{entry['path']} changed after it was sealed (the bytes sent do not match the "
                               "manifest); nothing acknowledged at the destination", path=entry["path"])

        for entry in [e for e in record["files"] if e["size"] > RANGE]:
            one(entry)
        run_all([e for e in record["files"] if e["size"] <= RANGE], one)
    uploaded = list_prefix(client, location.prefix)
    for entry in record["files"]:
        if uploaded.get(entry["path"], (None,))[0] != entry["size"]:
            raise CheckFailed(f"{entry['path']} did not arrive whole at {where}", path=entry["path"])
    with translated(f"uploading the acknowledgement to {where}"):
        client.upload_blob(f"{location.prefix}/{mf.manifest_name(generation)}", manifest_bytes, overwrite=True)
        client.upload_blob(f"{location.prefix}/{mf.marker_name(generation)}",
                           mf.marker_text(generation, jsonio.sha256_hex(manifest_bytes)), overwrite=True)
        client.upload_blob(f"{location.prefix}/{mf.CURRENT}", mf.current_text(generation), overwrite=True)
    return {"url": where, "files": len(record["files"])}
