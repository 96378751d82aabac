"""Fetching a bundle generation from Blob storage (tau-bundle-fetch): verified, all or nothing.

Order, failing closed before any byte lands at the destination:
  1. the SOURCE URL passes `taulib.bundle.endpoint` (no request is made for an untrusted one);
  2. the generation comes from --generation, or from the mutable pointer `.tau/current` only with --current;
  3. the destination's claim is taken (`bundle.claim`: what a killed fetch to it left is removed first); the
     destination must be absent or an empty folder (not a symlink); its parent must exist and not be writable by
     others (unless sticky);
  4. marker, then manifest, checked as `manifest.load_ack` does (missing 1, malformed 65, another generation 73,
     a path that would escape the destination 77); the listing must equal the manifest (missing, extra, resized
     named: 1). The listing is the payload (every blob below PREFIX/ outside PREFIX/.tau/) and the generation's own
     folder PREFIX/.tau/bundles/G.d/ (its checkpoint index and metrics copies); a blob that G's manifest does not
     name but another generation's manifest at the prefix does (acknowledged or not) is that generation's: left
     alone, never extra, never fetched;
  5. download concurrently into a private stage folder beside the destination (`.NAME.tau-fetch-RANDOM`, 0700,
     its name recorded first in the destination's claim, `bundle.claim`, which this fetch holds from step 3 to its
     end: a second fetch to the same destination meanwhile is busy, 75), each blob pinned to its listed etag,
     the sha256 of every byte computed (a small blob's as it arrives, a large one's range by range from the staged
     file just written: `bundle.transfer`), every size and digest compared with the manifest (1), every file
     and every folder of the stage fsynced; progress on stderr when it is a terminal (or as --progress /
     --no-progress say: `taulib.progress`);
  6. publish: the stage (with the acknowledgement and the generation's parts under `.tau/bundles/`) is renamed
     to the destination with renameat2(RENAME_NOREPLACE), or onto the empty destination folder; on any failure
     the stage is removed and the destination is as it was before (absent, or the empty folder it was; after a
     crash between the removal of that empty folder and the rename, absent). A stop signal (SIGTERM, SIGINT,
     SIGHUP) is such a failure: the stage, the reservation and the claim are removed before the command exits
     128 + the signal, a second signal meanwhile notwithstanding (`taulib.signals`). The next fetch to the same
     destination removes what a killed one (SIGKILL) left, by identity: the stage its claim names, and the
     reservation of the no-renameat2 publication.
Failpoints: fetch.staged (the stage is complete), fetch.published (renamed to the destination).
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from taulib import failpoints, jsonio, signals
from taulib.bundle import endpoint
from taulib.bundle import manifest as mf
from taulib.bundle.claim import Claim
from taulib.errors import CheckFailed, Conflict, NotFound, Refused, UsageError
from taulib.fs import publish
from taulib.fs.tree import Tree

if TYPE_CHECKING:
    from taulib.bundle.rest import Client
    from taulib.jsonio import Record


def _destination(destination: str) -> tuple[Tree, str, bool, Claim]:
    """(the destination's parent folder, its final name, whether it exists as an empty folder, the claim on it,
    which the caller releases)."""
    dest = os.path.abspath(destination)
    parent, name = os.path.split(dest)
    if not name:
        raise UsageError(f"--destination {destination!r} has no final name")
    try:
        tree = Tree.open(parent, label="destination parent", follow=True, what="destination folder")
    except NotFound:
        raise NotFound(f"the parent folder of {dest!r} does not exist") from None
    claim = None
    try:
        st = os.fstat(tree.fd)
        if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
            raise Refused(f"the parent folder of {dest!r} is writable by anyone; refusing to publish there")
        with signals.deferred():  # taken, and what a killed fetch left tidied, whole
            claim = Claim.take(tree, name, dest)
        dst = tree.lstat(name)
        if dst is None:
            return tree, name, False, claim
        if not stat.S_ISDIR(dst.st_mode):
            raise Conflict(f"destination {dest!r} exists and is not a folder; tau never overwrites", destination=dest)
        if tree.listdir(name):
            raise Conflict(f"destination {dest!r} exists and is not empty; tau never overwrites", destination=dest)
    except BaseException:
        with signals.deferred():
            if claim is not None:
                claim.release()
            tree.close()
        raise
    return tree, name, True, claim


def fetch(source: str, destination: str, generation: str | None, current: bool = False,
          env: dict[str, str] | None = None, progress: bool | None = None) -> Record:
    """Fetch the generation into `destination`; `progress` forces the progress line on (True) or off (False),
    None shows it when stderr is a terminal."""
    location = endpoint.parse(source, env)
    if generation is not None and current:
        raise UsageError("--generation and --current exclude each other")
    if generation is None and not current:
        raise UsageError("name the generation (--generation G, from trusted metadata), or follow the mutable "
                         "pointer explicitly with --current")
    if generation is not None:
        mf.check_generation(generation)
    where = location.url()
    parent, name, existed, claim = _destination(destination)
    with parent:
        try:
            generation, record, manifest_bytes = _fetch(parent, name, existed, claim, location, generation, env,
                                                        progress)
        finally:
            with signals.deferred():
                claim.release()
    return {"kind": "tau.bundle-fetch", "schema_version": 1, "source": where, "generation": generation,
            "destination": os.path.abspath(destination), "manifest_sha256": jsonio.sha256_hex(manifest_bytes),
            "files": record["totals"]["files"], "bytes": record["totals"]["bytes"],
            "checkpoints": record.get("checkpoints"), "metrics": record.get("metrics", [])}


def _fetch(parent: Tree, name: str, existed: bool, claim: Claim, location: endpoint.Location, generation: str | None,
           env: dict[str, str] | None, progress: bool | None) -> tuple[str, Record, bytes]:
    """Steps 2 and 4 to 6 (the caller holds the claim): (the generation, its manifest, the manifest's bytes)."""
    from taulib.bundle import blob

    where = location.url()
    client = blob.reader(location, env)
    if generation is None:
        pointer = blob.read_small(client, f"{location.prefix}/{mf.CURRENT}", limit=256)
        if pointer is None:
            raise CheckFailed(f"{where} has no current pointer ({mf.CURRENT}); name the generation with "
                              "--generation")
        generation = mf.parse_current(pointer, where)
    manifest_bytes = blob.read_small(client, f"{location.prefix}/{mf.manifest_name(generation)}")
    marker_bytes = blob.read_small(client, f"{location.prefix}/{mf.marker_name(generation)}")
    record = mf.load_ack(generation, manifest_bytes, marker_bytes, where)
    assert manifest_bytes is not None and marker_bytes is not None, "load_ack refuses a generation without them"
    everything = blob.list_prefix(client, location.prefix)
    listing = mf.reader_view(everything, generation)
    differences = mf.compare(record, {p: v[0] for p, v in listing.items()},
                             blob.claims(client, location.prefix, everything, generation))
    if any(differences.values()):
        raise CheckFailed(f"the blobs under {where} do not match generation {generation!r}: "
                          + _describe(differences), **differences)
    stage = claim.new_stage()
    removed_empty = False
    try:
        with parent.subtree(stage, create=True, what="fetch stage") as staged:
            _download_all(client, location, record, listing, staged, progress)
            staged.write_new(mf.manifest_name(generation), manifest_bytes)
            staged.write_new(mf.marker_name(generation), marker_bytes)
            # every folder of the stage, not only its top: a name in a subfolder could be lost after the rename
            staged.sync_folders([mf.safe_path(e["path"], generation) for e in mf.entries(record)]
                                + [mf.manifest_name(generation), mf.marker_name(generation)])
        failpoints.hit("fetch.staged")
        if existed:
            parent.remove_empty(name)  # it was empty: the rename below takes its place, never overwrites
            removed_empty = True
        publish.publish_folder(parent, stage, name)
        failpoints.hit("fetch.published")
    except BaseException:
        with signals.deferred():  # a second signal must not leave half a stage
            parent.remove_tree(stage)
            publish.recover_reservation(parent, name)  # stopped between the claim and the rename
            if removed_empty and not parent.exists(name):
                parent.make_folders(name)
        raise
    return generation, record, manifest_bytes


def _describe(differences: Record) -> str:
    parts = []
    for key in ("missing", "extra"):
        if differences[key]:
            more = ", ..." if len(differences[key]) > 5 else ""
            parts.append(f"{key} {', '.join(differences[key][:5])}{more}")
    if differences["resized"]:
        parts.append("resized " + ", ".join(f"{r['path']} ({r['actual']} bytes, manifest {r['expected']})"
                                            for r in differences["resized"][:5]))
    return "; ".join(parts)


def _download_all(client: Client, location: endpoint.Location, record: Record, listing: dict[str, tuple[int, str]],
                  stage: Tree, show: bool | None) -> None:
    from taulib.bundle import transfer
    from taulib.progress import Meter

    entries = mf.entries(record)
    generation = record["generation"]
    progress = Meter(f"fetching {generation}", unit="files", total_count=len(entries),
                     total_bytes=sum(e["size"] for e in entries), show=show)

    def finish(entry: Record, sha: str, fd: int | None) -> None:
        assert fd is not None, "open_fd gave every file its descriptor"
        try:
            size = os.fstat(fd).st_size
            if size != entry["size"]:
                raise CheckFailed(f"{entry['path']} arrived with {size} bytes, the manifest says {entry['size']}",
                                  path=entry["path"])
            if sha != entry["sha256"]:
                raise CheckFailed(f"{entry['path']} does not match its sha256 in the manifest (got {sha[:12]}..., "
                                  f"manifest {entry['sha256'][:12]}...)", path=entry["path"])
            os.fsync(fd)
        finally:
            os.close(fd)
        progress.add(1)

    try:
        transfer.download_many(client, location.prefix, entries, {p: v[1] for p, v in listing.items()},
                               lambda entry: stage.create(mf.safe_path(entry["path"], generation), readable=True),
                               finish, progress)
    finally:
        progress.close()
