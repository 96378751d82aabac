"""Verifying a bundle generation (tau-bundle-verify), in a local tree or under a Blob prefix.

Checks, failing closed: the generation (given, or the only one acknowledged: several need --generation), its
completion marker (present, naming the generation and the manifest's digest), the manifest (valid, naming the
generation, digest equal to the marker's), and that the listing equals the manifest: missing, extra and resized
files are named. Local trees are hashed in full; Blob prefixes are hashed with `deep` (download every byte), else
compared by listing (names and sizes). The report is a JSON document; `complete` is true only when every check
passed (exit 0), else exit 1 with the report still printed.
"""

from __future__ import annotations

import os

from taulib import jsonio
from taulib.bundle import manifest as mf
from taulib.errors import CheckFailed, NotFound, TauError, UsageError


def _report(source: str, generation: str | None) -> dict:
    return {"kind": "tau.bundle-verify", "schema_version": 1, "source": source, "generation": generation,
            "complete": False, "manifest_sha256": None, "files": None, "bytes": None, "missing": [], "extra": [],
            "resized": [], "digest_mismatch": [], "hashed": False, "problems": []}


def choose_generation(available: list[str], generation: str | None, where: str) -> str:
    if generation is not None:
        return mf.check_generation(generation)
    if len(available) == 1:
        return available[0]
    if not available:
        raise CheckFailed(f"{where} holds no acknowledged bundle generation (no completion marker)")
    raise UsageError(f"{where} holds several generations ({', '.join(available[:5])}); name one with --generation")


def check_ack(report: dict, generation: str, manifest_bytes: bytes | None, marker_bytes: bytes | None) -> dict | None:
    """Validate marker and manifest; fills report problems; returns the manifest or None."""
    if marker_bytes is None:
        report["problems"].append(f"generation {generation!r} has no completion marker: the producer never "
                                  "acknowledged it")
        return None
    if manifest_bytes is None:
        report["problems"].append(f"generation {generation!r} has a marker but no manifest")
        return None
    try:
        acknowledged = mf.parse_marker(marker_bytes, generation)
        record = mf.decode(manifest_bytes, generation)
    except TauError as exc:
        report["problems"].append(exc.message)
        return None
    digest = jsonio.sha256_hex(manifest_bytes)
    report["manifest_sha256"] = digest
    if acknowledged != digest:
        report["problems"].append(f"the completion marker acknowledges manifest {acknowledged[:12]}…, not this "
                                  f"manifest {digest[:12]}…")
        return None
    report["files"], report["bytes"] = record["totals"]["files"], record["totals"]["bytes"]
    return record


def verify_local(root: str, generation: str | None) -> dict:
    if not os.path.isdir(root):
        raise NotFound(f"bundle folder {root!r} does not exist")
    root = os.path.abspath(root)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        generation = choose_generation(mf.generations(root_fd), generation, root)
        report = _report(root, generation)
        record = check_ack(report, generation, mf.read_ack(root_fd, mf.manifest_name(generation)),
                           mf.read_ack(root_fd, mf.marker_name(generation)))
        if record is None:
            return report
        listing = dict(mf.walk(root))
        report.update(mf.compare(record, listing))
        report["hashed"] = True
        for entry in record["files"]:
            if entry["path"] not in listing or listing[entry["path"]] != entry["size"]:
                continue
            fd = mf.open_in_tree(root_fd, entry["path"])
            try:
                _, sha = mf.hash_fd(fd)
            finally:
                os.close(fd)
            if sha != entry["sha256"]:
                report["digest_mismatch"].append(entry["path"])
    finally:
        os.close(root_fd)
    report["complete"] = not (report["problems"] or report["missing"] or report["extra"] or report["resized"]
                              or report["digest_mismatch"])
    return report
