"""Uploading a sealed generation to Azure Blob storage, never over a blob another generation's manifest names.

`upload_bundle(root, record, manifest_bytes, url)` is what `tau-bundle-seal --upload` runs; `upload_file` sends one
file, hashing the bytes it reads before they are committed. Every write is conditional (if-none-match *, or if-match
the etag listed): a concurrent uploader of another generation is caught, never overwritten. Uses the clients,
listing and error translation of `taulib.bundle.blob`; imported only on the upload path.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from taulib.bundle import blob
from taulib.bundle.blob import RANGE, WINDOW, WORKERS, container, list_prefix, read_small, translated
from taulib.bundle.threads import raise_first, run_all
from taulib.errors import CheckFailed, Conflict

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from azure.storage.blob import ContainerClient

    from taulib.fs.tree import Tree
    from taulib.jsonio import Record

META_SHA256 = "tau_sha256"  # metadata of every blob tau uploads: the sha256 of its bytes...
META_GENERATION = "tau_generation"  # ...and the generation that wrote it (provenance only)
Listed = tuple[int, str, dict[str, str]]  # a blob as listed: (size, etag, metadata)
Claimed = list[tuple[str, str, int]]  # what other generations' manifests name for a path: [(generation, sha256, size)]


class Exists(Exception):
    """A conditional write lost: a blob is already there (if-none-match *) or changed since it was listed
    (if-match)."""


@contextmanager
def _conditional() -> Iterator[None]:
    from azure.core.exceptions import HttpResponseError

    try:
        yield
    except HttpResponseError as exc:
        code = getattr(exc, "error_code", None)  # set by azure-storage-blob; azure-core does not declare it
        if exc.status_code == 412 or (exc.status_code == 409 and code == "BlobAlreadyExists"):
            raise Exists() from None
        raise


def _block_id(token: str, n: int) -> str:
    return base64.b64encode(f"tau-{token}-{n:08d}".encode()).decode()


def upload_file(client: ContainerClient, name: str, fd: int, size: int, etag: str | None = None,
                expected: str | None = None, metadata: dict[str, str] | None = None) -> str:
    """Upload size bytes of fd (read once, in order) as blob `name`, always conditionally: created only where no
    blob is (etag None: if-none-match *), else replacing only the blob that still has `etag` (if-match); Exists
    when that condition fails. Returns the sha256 of the bytes read (or "size N" when there were N, not `size`);
    when that is not `expected`, nothing is committed: the blob stays as it was. Large files are staged in blocks
    (ids unique to this upload, so a concurrent uploader of the same name never mixes its blocks in) and committed
    with the condition."""
    from azure.core import MatchConditions
    from azure.storage.blob import BlobBlock

    condition = ({"etag": etag, "match_condition": MatchConditions.IfNotModified} if etag
                 else {"match_condition": MatchConditions.IfMissing})
    sha = hashlib.sha256()
    sent = 0
    with translated(f"uploading {name}"):
        if size <= RANGE:
            data = os.pread(fd, size + 1, 0)
            sha.update(data)
            if len(data) != size:
                return f"size {len(data)}"
            if expected is not None and sha.hexdigest() != expected:
                return sha.hexdigest()
            with _conditional():
                client.upload_blob(name, data, overwrite=etag is not None, metadata=metadata, **condition)
            return sha.hexdigest()
        blob = client.get_blob_client(name)
        token = os.urandom(6).hex()
        ids: list[str] = []
        with ThreadPoolExecutor(max_workers=WINDOW) as pool:
            futures: list[Future[dict[str, Any]]] = []
            try:
                while True:
                    data = os.pread(fd, RANGE, sent)
                    if not data:
                        break
                    sha.update(data)
                    block_id = _block_id(token, len(ids))
                    ids.append(block_id)
                    futures.append(pool.submit(blob.stage_block, block_id, data, length=len(data)))
                    sent += len(data)
                    while sum(not f.done() for f in futures) >= WINDOW:
                        wait(futures, return_when=FIRST_COMPLETED)
                        raise_first(futures)
                        futures = [f for f in futures if not f.done()]
                wait(futures)
                raise_first(futures)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        if sent != size:
            return f"size {sent}"
        if expected is not None and sha.hexdigest() != expected:
            return sha.hexdigest()  # the staged blocks are never committed (the service drops them)
        with _conditional():
            blob.commit_block_list([BlobBlock(block_id=i) for i in ids], metadata=metadata, **condition)
    return sha.hexdigest()


def _acknowledged(listing: Mapping[str, object]) -> set[str]:
    """The generations whose completion marker is in a listing (paths below the prefix)."""
    from taulib.bundle import manifest as mf

    top = mf.BUNDLES + "/"
    return {p[len(top):-len(".complete")] for p in listing
            if p.startswith(top) and p.endswith(".complete") and "/" not in p[len(top):]}


def _listing(client: ContainerClient, prefix: str) -> dict[str, Listed]:
    """{path below prefix: (size, etag, metadata)} of every blob under `prefix/`."""
    with translated(f"listing {prefix}/"):
        return {item.name[len(prefix) + 1:]: (item.size, item.etag, item.metadata or {})
                for item in client.list_blobs(name_starts_with=prefix + "/", include=["metadata"])}


def _properties(client: ContainerClient, name: str) -> Listed | None:
    from azure.core.exceptions import ResourceNotFoundError

    with translated(f"reading the properties of {name}"):
        try:
            found = client.get_blob_client(name).get_blob_properties()
        except ResourceNotFoundError:
            return None
    return found.size, found.etag, found.metadata or {}


def _identical(existing: Listed | None, entry: Record, claimed: Claimed, acknowledged: set[str]) -> bool:
    """Whether the blob there already holds the entry's bytes: its size, and the sha256 tau recorded when it wrote
    it, or the one the manifest of another acknowledged generation names for it (its upload is finished: a pending
    one may not have written the blob yet)."""
    if existing is None or existing[0] != entry["size"]:
        return False
    return existing[2].get(META_SHA256) == entry["sha256"] or any(
        (sha, size) == (entry["sha256"], entry["size"]) and other in acknowledged for other, sha, size in claimed)


def _clash(entry: Record, claimed: Claimed) -> tuple[str, str] | None:
    """(generation, sha256) of another generation's manifest that names the entry's path with other bytes."""
    for other, sha, size in claimed:
        if (sha, size) != (entry["sha256"], entry["size"]):
            return other, sha
    return None


def _refuse_clash(where: str, generation: str, entry: Record, clash: tuple[str, str], raced: bool = False) -> Conflict:
    other, sha = clash
    return Conflict(f"blob {where}/{entry['path']} belongs to generation {other!r} with other bytes (sha256 "
                    f"{sha[:12]}..., generation {generation!r} has {entry['sha256'][:12]}...)"
                    + ("; it was written while this upload ran" if raced else "")
                    + f"; tau never replaces a blob another generation's manifest names: upload {generation!r} to "
                    "another prefix", path=entry["path"], generation=other)


def _put_new(client: ContainerClient, name: str, data: bytes, what: str) -> bool:
    """Create blob `name` with `data` only where none is (if-none-match *): True when written, False when the same
    bytes were there already; other bytes are a conflict (`what` names them)."""
    with translated(f"uploading {name}"):
        try:
            with _conditional():
                client.upload_blob(name, data, overwrite=False)
            return True
        except Exists:
            pass
    if read_small(client, name) != data:
        raise Conflict(f"{what}; a generation is immutable: choose a new one")
    return False


def upload_bundle(root: str, record: Record, manifest_bytes: bytes, url: str) -> Record:
    """Upload a sealed generation G to the prefix of `url`, never over a blob another generation's manifest names
    with other bytes. Before anything is sent, refused (73): another manifest of G there; a path G uploads that
    another generation's manifest (acknowledged or not) names with another sha256 or size (the blob named);
    blobs that no manifest names outside G's files (a reader would see them as extra). Then, in this order:
      1. the manifest of G (created only where none is): from then on readers and uploaders of other generations
         see which blobs G claims, and a reader of G sees nothing yet (no marker);
      2. every payload file and part (large ones first, each in blocks; then small ones concurrently): a blob
         already there with the same size and sha256 (recorded by tau as its metadata, or named by the manifest of
         another acknowledged generation) is skipped; a blob no other manifest names is replaced only if it still
         has the etag listed; a missing one is created only where none is (if-none-match *). The bytes are hashed
         as they are read and committed only when they equal the manifest's (else 73: the file changed after it
         was sealed). A conditional write that loses (a concurrent uploader) re-reads the manifests: another
         generation naming other bytes is refused (73, the blob named), identical bytes are kept;
      3. the completion marker (created only where none is; the same bytes there are kept);
      4. the mutable current pointer, the one blob replaced on purpose.
    Returns {url, files, sent, skipped}."""
    from taulib import jsonio
    from taulib.bundle import endpoint
    from taulib.bundle import manifest as mf

    location = endpoint.parse(url)
    client = container(location)
    generation = record["generation"]
    where, prefix = location.url(), location.prefix
    listing = _listing(client, prefix)
    manifest_blob = f"{prefix}/{mf.manifest_name(generation)}"
    existing = read_small(client, manifest_blob)
    if existing is not None and existing != manifest_bytes:
        raise Conflict(f"{where} already holds another manifest of generation {generation!r}; a generation is "
                       "immutable: choose a new one", generation=generation)
    claimed = blob.claims(client, prefix, listing, generation, strict=True)
    for entry in record["files"]:  # the parts are in G's own folder, which no other generation names
        clash = _clash(entry, claimed.get(entry["path"], []))
        if clash:
            raise _refuse_clash(where, generation, entry, clash)
    entries = mf.entries(record)
    ours = {e["path"] for e in entries}
    strangers = sorted(p for p in mf.reader_view(listing, generation) if p not in ours and p not in claimed)
    if strangers:
        raise Conflict(f"{where} holds blobs that no generation's manifest names ({', '.join(strangers[:5])}"
                       f"{', ...' if len(strangers) > 5 else ''}); a reader would see them as extra: remove them or "
                       "upload to a fresh prefix", extra=strangers[:100])
    if existing is None:
        _put_new(client, manifest_blob, manifest_bytes,
                 f"{where} already holds another manifest of generation {generation!r}")
    metadata = {META_GENERATION: generation}
    counts = {"sent": 0, "skipped": 0}
    lock = threading.Lock()
    acknowledged = _acknowledged(listing)
    with mf.open_tree(root) as tree:
        def one(entry: Record) -> None:
            done = _upload_entry(client, tree, where, prefix, generation, entry, listing.get(entry["path"]),
                                 claimed.get(entry["path"], []), acknowledged, metadata)
            with lock:
                counts[done] += 1

        for entry in [e for e in entries if e["size"] > RANGE]:
            one(entry)
        run_all([e for e in entries if e["size"] <= RANGE], one, WORKERS)
    uploaded = list_prefix(client, prefix)
    for entry in entries:
        if uploaded.get(entry["path"], (None,))[0] != entry["size"]:
            raise CheckFailed(f"{entry['path']} did not arrive whole at {where}", path=entry["path"])
    _put_new(client, f"{prefix}/{mf.marker_name(generation)}",
             mf.marker_text(generation, jsonio.sha256_hex(manifest_bytes)),
             f"{where} already holds another completion marker of generation {generation!r}")
    with translated(f"uploading the current pointer to {where}"):
        client.upload_blob(f"{prefix}/{mf.CURRENT}", mf.current_text(generation), overwrite=True)
    return {"url": where, "files": len(record["files"]), **counts}


def _upload_entry(client: ContainerClient, tree: Tree, where: str, prefix: str, generation: str, entry: Record,
                  existing: Listed | None, claimed: Claimed, acknowledged: set[str], metadata: dict[str, str]) -> str:
    """Step 2 of `upload_bundle` for one file: "sent" or "skipped"."""
    from taulib.bundle import manifest as mf

    name = f"{prefix}/{entry['path']}"
    for _ in range(2):  # a second write only after losing a race to a blob that no other manifest names
        if _identical(existing, entry, claimed, acknowledged):
            return "skipped"
        fd = tree.open_read(mf.safe_path(entry["path"], generation))
        try:
            sent = upload_file(client, name, fd, entry["size"], existing[1] if existing else None, entry["sha256"],
                               {**metadata, META_SHA256: entry["sha256"]})
        except Exists:  # another uploader wrote it since the listing: whose is it now?
            existing = _properties(client, name)
            fresh = {f"{mf.BUNDLES}/{p}": v for p, v in list_prefix(client, f"{prefix}/{mf.BUNDLES}").items()}
            claimed = blob.claims(client, prefix, fresh, generation, strict=True).get(entry["path"], [])
            acknowledged = _acknowledged(fresh)
            clash = _clash(entry, claimed)
            if clash:
                raise _refuse_clash(where, generation, entry, clash, raced=True) from None
            continue
        finally:
            os.close(fd)
        if sent != entry["sha256"]:
            raise Conflict(f"{entry['path']} changed after it was sealed (its bytes do not match the manifest and were "
                           "not committed); nothing acknowledged at the destination", path=entry["path"])
        return "sent"
    raise Conflict(f"blob {where}/{entry['path']} keeps changing while this upload writes it: another uploader is "
                   "writing the same prefix; nothing acknowledged", path=entry["path"])
