"""Sealing (tau-bundle-seal): acknowledge an output tree as one generation's complete bundle.

Run after the payload succeeded, or let tau-bundle-seal run the payload:
`tau-bundle-seal DIR --generation G -- COMMAND...` checks its arguments, runs COMMAND (no shell; its stdout goes
to stderr, so stdout carries only the JSON result; TERM, INT and HUP are passed on to it), and seals only when
COMMAND exits 0; otherwise nothing is written and the exit status is COMMAND's (128+N when a signal N ended it).
Steps:
  1. list the tree (every file's path and size; symlinks and special files refused, 77);
  2. the declared parts, each required for an acknowledgement:
     - the artifact index (`--index PATH`, relative to DIR): a JSON object whose `bundle_id` or `generation` names
       G, else refused (65 malformed, 73 another generation);
     - the checkpoints (`--checkpoints GLOB`, repeatable, relative to DIR): every glob must match a payload file
       or a folder holding one;
     - the metrics files (`--metrics FILE`, repeatable, anywhere): regular files (a symlink or a special file is
       refused, 77), at most METRICS_LIMIT bytes each (65), two with the same name refused before the payload (2);
     a declared part that is absent (an index or metrics file missing, a glob matching nothing) means no
     acknowledgement at all: nothing is written or uploaded, the current pointer stays, and tau-bundle-seal exits
     0, the payload's status, with `acknowledged` false, what is `absent` and the `reason` (never a failed payload);
  3. describe the tree (every payload file's sha256, each file and folder fsynced: the acknowledgement never
     outlives the payload after a power cut) and build the checkpoint index from it (nothing is read twice;
     `manifest.checkpoint_index`);
  4. write the generation's parts, `.tau/bundles/G.d/checkpoints.json` and `.tau/bundles/G.d/metrics/NAME`
     (kept when identical; replaced only while no manifest of G names them: a killed sealer's), then the manifest
     `.tau/bundles/G.json` (no overwrite: an existing manifest of G with other content is refused, 73; identical
     files are idempotent), then the marker `.tau/bundles/G.complete`, last;
  5. replace the mutable pointer `.tau/current` (`G\n`) atomically: the generation sealed last;
  steps 4-5 run under `.tau/locks/seal.lock`, one sealer of a tree at a time, which first removes the temp files a
  killed sealer left (failpoints seal.manifest_written, seal.marker_written, seal.current_replaced);
  6. with `--upload URL` (checked before the payload runs): `upload.upload_bundle` (the manifest, then every payload
     file and part, never over another generation's blob, then the marker, then the current pointer).
The run identity (`--run RUN_ID`) is recorded with the shard and attempt of the environment (TAU_SHARD_ID,
TAU_ATTEMPT_ID) when TAU_RUN_ID names the same run, as it does inside a tau attempt.
"""

from __future__ import annotations

import os
import re
import socket
from typing import TYPE_CHECKING

from taulib import __version__, env, failpoints, jsonio
from taulib.bundle import manifest as mf
from taulib.errors import BadInput, Conflict, NotFound, Refused, TauError, UsageError
from taulib.rundir import locks

if TYPE_CHECKING:
    from taulib.fs.tree import Tree
    from taulib.jsonio import Record


class PayloadFailed(TauError):
    """The payload COMMAND did not exit 0: tau-bundle-seal exits with its status and seals nothing."""

    def __init__(self, message: str, status: int, **details: object) -> None:
        super().__init__(message, **details)
        self.code = status

    @property
    def name(self) -> str:
        return "payload_failed"


METRICS_LIMIT = 256 << 20  # a metrics file is copied whole, in memory


def _index_entry(tree: Tree, index: str, generation: str) -> Record | None:
    """The manifest's `index` of the declared artifact index; None when it is absent (no acknowledgement)."""
    rel = mf.safe_relpath(index)
    try:
        data = tree.read_bytes(rel)
    except NotFound:
        data = None
    if data is None:
        return None
    doc = jsonio.loads(data, f"artifact index {rel!r}")
    if not isinstance(doc, dict):
        raise BadInput(f"artifact index {rel!r} is not a JSON object")
    named = doc.get("bundle_id", doc.get("generation"))
    if not isinstance(named, str):
        raise BadInput(f"artifact index {rel!r} names no generation (bundle_id)")
    if named != generation:
        raise Conflict(f"artifact index {rel!r} belongs to generation {named!r}, not {generation!r}")
    return {"path": rel, "sha256": jsonio.sha256_hex(data), "generation": generation}


def metrics_names(metrics: list[str]) -> list[str]:
    """The name of each metrics file's copy (its own file name); two files of one name are a usage error."""
    names: list[str] = []
    for path in metrics:
        name = os.path.basename(path)
        try:
            mf.check_metrics_name(name)
        except BadInput:
            raise UsageError(f"--metrics {path!r} names no file") from None
        if name in names:
            raise UsageError(f"--metrics: two files are named {name!r} ({metrics[names.index(name)]!r} and "
                             f"{path!r}); each is copied as .tau/bundles/G.d/metrics/NAME: rename one")
        names.append(name)
    return names


def read_metrics(path: str) -> bytes | None:
    """The bytes of a metrics file, or None when it does not exist. The file itself is never a symlink (refused,
    like a special file); the folders that lead to it are the user's path and are followed."""
    from taulib.fs import openat

    fd = openat.open_named_file(path, "metrics file")
    if fd is None:
        return None
    try:
        chunks, total = [], 0
        while chunk := os.read(fd, mf.CHUNK):
            total += len(chunk)
            if total > METRICS_LIMIT:
                raise BadInput(f"metrics file {path!r} is larger than {METRICS_LIMIT} bytes; a metrics file is copied "
                               "whole into the bundle: put a larger one in the payload")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


_ABSENT = {"--index": "the artifact index {!r} (--index) is absent",
           "--checkpoints": "the checkpoint glob {!r} (--checkpoints) matches nothing",
           "--metrics": "the metrics file {!r} (--metrics) is absent"}


def _write_once(tree: Tree, rel: str, data: bytes) -> bool:
    """Publish DIR/rel with the link-no-overwrite protocol. True when created, False when identical bytes were
    there; other bytes are a conflict."""
    if tree.link_new(rel, data):
        return True
    if tree.read_bytes(rel) != data:
        raise Conflict(f"{rel} already exists with other content; a generation's acknowledgement is "
                       "immutable: choose a new generation")
    return False


def _write_part(tree: Tree, rel: str, data: bytes, named: bool) -> None:
    """A part of the generation (`.tau/bundles/G.d/...`): kept when identical, created when missing; other bytes
    are a killed sealer's, replaced while no manifest names them (`named` false), else a conflict."""
    current = tree.read_bytes(rel)
    if current == data:
        return
    if current is None:
        _write_once(tree, rel, data)
    elif named:
        raise Conflict(f"{rel} differs from what the manifest of its generation names; a generation's "
                       "acknowledgement is immutable: choose a new generation")
    else:
        tree.rename_over(rel, data)


def run_identity(run_id: str | None, environ: dict[str, str] | None = None) -> dict[str, str | None] | None:
    """The manifest's `run`: None without a run id; the shard and attempt only from the environment of that run."""
    if run_id is None:
        return None
    inside = env.get("TAU_RUN_ID", environ) == run_id
    run = {"run_id": run_id, "shard_id": env.get("TAU_SHARD_ID", environ) if inside else None,
           "attempt_id": env.get("TAU_ATTEMPT_ID", environ) if inside else None}
    for key, pattern in (("run_id", r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z"), ("shard_id", r"^shard-[0-9]{5,}\Z"),
                         ("attempt_id", r"^attempt-[0-9]{4,}\Z")):
        value = run[key]
        if value is not None and not re.match(pattern, value):
            source = "--run" if key == "run_id" else f"TAU_{key.upper()}"
            raise BadInput(f"{source} {value!r} is not a {key.replace('_', ' ')}")
    return run


def run_payload(command: list[str]) -> int:
    """Run COMMAND without a shell, its stdout on our stderr; returns its exit status (128+N for signal N)."""
    import signal
    import subprocess
    import sys

    try:
        proc = subprocess.Popen(command, stdout=sys.stderr.fileno(), close_fds=True)
    except FileNotFoundError:
        raise NotFound(f"the payload command {command[0]!r} was not found; nothing sealed") from None
    except PermissionError:
        raise Refused(f"the payload command {command[0]!r} cannot be executed (permission denied); nothing "
                      "sealed") from None
    except OSError as exc:
        raise Refused(f"the payload command {command[0]!r} cannot be started ({exc.strerror}); nothing sealed") \
            from None
    forwarded = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {sig: signal.signal(sig, lambda signum, frame: proc.send_signal(signum)) for sig in forwarded}
    try:
        status = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - status if status < 0 else status


def _acknowledge(tree: Tree, tau: Tree, generation: str, files: list[Record], index_entry: Record | None,
                 run: Record | None, command: list[str] | None, checkpoints: Record | None, metrics: list[Record],
                 parts: list[tuple[str, bytes]]) -> tuple[Record, bytes, bool]:
    """Steps 4 and 5, under `.tau/locks/seal.lock`: one sealer of a tree at a time, so it alone removes what a
    killed sealer left (temp files), and the no-link publication (check, then rename) is exact. (record, its
    bytes, whether the manifest was created)."""
    tau.clean_debris("")
    tau.clean_debris("bundles")
    own = mf.parts_folder(generation)[len(mf.TAU_DIR) + 1:]
    for folder in (own, f"{own}/metrics"):
        if tau.has_folder(folder):
            tau.clean_debris(folder)
    existing = tree.read_bytes(mf.manifest_name(generation))
    if existing is not None:
        record = mf.decode(existing, generation)
        if ((record["files"], record["index"], record["run"], record.get("checkpoints"), record.get("metrics", []))
                != (files, index_entry, run, checkpoints, metrics)):
            raise Conflict(f"generation {generation!r} is already sealed with another manifest; a generation is "
                           "immutable: choose a new one", generation=generation)
        data = existing
    else:
        producer = {"host": socket.gethostname()[:255], "uid": os.geteuid(), "tau_version": __version__,
                    "command": command or None}
        record = mf.build(generation, files, run, producer, index_entry, checkpoints, metrics)
        data = jsonio.canonical(record)
    for rel, part in parts:  # before the manifest that names them
        _write_part(tree, rel, part, named=existing is not None)
    created = _write_once(tree, mf.manifest_name(generation), data)
    failpoints.hit("seal.manifest_written")
    _write_once(tree, mf.marker_name(generation), mf.marker_text(generation, jsonio.sha256_hex(data)))
    failpoints.hit("seal.marker_written")
    tree.rename_over(mf.CURRENT, mf.current_text(generation))
    failpoints.hit("seal.current_replaced")
    return record, data, created


def _declared(tree: Tree, listing: list[tuple[str, int]], generation: str, index: str | None, globs: list[str],
              metrics: list[str], names: list[str]) -> tuple[Record | None, list[tuple[str, bytes]], list[Record]]:
    """Step 2: (the index entry, the metrics (name, bytes), what is absent: [{option, path}])."""
    absent: list[Record] = []
    index_entry = None
    if index is not None:
        index_entry = _index_entry(tree, index, generation)
        if index_entry is None:
            absent.append({"option": "--index", "path": index})
    _, unmatched = mf.match_checkpoints(globs, [rel for rel, _ in listing])
    absent += [{"option": "--checkpoints", "path": g} for g in unmatched]
    found = []
    for path, name in zip(metrics, names, strict=True):
        data = read_metrics(path)
        if data is None:
            absent.append({"option": "--metrics", "path": path})
        else:
            found.append((name, data))
    return index_entry, found, absent


def _parts(generation: str, globs: list[str], files: list[Record],
           metrics: list[tuple[str, bytes]]) -> tuple[Record | None, list[Record], list[tuple[str, bytes]]]:
    """Step 3's parts: (checkpoints entry, metrics entries, [(path, bytes)] to write)."""
    parts: list[tuple[str, bytes]] = []
    checkpoints: Record | None = None
    if globs:
        doc = mf.checkpoint_index(generation, globs, files)
        data = jsonio.canonical(doc)
        checkpoints = {"path": mf.checkpoint_index_name(generation), "size": len(data),
                       "sha256": jsonio.sha256_hex(data), "count": len(doc["checkpoints"])}
        parts.append((checkpoints["path"], data))
    entries: list[Record] = []
    for name, data in sorted(metrics):
        entries.append({"name": name, "path": mf.metrics_name(generation, name), "size": len(data),
                        "sha256": jsonio.sha256_hex(data)})
        parts.append((entries[-1]["path"], data))
    return checkpoints, entries, parts


def seal(root: str, generation: str, run: Record | None = None, index: str | None = None,
         command: list[str] | None = None, upload: str | None = None, checkpoints: tuple[str, ...] = (),
         metrics: tuple[str, ...] = ()) -> Record:
    mf.check_generation(generation)
    if index is not None:
        mf.safe_relpath(index)
    globs = list(dict.fromkeys(mf.check_glob(g) for g in checkpoints))
    metric_paths = list(dict.fromkeys(metrics))
    names = metrics_names(metric_paths)
    if upload is not None:
        from taulib.bundle import endpoint

        endpoint.parse(upload)  # refused before the payload runs and before any request
    if command:
        status = run_payload(command)
        if status != 0:
            raise PayloadFailed(f"the payload {command[0]!r} exited with status {status}; nothing sealed", status,
                                payload_status=status)
    result = {"kind": "tau.bundle-seal", "schema_version": 1, "root": None, "generation": generation,
              "acknowledged": False, "reason": None, "absent": [], "created": False, "manifest_sha256": None,
              "files": None, "bytes": None, "index": None, "checkpoints": None, "metrics": [], "run": run,
              "uploaded": None}
    with mf.open_tree(root) as tree:
        result["root"] = root = tree.path
        listing = mf.walk(tree)  # steps 1 to 3 only read: a refusal leaves the tree as it was
        index_entry, found, absent = _declared(tree, listing, generation, index, globs, metric_paths, names)
        if absent:
            result["absent"] = absent
            result["reason"] = (f"generation {generation!r} is not acknowledged: "
                                + "; ".join(_ABSENT[a["option"]].format(a["path"]) for a in absent)
                                + "; nothing was written or uploaded")
            return result
        files = mf.describe(tree, listing, durable=True)  # the payload made durable before it is acknowledged:
        tree.sync_folders([f["path"] for f in files])  # its bytes and its names, or a power cut may outlive them
        checkpoints_entry, metrics_entries, parts = _parts(generation, globs, files, found)
        with tree.subtree(mf.TAU_DIR, create=True) as tau, locks.hold(tau, "seal"):
            record, data, created = _acknowledge(tree, tau, generation, files, index_entry, run, command,
                                                 checkpoints_entry, metrics_entries, parts)
    result.update(acknowledged=True, created=created, manifest_sha256=jsonio.sha256_hex(data),
                  files=record["totals"]["files"], bytes=record["totals"]["bytes"], index=record["index"],
                  checkpoints=record.get("checkpoints"), metrics=record.get("metrics", []), run=record["run"])
    if upload is not None:
        from taulib.bundle import upload as uploading

        result["uploaded"] = uploading.upload_bundle(root, record, data, upload)
    return result
