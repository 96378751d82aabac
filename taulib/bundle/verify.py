"""Verifying a bundle generation (tau-bundle-verify), in a local tree or under a Blob prefix.

Checks, failing closed: the generation (given, or the only one acknowledged: several need --generation), its
completion marker (present, naming the generation and the manifest's digest; without one the generation is "not
acknowledged"), the manifest (valid, naming the generation, digest equal to the marker's), and that the listing
equals the manifest: missing, extra and resized files are named. The listing is the payload (every file or blob
below DIR or PREFIX/ except under .tau/) and the generation's own folder `.tau/bundles/G.d/` (its checkpoint index
and metrics copies, checked like payload files). A payload file that G's manifest does not name but another
generation's manifest there does (acknowledged or not: an upload in progress writes its manifest first) is that
generation's: not extra, counted as `ignored`. Local trees are hashed in full; Blob prefixes are hashed with
`deep` (every byte downloaded and hashed in memory, nothing written to disk), else compared by listing (names and
sizes). The report (`tau.bundle-verify`) is a JSON document; `complete` is true only when every check passed.
Errors that prevent checking at all (an untrusted URL, storage that cannot be reached, a missing folder) are typed
errors instead of a report. Reads only: verify never writes.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from taulib.bundle import manifest as mf
from taulib.errors import CheckFailed, NotFound, TauError, UsageError

if TYPE_CHECKING:
    from collections.abc import Container

    from taulib.jsonio import Record


def _report(source: str, generation: str | None) -> Record:
    return {"kind": "tau.bundle-verify", "schema_version": 1, "source": source, "generation": generation,
            "complete": False, "manifest_sha256": None, "files": None, "bytes": None, "missing": [], "extra": [],
            "resized": [], "digest_mismatch": [], "ignored": 0, "hashed": False, "problems": []}


def choose_generation(available: list[str], generation: str | None, where: str) -> str | None:
    """The generation to check: the one asked for, else the only acknowledged one; None when there is none."""
    if generation is not None:
        return mf.check_generation(generation)
    if len(available) == 1:
        return available[0]
    if not available:
        return None
    raise UsageError(f"{where} holds several generations ({', '.join(available[:5])}); name one with --generation")


def check_ack(report: Record, generation: str, manifest_bytes: bytes | None,
              marker_bytes: bytes | None) -> Record | None:
    """Validate marker and manifest; a failure becomes a problem of the report; returns the manifest or None."""
    try:
        record = mf.load_ack(generation, manifest_bytes, marker_bytes, report["source"])
    except TauError as exc:
        report["problems"].append(exc.message)
        return None
    from taulib import jsonio

    assert manifest_bytes is not None, "load_ack refuses a generation without a manifest"
    report["manifest_sha256"] = jsonio.sha256_hex(manifest_bytes)
    report["files"], report["bytes"] = record["totals"]["files"], record["totals"]["bytes"]
    return record


def _compare(report: Record, record: Record, listing: dict[str, int], claims: Container[str]) -> None:
    report.update(mf.compare(record, listing, claims))
    named = {e["path"] for e in mf.entries(record)}
    report["ignored"] = sum(1 for p in listing if p not in named and p in claims)


def _finish(report: Record) -> Record:
    report["complete"] = not (report["problems"] or report["missing"] or report["extra"] or report["resized"]
                              or report["digest_mismatch"])
    return report


def _no_generation(report: Record, where: str) -> Record:
    report["problems"].append(f"{where} holds no acknowledged bundle generation: not acknowledged without a "
                              f"completion marker under {mf.BUNDLES}/ (none was sealed, or a part its seal declared "
                              "was absent)")
    return _finish(report)


def verify(source: str, generation: str | None, deep: bool = False, env: dict[str, str] | None = None) -> Record:
    """Verify a local tree or a Blob URL (anything starting with http:// or https://)."""
    from taulib.bundle import endpoint

    if endpoint.is_blob_url(source):
        return verify_blob(source, generation, deep, env)
    return verify_local(source, generation)


def verify_local(root: str, generation: str | None) -> Record:
    with mf.open_tree(root) as tree:
        root = tree.path
        generation = choose_generation(mf.generations(tree), generation, root)
        report = _report(root, generation)
        if generation is None:
            return _no_generation(report, root)
        record = check_ack(report, generation, tree.read_bytes(mf.manifest_name(generation)),
                           tree.read_bytes(mf.marker_name(generation)))
        if record is None:
            return _finish(report)
        try:
            listing = dict(mf.walk(tree) + mf.walk_parts(tree, generation))
        except TauError as exc:  # a symlink or a special file in the tree: named, never followed
            report["problems"].append(exc.message)
            return _finish(report)
        _compare(report, record, listing, mf.local_claims(tree, generation))
        report["hashed"] = True
        for entry in mf.entries(record):
            if entry["path"] not in listing or listing[entry["path"]] != entry["size"]:
                continue
            fd = tree.open_read(mf.safe_path(entry["path"], generation))
            try:
                _, sha = mf.hash_fd(fd)
            finally:
                os.close(fd)
            if sha != entry["sha256"]:
                report["digest_mismatch"].append(entry["path"])
    return _finish(report)


def verify_blob(source: str, generation: str | None, deep: bool, env: dict[str, str] | None = None) -> Record:
    from taulib.bundle import endpoint

    location = endpoint.parse(source, env)  # refused before any request
    from taulib.bundle import blob, transfer
    from taulib.progress import Meter

    client = blob.reader(location, env)
    where = location.url()
    listing = blob.list_prefix(client, location.prefix)
    acknowledged = sorted(p[len(mf.BUNDLES) + 1: -len(".complete")] for p in listing
                          if p.startswith(mf.BUNDLES + "/") and p.endswith(".complete")
                          and "/" not in p[len(mf.BUNDLES) + 1:])
    generation = choose_generation([g for g in acknowledged if mf._GENERATION.match(g)], generation, where)
    report = _report(where, generation)
    if generation is None:
        return _no_generation(report, where)
    manifest_bytes = blob.read_small(client, f"{location.prefix}/{mf.manifest_name(generation)}")
    marker_bytes = blob.read_small(client, f"{location.prefix}/{mf.marker_name(generation)}")
    record = check_ack(report, generation, manifest_bytes, marker_bytes)
    if record is None:
        return _finish(report)
    payload = mf.reader_view(listing, generation)
    _compare(report, record, {p: v[0] for p, v in payload.items()}, blob.claims(client, location.prefix, listing,
                                                                                 generation))
    if deep:
        report["hashed"] = True
        entries = [e for e in mf.entries(record) if e["path"] in payload and payload[e["path"]][0] == e["size"]]
        progress = Meter(f"hashing {generation}", unit="files", total_count=len(entries),
                         total_bytes=sum(e["size"] for e in entries), bytes_word="hashed")

        def finish(entry: Record, sha: str, fd: int | None) -> None:  # hashed only: fd is None
            if sha != entry["sha256"]:
                report["digest_mismatch"].append(entry["path"])
            progress.add(1)

        try:
            transfer.download_many(client, location.prefix, entries, {p: v[1] for p, v in payload.items()}, None,
                                   finish, progress)
        except (CheckFailed, NotFound) as exc:  # a blob changed or vanished while it was being read
            report["problems"].append(exc.message)
        finally:
            progress.close()
        report["digest_mismatch"].sort()
    return _finish(report)
