"""Azure Blob storage for bundles: clients with an explicit retry policy, listing, reading, and what the other
generations' manifests at a prefix claim (downloading is `taulib.bundle.transfer` over `taulib.bundle.rest`,
uploading `taulib.bundle.upload`, the threads they run on `taulib.bundle.threads`).

Imported only inside the Blob code paths of the bundle commands (azure.storage.blob costs ~300 ms to import).
Credentials (an account key, an Azure identity's token, or none) come from taulib.bundle.credentials, which also
words the access-denied errors. A dead endpoint fails in seconds: at most TAU_BLOB_RETRIES retries (default 2) with
short backoff, 5 s to connect, TAU_BLOB_READ_TIMEOUT (default 60 s) per read. Errors become tau's exit codes: 401 or
403, or no token from the identity, refused (77), 404 not found (66), a blob changed since it was listed check
failed (1), connection failures and other answers unavailable (69). Nothing the SDK logs reaches stderr: stderr
carries tau's one JSON error and its progress line (`taulib.progress`) only. Transfer threads are always joined
before a transfer returns or raises, a stop signal or two notwithstanding (`taulib.bundle.threads`).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from taulib import env
from taulib.bundle.credentials import credential, denied, what_to_set
from taulib.bundle.endpoint import Location
from taulib.bundle.threads import run_all
from taulib.errors import CheckFailed, NotFound, Refused, Unavailable

if TYPE_CHECKING:  # annotations only: the SDK and requests are imported where they are used
    from collections.abc import Iterator, Mapping

    import requests
    from azure.storage.blob import ContainerClient

    from taulib.bundle.rest import Client

RANGE = 8 << 20  # bytes per ranged GET into memory or staged block: 8-16 MiB reach the best throughput measured
WINDOW = 8  # ranges (or blocks) in flight per large blob
WORKERS = 16  # small blobs transferred at once (one GET each)
POOL = 32  # HTTP connections kept per host: more than WINDOW and WORKERS, so none is discarded


def _session() -> requests.Session:
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    session = requests.Session()
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=POOL,
                          max_retries=Retry(total=False, redirect=False, raise_on_status=False))
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


def _quiet() -> None:
    for name in ("azure", "msal", "urllib3"):  # a handler of our own: the SDK's warnings never reach stderr
        logging.getLogger(name).addHandler(logging.NullHandler())


def container(location: Location, environ: dict[str, str] | None = None) -> ContainerClient:
    from azure.storage.blob import ContainerClient, ExponentialRetry

    _quiet()
    retries = env.get("TAU_BLOB_RETRIES", environ)
    read_timeout = env.get("TAU_BLOB_READ_TIMEOUT", environ)
    api_version = env.get("TAU_BLOB_API_VERSION", environ)
    kwargs: dict[str, Any] = {"api_version": api_version} if api_version else {}  # else the SDK's own
    return ContainerClient(location.account_url, location.container, credential=credential(location, environ),
                           retry_policy=ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=retries),
                           connection_timeout=5, read_timeout=read_timeout, session=_session(),
                           max_single_get_size=RANGE, max_chunk_get_size=RANGE, **kwargs)


def reader(location: Location, environ: dict[str, str] | None = None) -> Client:
    """The client tau-bundle-fetch and tau-bundle-verify read with (`rest.Client`: no SDK); `list_prefix`,
    `read_small` and `claims` take it as they take a ContainerClient."""
    from taulib.bundle import rest

    _quiet()
    return rest.Client(location, credential(location, environ), POOL, environ)


@contextmanager
def translated(what: str) -> Iterator[None]:
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


def list_prefix(client: ContainerClient | Client, prefix: str) -> dict[str, tuple[int, str]]:
    """{path below prefix: (size, etag)} of every blob under `prefix/`."""
    if not hasattr(client, "list_blobs"):  # a reader
        return client.list_prefix(prefix)
    out = {}
    with translated(f"listing {prefix}/"):
        for item in client.list_blobs(name_starts_with=prefix + "/"):
            out[item.name[len(prefix) + 1:]] = (item.size, item.etag)
    return out


def read_small(client: ContainerClient | Client, name: str, limit: int = 16 << 20) -> bytes | None:
    """The bytes of blob `name`, None when there is none; CheckFailed when it is larger than `limit`."""
    if not hasattr(client, "download_blob"):  # a reader
        return client.read_small(name, limit)
    from azure.core.exceptions import ResourceNotFoundError

    with translated(f"reading {name}"):
        try:
            downloader = client.download_blob(name)
        except ResourceNotFoundError:
            return None
        if downloader.size > limit:
            raise CheckFailed(f"{name} is larger than {limit} bytes")
        return downloader.readall()


def claims(client: ContainerClient | Client, prefix: str, listing: Mapping[str, object] | None, generation: str,
           strict: bool = False) -> dict[str, list[tuple[str, str, int]]]:
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

    run_all(others, read, WORKERS)
    return mf.claims(manifests, strict)
