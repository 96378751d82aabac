"""Bundle manifests and completion markers, and describing a local output tree.

A generation G of a bundle rooted at DIR is acknowledged by two files, written in this order:
  DIR/.tau/bundles/G.json      the manifest (tau.bundle-manifest): every payload file's relative path, size and
                               sha256, the generation, the run and producer identity, the optional artifact index
  DIR/.tau/bundles/G.complete  the marker: `complete G SHA256\n`, SHA256 being the manifest's own digest
and then, by every seal, the mutable pointer
  DIR/.tau/current             `G\n`: the generation sealed last, replaced atomically; followed only on request
A reader trusts a generation only when its marker exists, names G and the manifest's digest, and the manifest
validates. Everything under `.tau/` is tau's, never payload. Payload paths are relative, use `/`, and never
contain `.` or `..` segments; a tree with a symlink, a device or a FIFO is refused (nothing is followed).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat

from taulib import jsonio, schema
from taulib.errors import BadInput, CheckFailed, Conflict, Refused

TAU_DIR = ".tau"
BUNDLES = ".tau/bundles"
CURRENT = ".tau/current"
_GENERATION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
CHUNK = 1 << 20


def check_generation(generation: str) -> str:
    if not isinstance(generation, str) or not _GENERATION.match(generation):
        raise BadInput(f"generation {generation!r} must be one path segment of letters, digits and ._-")
    return generation


def manifest_name(generation: str) -> str:
    return f"{BUNDLES}/{check_generation(generation)}.json"


def marker_name(generation: str) -> str:
    return f"{BUNDLES}/{check_generation(generation)}.complete"


def marker_text(generation: str, manifest_sha256: str) -> bytes:
    return f"complete {generation} {manifest_sha256}\n".encode()


def parse_marker(data: bytes, generation: str) -> str:
    """The manifest digest a marker acknowledges for `generation`, or BadInput naming what is wrong."""
    text = data.decode("ascii", "replace")
    parts = text.strip().split(" ")
    if len(parts) != 3 or parts[0] != "complete" or not re.match(r"^[0-9a-f]{64}\Z", parts[2]):
        raise BadInput(f"completion marker of generation {generation!r} is malformed: {text.strip()[:100]!r}")
    if parts[1] != generation:
        raise Conflict(f"completion marker acknowledges generation {parts[1]!r}, not {generation!r}",
                       generation=generation)
    return parts[2]


def current_text(generation: str) -> bytes:
    return f"{check_generation(generation)}\n".encode()


def parse_current(data: bytes, where: str) -> str:
    """The generation the mutable pointer `.tau/current` names, or BadInput."""
    text = data.decode("ascii", "replace").strip()
    if not _GENERATION.match(text):
        raise BadInput(f"the current pointer of {where} is malformed: {text[:100]!r}")
    return text


def load_ack(generation: str, manifest_bytes: bytes | None, marker_bytes: bytes | None, where: str) -> dict:
    """The manifest of an acknowledged generation, checked against its marker; typed errors otherwise: no marker
    or no manifest CheckFailed (1), malformed BadInput (65), a marker or manifest of another generation Conflict
    (73), a marker that acknowledges other manifest bytes CheckFailed (1), an unsafe path Refused (77)."""
    if marker_bytes is None:
        raise CheckFailed(f"{where}: generation {generation!r} has no completion marker: the producer never "
                          "acknowledged it", generation=generation)
    if manifest_bytes is None:
        raise CheckFailed(f"{where}: generation {generation!r} has a completion marker but no manifest",
                          generation=generation)
    acknowledged = parse_marker(marker_bytes, generation)
    record = decode(manifest_bytes, generation)
    digest = hashlib.sha256(manifest_bytes).hexdigest()
    if acknowledged != digest:
        raise CheckFailed(f"{where}: the completion marker of generation {generation!r} acknowledges manifest "
                          f"{acknowledged[:12]}..., not the manifest there ({digest[:12]}...)", generation=generation)
    return record


def safe_relpath(path: str) -> str:
    """A payload path as stored: relative, `/`-separated, no empty, `.` or `..` segment, not under `.tau/`."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or "\0" in path:
        raise Refused(f"bundle path {path!r} is not a relative path")
    segments = path.split("/")
    if any(s in ("", ".", "..") for s in segments):
        raise Refused(f"bundle path {path!r} escapes or is not normalised")
    if segments[0] == TAU_DIR:
        raise Refused(f"bundle path {path!r} is inside .tau/, which belongs to tau")
    return path


def hash_fd(fd: int) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    while True:
        chunk = os.read(fd, CHUNK)
        if not chunk:
            return size, h.hexdigest()
        size += len(chunk)
        h.update(chunk)


def walk(root: str) -> list[tuple[str, int]]:
    """(relative path, size) of every payload file under root, sorted; refuses symlinks and special files."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        out: list[tuple[str, int]] = []
        _walk(root_fd, "", out, top=True)
        return sorted(out)
    finally:
        os.close(root_fd)


def _walk(dir_fd: int, prefix: str, out: list, top: bool) -> None:
    for entry in sorted(os.listdir(dir_fd)):
        if top and entry == TAU_DIR:
            continue
        rel = f"{prefix}{entry}"
        st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                _walk(sub, rel + "/", out, top=False)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            out.append((safe_relpath(rel), st.st_size))
        elif stat.S_ISLNK(st.st_mode):
            raise Refused(f"the bundle tree holds a symlink {rel!r}; tau never follows one: replace it by the file")
        else:
            raise Refused(f"the bundle tree holds {rel!r}, which is not a regular file or folder")


def open_in_tree(root_fd: int, rel: str) -> int:
    """Open a payload file below root without following any symlink on the way."""
    segments = safe_relpath(rel).split("/")
    fd = root_fd
    opened = []
    try:
        for segment in segments[:-1]:
            fd = os.open(segment, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            opened.append(fd)
        file_fd = os.open(segments[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    finally:
        for d in opened:
            os.close(d)
    if not stat.S_ISREG(os.fstat(file_fd).st_mode):
        os.close(file_fd)
        raise Refused(f"bundle path {rel!r} is not a regular file")
    return file_fd


def make_folders(root_fd: int, rel: str) -> int:
    """Folders of rel below root (created 0700 as needed, no symlink followed); returns the descriptor of the
    file's folder (root_fd itself for a top-level file; any other is the caller's to close)."""
    fd = root_fd
    for segment in rel.split("/")[:-1]:
        try:
            os.mkdir(segment, 0o700, dir_fd=fd)
        except FileExistsError:
            pass
        new = os.open(segment, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        if fd != root_fd:
            os.close(fd)
        fd = new
    return fd


def read_ack(root_fd: int, rel: str) -> bytes | None:
    """Bytes of an acknowledgement file (`.tau/bundles/NAME`) below root, or None; no symlink is followed."""
    fd = root_fd
    opened = []
    try:
        for segment in rel.split("/")[:-1]:
            try:
                fd = os.open(segment, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                return None
            opened.append(fd)
        try:
            file_fd = os.open(rel.rsplit("/", 1)[1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except FileNotFoundError:
            return None
    finally:
        for d in opened:
            os.close(d)
    try:
        if not stat.S_ISREG(os.fstat(file_fd).st_mode):
            raise Refused(f"{rel} is not a regular file")
        chunks = []
        while chunk := os.read(file_fd, CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(file_fd)


def generations(root_fd: int) -> list[str]:
    """Generations with a completion marker below root."""
    try:
        dfd = os.open(BUNDLES, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
    except FileNotFoundError:
        return []
    try:
        return sorted(n[: -len(".complete")] for n in os.listdir(dfd)
                      if n.endswith(".complete") and _GENERATION.match(n[: -len(".complete")]))
    finally:
        os.close(dfd)


def describe(root: str) -> list[dict]:
    """Manifest entries of every payload file: path, size, sha256."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        files = []
        for rel, _ in walk(root):
            fd = open_in_tree(root_fd, rel)
            try:
                size, sha = hash_fd(fd)
            finally:
                os.close(fd)
            files.append({"path": rel, "size": size, "sha256": sha})
        return files
    finally:
        os.close(root_fd)


def build(generation: str, files: list[dict], run: dict | None, producer: dict, index: dict | None) -> dict:
    record = {"kind": "tau.bundle-manifest", "schema_version": 1, "generation": check_generation(generation),
              "created_at": jsonio.now_rfc3339(), "run": run, "producer": producer, "index": index,
              "files": files, "totals": {"files": len(files), "bytes": sum(f["size"] for f in files)}}
    schema.validate(record, "bundle-manifest")
    return record


def decode(data: bytes, generation: str) -> dict:
    record = jsonio.loads(data, f"manifest of generation {generation!r}")
    if not isinstance(record, dict):
        raise BadInput(f"manifest of generation {generation!r} is not a JSON object")
    schema.validate(record, "bundle-manifest", f"manifest of generation {generation!r}")
    if record["generation"] != generation:
        raise Conflict(f"manifest names generation {record['generation']!r}, not {generation!r}")
    for entry in record["files"]:
        safe_relpath(entry["path"])
    paths = [f["path"] for f in record["files"]]
    if len(set(paths)) != len(paths):
        raise BadInput(f"manifest of generation {generation!r} lists a path twice")
    folders = {p.rsplit("/", i)[0] for p in paths for i in range(1, p.count("/") + 1)}
    if folders & set(paths):
        raise BadInput(f"manifest of generation {generation!r} lists {sorted(folders & set(paths))[0]!r} both as a "
                       "file and as a folder")
    return record


def compare(manifest: dict, listing: dict[str, int]) -> dict:
    """Missing, extra and resized files of a listing {path: size} against a manifest."""
    expected = {f["path"]: f["size"] for f in manifest["files"]}
    return {
        "missing": sorted(set(expected) - set(listing)),
        "extra": sorted(set(listing) - set(expected)),
        "resized": [{"path": p, "expected": expected[p], "actual": listing[p]}
                    for p in sorted(set(expected) & set(listing)) if expected[p] != listing[p]],
    }
