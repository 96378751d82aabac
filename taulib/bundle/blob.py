"""Azure Blob storage for bundles: clients with an explicit retry policy, listing, reading, uploading, and
downloading with sha256 computed while the bytes arrive.

Imported only by the bundle commands (azure.storage.blob costs ~300 ms to import). Credentials come from the
environment only: `AZURE_STORAGE_CONNECTION_STRING` (its account key, for the account the checked URL names; its
endpoints are ignored: the endpoint is the URL tau checked), else Azure identity (`DefaultAzureCredential`) when
the azure-identity package is installed, else anonymous access. A dead endpoint fails in seconds: at most
TAU_BLOB_RETRIES retries (default 2) with short backoff, 5 s to connect, TAU_BLOB_READ_TIMEOUT (default 60 s) per
read. Errors become tau's exit codes: 403 refused (77), 404 not found (66), connection failures unavailable (69).
"""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from taulib.bundle.endpoint import Location
from taulib.errors import CheckFailed, NotFound, Refused, Unavailable

RANGE = 8 << 20  # bytes per ranged GET: 8-16 MiB reach the best throughput measured against Azurite
WINDOW = 16  # ranges in flight per large blob (bounded memory: WINDOW * RANGE)


def _connection_string_key(text: str, account: str) -> dict:
    fields = dict(part.split("=", 1) for part in text.split(";") if "=" in part)
    name, key = fields.get("AccountName"), fields.get("AccountKey")
    if not name or not key:
        raise Refused("AZURE_STORAGE_CONNECTION_STRING holds no AccountName/AccountKey")
    if name != account:
        raise Refused(f"AZURE_STORAGE_CONNECTION_STRING is for account {name!r}, not {account!r}; tau never sends a "
                      "key to another account")
    return {"account_name": name, "account_key": key}


def credential(location: Location, env: dict | None = None):
    env = os.environ if env is None else env
    text = env.get("AZURE_STORAGE_CONNECTION_STRING")
    if text:
        return _connection_string_key(text, location.account)
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        return None
    return DefaultAzureCredential()


def container(location: Location, env: dict | None = None):
    from azure.storage.blob import ContainerClient, ExponentialRetry

    env = os.environ if env is None else env
    retries = int(env.get("TAU_BLOB_RETRIES", "2"))
    kwargs = {}
    if env.get("TAU_BLOB_API_VERSION"):
        kwargs["api_version"] = env["TAU_BLOB_API_VERSION"]
    return ContainerClient(location.account_url, location.container, credential=credential(location, env),
                           retry_policy=ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=retries),
                           connection_timeout=5, read_timeout=float(env.get("TAU_BLOB_READ_TIMEOUT", "60")),
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


def download(client, name: str, fd: int, size: int, etag: str | None, progress=None) -> str:
    """Write blob `name` into fd (positional writes) and return its sha256, computed in order as ranges arrive.
    The blob must keep its etag (IfMatch on every range) and have exactly `size` bytes."""
    from azure.core import MatchConditions

    condition = {"etag": etag, "match_condition": MatchConditions.IfNotModified} if etag else {}
    sha = hashlib.sha256()
    if size <= RANGE:
        with translated(f"downloading {name}"):
            data = client.download_blob(name, **condition).readall()
        if len(data) != size:
            raise CheckFailed(f"{name} has {len(data)} bytes, the listing said {size}")
        os.pwrite(fd, data, 0)
        sha.update(data)
        if progress:
            progress(len(data))
        return sha.hexdigest()
    offsets = list(range(0, size, RANGE))
    done: dict[int, bytes] = {}
    lock = threading.Condition()
    next_hash = 0

    def fetch(offset: int) -> None:
        length = min(RANGE, size - offset)
        with translated(f"downloading {name}"):
            data = client.download_blob(name, offset=offset, length=length, **condition).readall()
        if len(data) != length:
            raise CheckFailed(f"{name} ended early: {offset + len(data)} of {size} bytes")
        os.pwrite(fd, data, offset)
        with lock:
            done[offset] = data
            lock.notify_all()

    with ThreadPoolExecutor(max_workers=min(WINDOW, len(offsets))) as pool:
        futures = []
        submitted = 0
        while next_hash < len(offsets):
            while submitted < len(offsets) and submitted - next_hash < WINDOW:
                futures.append(pool.submit(fetch, offsets[submitted]))
                submitted += 1
            with lock:
                while offsets[next_hash] not in done:
                    failed = [f for f in futures if f.done() and f.exception() is not None]
                    if failed:
                        raise failed[0].exception()
                    lock.wait(0.2)
                data = done.pop(offsets[next_hash])
            sha.update(data)
            if progress:
                progress(len(data))
            next_hash += 1
        for future in futures:
            future.result()
    return sha.hexdigest()


def upload_bundle(root: str, record: dict, manifest_bytes: bytes, url: str) -> dict:
    """Upload a sealed generation: payload, then manifest, then marker."""
    from taulib import jsonio
    from taulib.bundle import endpoint
    from taulib.bundle import manifest as mf

    location = endpoint.parse(url)
    client = container(location)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with translated(f"uploading to {location.url()}"):
            for entry in record["files"]:
                fd = mf.open_in_tree(root_fd, entry["path"])
                with os.fdopen(fd, "rb") as fh:
                    client.upload_blob(f"{location.prefix}/{entry['path']}", fh, length=entry["size"],
                                       overwrite=True, max_concurrency=4)
            generation = record["generation"]
            client.upload_blob(f"{location.prefix}/{mf.manifest_name(generation)}", manifest_bytes, overwrite=True)
            client.upload_blob(f"{location.prefix}/{mf.marker_name(generation)}",
                               mf.marker_text(generation, jsonio.sha256_hex(manifest_bytes)), overwrite=True)
    finally:
        os.close(root_fd)
    listing = list_prefix(client, location.prefix)
    for entry in record["files"]:
        if listing.get(entry["path"], (None,))[0] != entry["size"]:
            raise CheckFailed(f"{entry['path']} did not arrive whole at {location.url()}")
    return {"url": location.url(), "files": len(record["files"])}
