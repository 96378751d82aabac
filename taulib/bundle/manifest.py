"""Bundle manifests and completion markers, and describing a local output tree (a `fs.tree.Tree`).

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

from taulib import jsonio, schema
from taulib.errors import BadInput, CheckFailed, Conflict, Refused
from taulib.fs.tree import Tree

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


def open_tree(root: str) -> Tree:
    """The bundle folder ROOT (a path the user names: followed if it is a symlink; nothing below it is)."""
    return Tree.open(root, label="bundle folder", follow=True, context=" inside a bundle", what="bundle tree")


def walk(tree: Tree) -> list[tuple[str, int]]:
    """(relative path, size) of every payload file of the tree, sorted; refuses symlinks and special files."""
    return [(safe_relpath(rel), size) for rel, size in tree.walk(skip=frozenset({TAU_DIR}))]


def open_payload(tree: Tree, rel: str) -> int:
    """A read descriptor of a payload file, reached without following any symlink."""
    return tree.open_read(safe_relpath(rel))


def generations(tree: Tree) -> list[str]:
    """Generations with a completion marker in the tree."""
    return sorted(n[: -len(".complete")] for n in tree.listdir(BUNDLES)
                  if n.endswith(".complete") and _GENERATION.match(n[: -len(".complete")]))


def describe(tree: Tree) -> list[dict]:
    """Manifest entries of every payload file: path, size, sha256."""
    files = []
    for rel, _ in walk(tree):
        fd = open_payload(tree, rel)
        try:
            size, sha = hash_fd(fd)
        finally:
            os.close(fd)
        files.append({"path": rel, "size": size, "sha256": sha})
    return files


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
