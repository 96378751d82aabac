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
The generation's own files (its parts), written before the manifest and named in it with size and sha256 like
payload files, live in the generation's folder DIR/.tau/bundles/G.d/ (immutable once the manifest names them):
  G.d/checkpoints.json         the checkpoint index tau builds (tau.checkpoint-index, `checkpoint_index`)
  G.d/metrics/NAME             a copy of each metrics file
Readers of G compare G's manifest with the payload files and G's own folder; a payload file that G does not name
but another generation's manifest (acknowledged or not) does is that generation's, not an extra file of G
(`claims`, `compare`).
"""

from __future__ import annotations

import bisect
import fnmatch
import hashlib
import os
import re
from collections.abc import Container
from typing import TypeVar

from taulib import jsonio, schema
from taulib.errors import BadInput, CheckFailed, Conflict, Refused, TauError
from taulib.fs.tree import Tree

TAU_DIR = ".tau"
BUNDLES = ".tau/bundles"
CURRENT = ".tau/current"
_GENERATION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
CHUNK = 1 << 20
_V = TypeVar("_V")


def check_generation(generation: str) -> str:
    if not isinstance(generation, str) or not _GENERATION.match(generation):
        raise BadInput(f"generation {generation!r} must be one path segment of letters, digits and ._-")
    return generation


def manifest_name(generation: str) -> str:
    return f"{BUNDLES}/{check_generation(generation)}.json"


def marker_name(generation: str) -> str:
    return f"{BUNDLES}/{check_generation(generation)}.complete"


def parts_folder(generation: str) -> str:
    """The generation's own folder `.tau/bundles/G.d` (no generation's manifest, marker or folder has the name of
    another's: `.json`, `.complete` and `.d` are not suffixes of one another)."""
    return f"{BUNDLES}/{check_generation(generation)}.d"


def checkpoint_index_name(generation: str) -> str:
    return f"{parts_folder(generation)}/checkpoints.json"


def check_metrics_name(name: str) -> str:
    """The name of a metrics copy: one path segment (the metrics file's own name)."""
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name
            or len(name.encode("utf-8", "surrogateescape")) > 255):
        raise BadInput(f"metrics name {name!r} is not one file name")
    return name


def metrics_name(generation: str, name: str) -> str:
    return f"{parts_folder(generation)}/metrics/{check_metrics_name(name)}"


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


def load_ack(generation: str, manifest_bytes: bytes | None, marker_bytes: bytes | None, where: str) -> jsonio.Record:
    """The manifest of an acknowledged generation, checked against its marker; typed errors otherwise: no marker
    or no manifest CheckFailed (1), malformed BadInput (65), a marker or manifest of another generation Conflict
    (73), a marker that acknowledges other manifest bytes CheckFailed (1), an unsafe path Refused (77)."""
    if marker_bytes is None:
        raise CheckFailed(f"{where}: generation {generation!r} is not acknowledged: it has no completion marker (its "
                          "producer never sealed it, or a part the seal declared was absent)", generation=generation)
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


def safe_path(path: str, generation: str) -> str:
    """A path the manifest of `generation` may name: a payload path, or one of the generation's own folder."""
    folder = parts_folder(generation) + "/"
    if isinstance(path, str) and path.startswith(folder):
        rest = path[len(folder):]
        if not rest or "\\" in rest or "\0" in rest or any(s in ("", ".", "..") for s in rest.split("/")):
            raise Refused(f"bundle path {path!r} escapes or is not normalised")
        return path
    return safe_relpath(path)


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


def walk_parts(tree: Tree, generation: str) -> list[tuple[str, int]]:
    """(path, size) of every file in the generation's own folder (none when it has no folder), sorted."""
    folder = parts_folder(generation)
    if not tree.has_folder(folder):
        return []
    return [(f"{folder}/{rel}", size) for rel, size in tree.walk(folder)]


def open_payload(tree: Tree, rel: str) -> int:
    """A read descriptor of a payload file, reached without following any symlink."""
    return tree.open_read(safe_relpath(rel))


def generations(tree: Tree) -> list[str]:
    """Generations with a completion marker in the tree."""
    return sorted(n[: -len(".complete")] for n in tree.listdir(BUNDLES)
                  if n.endswith(".complete") and _GENERATION.match(n[: -len(".complete")]))


def describe(tree: Tree, listing: list[tuple[str, int]] | None = None, durable: bool = False) -> list[jsonio.Record]:
    """Manifest entries of every payload file (of `listing`, by default a fresh `walk`): path, size, sha256;
    `durable`: each file fsynced once hashed (its folders are the caller's: `Tree.sync_folders`)."""
    files = []
    for rel, _ in walk(tree) if listing is None else listing:
        fd = open_payload(tree, rel)
        try:
            size, sha = hash_fd(fd)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        files.append({"path": rel, "size": size, "sha256": sha})
    return files


def build(generation: str, files: list[jsonio.Record], run: jsonio.Record | None, producer: jsonio.Record,
          index: jsonio.Record | None, checkpoints: jsonio.Record | None = None,
          metrics: list[jsonio.Record] | None = None) -> jsonio.Record:
    record = {"kind": "tau.bundle-manifest", "schema_version": 1, "generation": check_generation(generation),
              "created_at": jsonio.now_rfc3339(), "run": run, "producer": producer, "index": index,
              "checkpoints": checkpoints, "metrics": metrics or [],
              "files": files, "totals": {"files": len(files), "bytes": sum(f["size"] for f in files)}}
    schema.validate(record, "bundle-manifest")
    return record


def decode(data: bytes, generation: str) -> jsonio.Record:
    record = jsonio.loads(data, f"manifest of generation {generation!r}")
    if not isinstance(record, dict):
        raise BadInput(f"manifest of generation {generation!r} is not a JSON object")
    schema.validate(record, "bundle-manifest", f"manifest of generation {generation!r}")
    if record["generation"] != generation:
        raise Conflict(f"manifest names generation {record['generation']!r}, not {generation!r}")
    paths = [safe_relpath(f["path"]) for f in record["files"]]
    if len(set(paths)) != len(paths):
        raise BadInput(f"manifest of generation {generation!r} lists a path twice")
    folders = {p.rsplit("/", i)[0] for p in paths for i in range(1, p.count("/") + 1)}
    if folders & set(paths):
        raise BadInput(f"manifest of generation {generation!r} lists {sorted(folders & set(paths))[0]!r} both as a "
                       "file and as a folder")
    own: list[tuple[str, str | None]] = []  # (path, the name it must have; None: no name fits)
    if record.get("checkpoints") is not None:
        own.append((record["checkpoints"]["path"], checkpoint_index_name(generation)))
    for entry in record.get("metrics", []):
        try:
            own.append((entry["path"], metrics_name(generation, entry["name"])))
        except BadInput:
            own.append((entry["path"], None))
    for path, expected in own:
        if path != expected:
            raise BadInput(f"manifest of generation {generation!r} names its part {path!r} outside "
                           f"{parts_folder(generation)}/ or under another name")
    if len({p for p, _ in own}) != len(own):
        raise BadInput(f"manifest of generation {generation!r} names a part twice")
    return record


def parts(record: jsonio.Record) -> list[jsonio.Record]:
    """The generation's own files its manifest names (checkpoint index, metrics copies): path, size, sha256."""
    out = []
    if record.get("checkpoints") is not None:
        out.append({k: record["checkpoints"][k] for k in ("path", "size", "sha256")})
    out += [{k: m[k] for k in ("path", "size", "sha256")} for m in record.get("metrics", [])]
    return out


def entries(record: jsonio.Record) -> list[jsonio.Record]:
    """Every file a generation consists of: its payload files, then its parts."""
    files: list[jsonio.Record] = record["files"]
    return files + parts(record)


def reader_view(listing: dict[str, _V], generation: str) -> dict[str, _V]:
    """What readers of `generation` compare with its manifest: the payload (everything outside `.tau/`) and the
    generation's own folder; the rest of `.tau/` (acknowledgements, other generations' folders) is tau's."""
    folder = parts_folder(generation) + "/"
    return {p: v for p, v in listing.items() if not p.startswith(TAU_DIR + "/") or p.startswith(folder)}


def claims(manifests: dict[str, bytes | None], strict: bool = False) -> dict[str, list[tuple[str, str, int]]]:
    """{payload path: [(generation, sha256, size)]} of what other generations' manifests ({generation: bytes}) name.
    A manifest that does not decode is skipped (its files stay unclaimed, so readers see them as extra), or, with
    `strict` (an uploader, which must know every claim), refused as BadInput."""
    out: dict[str, list[tuple[str, str, int]]] = {}
    for generation, data in sorted(manifests.items()):
        if data is None:
            continue
        try:
            record = decode(data, generation)
        except TauError as exc:
            if strict:
                raise BadInput(f"the manifest of generation {generation!r} there cannot be read ({exc.message}); "
                               "tau cannot tell which blobs it names: remove it or upload to a fresh prefix",
                               generation=generation) from None
            continue
        for entry in record["files"]:
            out.setdefault(entry["path"], []).append((generation, entry["sha256"], entry["size"]))
    return out


def other_manifests(names: list[str], generation: str) -> list[str]:
    """The generations other than `generation` whose manifests `.tau/bundles/H.json` are among `names` (file names
    in `.tau/bundles/`)."""
    return sorted(n[: -len(".json")] for n in names
                  if n.endswith(".json") and _GENERATION.match(n[: -len(".json")]) and n[: -len(".json")] != generation)


def local_claims(tree: Tree, generation: str) -> dict[str, list[tuple[str, str, int]]]:
    """`claims` of the other generations' manifests in a local tree (one that cannot be read is skipped)."""
    manifests = {}
    for other in other_manifests(tree.listdir(BUNDLES), generation):
        try:
            manifests[other] = tree.read_bytes(manifest_name(other))
        except TauError:
            continue
    return claims(manifests)


def compare(manifest: jsonio.Record, listing: dict[str, int], claimed: Container[str] = ()) -> jsonio.Record:
    """Missing, extra and resized files of a listing {path: size} against a manifest (its payload files and its parts);
    a file of the listing that the manifest does not name but another generation's does (`claimed`) is not extra."""
    expected = {f["path"]: f["size"] for f in entries(manifest)}
    return {
        "missing": sorted(set(expected) - set(listing)),
        "extra": sorted(p for p in set(listing) - set(expected) if p not in claimed),
        "resized": [{"path": p, "expected": expected[p], "actual": listing[p]}
                    for p in sorted(set(expected) & set(listing)) if expected[p] != listing[p]],
    }


# -- the checkpoint index --------------------------------------------------------------------------------------------

_DIGITS = re.compile(r"[0-9]+")
MAX_STEP_DIGITS = 18  # a longer run of digits is no step (and would not fit JSON readers' 64-bit integers)


def check_glob(pattern: str) -> str:
    """A --checkpoints glob: relative to the tree, `/`-separated, no empty, `.` or `..` segment, not into .tau/."""
    if (not isinstance(pattern, str) or not pattern or pattern.startswith("/") or "\\" in pattern
            or "\0" in pattern or any(s in ("", ".", "..") for s in pattern.split("/"))):
        raise Refused(f"checkpoint glob {pattern!r} is not a relative path inside the bundle (no empty, . or .. "
                      "segment)")
    if pattern.split("/")[0] == TAU_DIR:
        raise Refused(f"checkpoint glob {pattern!r} is inside .tau/, which belongs to tau")
    return pattern


def match_checkpoints(globs: list[str], paths: list[str]) -> tuple[dict[str, str], list[str]]:
    """({matched path: "file" or "folder"}, the globs that matched nothing). Candidates are the payload files and
    the folders that hold them; each segment of a glob matches one name (fnmatch: `*`, `?`, `[...]`)."""
    candidates = {p: "file" for p in paths}
    for p in paths:
        for i in range(1, p.count("/") + 1):
            candidates.setdefault(p.rsplit("/", i)[0], "folder")
    by_depth: dict[int, list[str]] = {}
    for c in candidates:
        by_depth.setdefault(c.count("/"), []).append(c)
    matched: dict[str, str] = {}
    unmatched = []
    for pattern in globs:
        segments = pattern.split("/")
        hits = [c for c in by_depth.get(len(segments) - 1, [])
                if all(fnmatch.fnmatchcase(name, seg) for name, seg in zip(c.split("/"), segments, strict=True))]
        if not hits:
            unmatched.append(pattern)
        matched.update((c, candidates[c]) for c in hits)
    return matched, unmatched


def checkpoint_step(path: str, kind: str) -> int | None:
    """The step of a checkpoint: the last run of ASCII digits in its last name (for a file, without its last
    extension); None without one or when it is longer than MAX_STEP_DIGITS."""
    name = path.rsplit("/", 1)[-1]
    if kind == "file" and "." in name[1:]:
        name = name[: name.rindex(".")]
    runs = _DIGITS.findall(name)
    if not runs or len(runs[-1]) > MAX_STEP_DIGITS:
        return None
    return int(runs[-1])


def folder_digest(files: list[tuple[str, int, str]]) -> str:
    """sha256 of a folder from its files (path relative to the folder, size, sha256): over, for every file in byte
    order of its path, `SHA256 SIZE PATH` followed by a NUL byte (SHA256 in lowercase hex, SIZE in decimal)."""
    h = hashlib.sha256()
    for rel, size, sha in sorted(files, key=lambda f: os.fsencode(f[0])):
        h.update(f"{sha} {size} ".encode() + os.fsencode(rel) + b"\0")
    return h.hexdigest()


def checkpoint_index(generation: str, globs: list[str], files: list[jsonio.Record]) -> jsonio.Record:
    """The checkpoint index (tau.checkpoint-index) of the matches of `globs` among a manifest's payload files,
    which carry every file's size and sha256 (nothing is read again)."""
    matched, _ = match_checkpoints(globs, [f["path"] for f in files])
    ordered = sorted(files, key=lambda f: f["path"])
    paths = [f["path"] for f in ordered]
    by_path = {f["path"]: f for f in ordered}
    checkpoints = []
    for path, kind in sorted(matched.items()):
        if kind == "file":
            size, count, sha = by_path[path]["size"], 1, by_path[path]["sha256"]
        else:
            inside = ordered[bisect.bisect_left(paths, path + "/"):bisect.bisect_left(paths, path + "0")]
            size, count = sum(f["size"] for f in inside), len(inside)
            sha = folder_digest([(f["path"][len(path) + 1:], f["size"], f["sha256"]) for f in inside])
        checkpoints.append({"path": path, "kind": kind, "step": checkpoint_step(path, kind), "size": size,
                            "files": count, "sha256": sha})
    stepped = [c for c in checkpoints if c["step"] is not None]
    latest = max(stepped, key=lambda c: (c["step"], c["path"]))["path"] if stepped else None
    return {"kind": "tau.checkpoint-index", "schema_version": 1, "generation": check_generation(generation),
            "globs": sorted(set(globs)), "checkpoints": checkpoints, "latest": latest}
