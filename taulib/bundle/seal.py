"""Sealing (tau-bundle-seal): acknowledge an output tree as one generation's complete bundle.

Run after the payload succeeded (or let tau-bundle-seal run the payload: `tau-bundle-seal DIR --generation G --
COMMAND...` seals only when COMMAND exits 0, and exits with COMMAND's status otherwise). Steps:
  1. describe the tree (every file's path, size, sha256; symlinks and special files refused);
  2. the optional artifact index (`--index PATH`, relative to DIR): absent means "no acknowledgement for that part"
     (recorded as null, the payload still succeeds); present, it must be a JSON object whose `bundle_id` or
     `generation` names G, else the seal is refused (65 malformed, 73 another generation);
  3. write the manifest `.tau/bundles/G.json` (no overwrite: an existing manifest of G with other content is
     refused, 73; identical files are idempotent), then the marker `.tau/bundles/G.complete`, last;
  4. with `--upload URL`: upload every payload file, then the manifest, then the marker (so a reader that sees the
     marker sees everything), each blob's content checked against the manifest after upload.
"""

from __future__ import annotations

import os
import socket

from taulib import __version__, jsonio
from taulib.bundle import manifest as mf
from taulib.errors import BadInput, Conflict, NotFound


def _index_entry(root: str, index: str | None, generation: str) -> dict | None:
    if index is None:
        return None
    rel = mf.safe_relpath(index)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fd = mf.open_in_tree(root_fd, rel)
        except FileNotFoundError:
            return None  # declared but absent: no acknowledgement for that part, never a failed payload
        try:
            data = b""
            while chunk := os.read(fd, 1 << 20):
                data += chunk
        finally:
            os.close(fd)
    finally:
        os.close(root_fd)
    doc = jsonio.loads(data, f"artifact index {rel!r}")
    if not isinstance(doc, dict):
        raise BadInput(f"artifact index {rel!r} is not a JSON object")
    named = doc.get("bundle_id", doc.get("generation"))
    if not isinstance(named, str):
        raise BadInput(f"artifact index {rel!r} names no generation (bundle_id)")
    if named != generation:
        raise Conflict(f"artifact index {rel!r} belongs to generation {named!r}, not {generation!r}")
    return {"path": rel, "sha256": jsonio.sha256_hex(data), "generation": generation}


def _write_once(root_fd: int, rel: str, data: bytes) -> bool:
    """Publish DIR/rel with link-no-overwrite. True when created, False when identical bytes were there."""
    folder, name = rel.rsplit("/", 1)
    dfd = root_fd
    opened = []
    for segment in folder.split("/"):
        try:
            os.mkdir(segment, 0o700, dir_fd=dfd)
        except FileExistsError:
            pass
        dfd = os.open(segment, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        opened.append(dfd)
    try:
        temp = f".{name}.{os.urandom(6).hex()}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
            created = True
        except FileExistsError:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            try:
                existing = b""
                while chunk := os.read(fd, 1 << 20):
                    existing += chunk
            finally:
                os.close(fd)
            if existing != data:
                raise Conflict(f"{rel} already exists with other content; a generation's acknowledgement is "
                               "immutable: choose a new generation") from None
            created = False
        finally:
            os.unlink(temp, dir_fd=dfd)
        os.fsync(dfd)
        return created
    finally:
        for fd in opened:
            os.close(fd)


def seal(root: str, generation: str, run: dict | None = None, index: str | None = None,
         command: list[str] | None = None, upload: str | None = None) -> dict:
    mf.check_generation(generation)
    if not os.path.isdir(root):
        raise NotFound(f"bundle folder {root!r} does not exist")
    root = os.path.abspath(root)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        existing = mf.read_ack(root_fd, mf.manifest_name(generation))
        files = mf.describe(root)
        index_entry = _index_entry(root, index, generation)
        if existing is not None:
            record = mf.decode(existing, generation)
            if (record["files"], record["index"], record["run"]) != (files, index_entry, run):
                raise Conflict(f"generation {generation!r} is already sealed with another manifest; a generation is "
                               "immutable: choose a new one", generation=generation)
            data = existing
        else:
            producer = {"host": socket.gethostname()[:255], "uid": os.geteuid(), "tau_version": __version__,
                        "command": command}
            record = mf.build(generation, files, run, producer, index_entry)
            data = jsonio.canonical(record)
        created = _write_once(root_fd, mf.manifest_name(generation), data)
        _write_once(root_fd, mf.marker_name(generation), mf.marker_text(generation, jsonio.sha256_hex(data)))
    finally:
        os.close(root_fd)
    result = {"kind": "tau.bundle-seal", "schema_version": 1, "root": root, "generation": generation,
              "created": created, "manifest_sha256": jsonio.sha256_hex(data), "files": record["totals"]["files"],
              "bytes": record["totals"]["bytes"], "index": record["index"], "uploaded": None}
    if upload is not None:
        from taulib.bundle import blob

        result["uploaded"] = blob.upload_bundle(root, record, data, upload)
    return result
