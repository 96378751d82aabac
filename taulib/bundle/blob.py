"""Azure Blob storage for bundles: clients with an explicit retry policy, listing, reading, what the other
generations' manifests at a prefix claim, and downloading with sha256 computed while the bytes arrive (uploading is
`taulib.bundle.upload`).

Imported only inside the Blob code paths of the bundle commands (azure.storage.blob costs ~300 ms to import).
Credentials (an account key, an Azure identity's token, or none) come from taulib.bundle.credentials, which also
words the access-denied errors. A dead endpoint fails in seconds: at most TAU_BLOB_RETRIES retries (default 2) with
short backoff, 5 s to connect, TAU_BLOB_READ_TIMEOUT (default 60 s) per read. Errors become tau's exit codes: 401 or
403, or no token from the identity, refused (77), 404 not found (66), a blob changed since it was listed check
failed (1), connection failures and other answers unavailable (69). Nothing the SDK logs reaches stderr: stderr
carries tau's one JSON error and its progress line (`taulib.progress`) only. Transfer threads are always joined
before a transfer returns or raises, a stop signal or two notwithstanding.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from taulib import env, signals
from taulib.bundle.credentials import credential, denied, what_to_set
from taulib.bundle.endpoint import Location
from taulib.errors import CheckFailed, NotFound, Refused, Unavailable

RANGE = 8 << 20  # bytes per ranged GET or staged block: 8-16 MiB reach the best throughput measured against Azurite
WINDOW = 8  # ranges (or blocks) in flight per large blob: memory is bounded by about 2 * WINDOW * RANGE
WORKERS = 8  # small blobs transferred at once
POOL = 32  # HTTP connections kept per host: more than WINDOW and WORKERS, so none is discarded


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

    for name in ("azure", "msal", "urllib3"):  # a handler of our own: the SDK's warnings never reach stderr
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
        ClientAuthenticationError, HttpResponseError, ResourceModifiedError, ResourceNotFoundError,
        ServiceRequestError, ServiceResponseError,
    )

    try:
        yield
    except ResourceNotFoundError as exc:
        raise NotFound(f"{what}: not found ({exc.reason or 'ResourceNotFound'})") from None
    except ResourceModifiedError:
        raise CheckFailed(f"{what}: the blob changed after it was listed") from None
    except ClientAuthenticationError as exc:
        if exc.response is None:  # raised by the identity, not by the storage: it could not renew the token
            raise Refused(f"{what}: the Azure identity gave no new token; {what_to_set('https://')}") from None
        raise Refused(denied(what, exc)) from None
    except HttpResponseError as exc:
        if exc.status_code in (401, 403):
            raise Refused(denied(what, exc)) from None
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


def run_all(items: list, fn, workers: int = WORKERS) -> None:
    """fn(item) for every item on `workers` threads; the first failure cancels what has not started and is
    raised once the running calls have returned (no call outlives this function, whatever signals come)."""
    if not items:
        return
    failed: list[BaseException] = []
    left = [len(items), False]  # calls not ended yet; whether `finished` was released
    count = threading.Lock()
    finished = _held_lock()  # released once: every call ended, or one failed

    def one(item) -> None:
        try:
            if not failed:
                fn(item)
        except BaseException as exc:  # noqa: BLE001 - raised by the caller's thread, below
            failed.append(exc)
        finally:
            with count:
                left[0] -= 1
                if (failed or not left[0]) and not left[1]:
                    left[1] = True
                    finished.release()

    pool = ThreadPoolExecutor(max_workers=min(workers, len(items)))
    try:
        for item in items:
            pool.submit(one, item)
        finished.acquire()
        if failed:
            raise failed[0]
    finally:
        _join(pool)


def _held_lock() -> threading.Lock:
    """A lock held by nobody in particular, for another thread to release: waiting on it (`acquire`) is the one
    wait that a stop signal can interrupt at any moment without leaving a lock half taken (a Condition's or a
    Future's wait can be cut between its wake-up and its re-acquire, and then fails to release)."""
    lock = threading.Lock()
    lock.acquire()
    return lock


def _join(pool: ThreadPoolExecutor) -> None:
    """Cancel what has not started and wait for what runs: a thread never writes into a stage being removed."""
    with signals.deferred():
        pool.shutdown(wait=True, cancel_futures=True)


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
    failed: dict[int, BaseException] = {}
    ended = {offset: _held_lock() for offset in offsets}  # released by the range's thread when it ends
    stop = threading.Event()

    def fetch(offset: int) -> None:
        try:
            if stop.is_set():
                return
            length = min(RANGE, size - offset)
            with translated(f"downloading {name}"):
                data = client.download_blob(name, offset=offset, length=length, **condition).readall()
            if len(data) != length:
                raise CheckFailed(f"{name} ended early: {offset + len(data)} of {size} bytes")
            if fd is not None:
                os.pwrite(fd, data, offset)
            done[offset] = data
        except BaseException as exc:  # noqa: BLE001 - raised by the caller's thread, below
            failed[offset] = exc
        finally:
            ended[offset].release()

    pool = ThreadPoolExecutor(max_workers=min(WINDOW, len(offsets)))
    submitted = 0
    try:
        for next_hash, offset in enumerate(offsets):
            while submitted < len(offsets) and submitted - next_hash < WINDOW:
                pool.submit(fetch, offsets[submitted])
                submitted += 1
            while not ended[offset].acquire(timeout=0.2):
                if failed:  # a later range failed: no need to wait for this one
                    raise failed[min(failed)]
            if offset in failed:
                raise failed[offset]
            data = done.pop(offset)
            sha.update(data)
            if progress:
                progress(len(data))
    finally:
        stop.set()
        _join(pool)  # before the caller closes fd: no range is written into a descriptor closed or reused
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


def _raise_first(futures) -> None:
    for future in futures:
        if future.done() and not future.cancelled() and future.exception() is not None:
            raise future.exception()


def claims(client, prefix: str, listing: dict | None, generation: str, strict: bool = False) -> dict:
    """What the manifests of the generations other than `generation` under PREFIX/.tau/bundles/ name, acknowledged
    or not: {payload path: [(generation, sha256, size)]} (`manifest.claims`). They are found in `listing` (the
    prefix's, paths below it), or, when it is None, in a fresh listing of PREFIX/.tau/bundles/."""
    from taulib.bundle import manifest as mf

    if listing is None:
        listing = {f"{mf.BUNDLES}/{p}": v for p, v in list_prefix(client, f"{prefix}/{mf.BUNDLES}").items()}
    top = mf.BUNDLES + "/"
    others = mf.other_manifests([p[len(top):] for p in listing if p.startswith(top) and "/" not in p[len(top):]],
                                generation)
    manifests: dict[str, bytes | None] = {}

    def read(other: str) -> None:
        try:
            manifests[other] = read_small(client, f"{prefix}/{mf.manifest_name(other)}")
        except CheckFailed:  # too large to be a manifest tau wrote: unreadable, like a malformed one
            manifests[other] = b""

    run_all(others, read)
    return mf.claims(manifests, strict)
