"""Sealing (tau-bundle-seal): acknowledge an output tree as one generation's complete bundle.

Run after the payload succeeded, or let tau-bundle-seal run the payload:
`tau-bundle-seal DIR --generation G -- COMMAND...` checks its arguments, runs COMMAND (no shell; its stdout goes
to stderr, so stdout carries only the JSON result; TERM, INT and HUP are passed on to it), and seals only when
COMMAND exits 0; otherwise nothing is written and the exit status is COMMAND's (128+N when a signal N ended it).
Steps:
  1. describe the tree (every file's path, size, sha256; symlinks and special files refused);
  2. the optional artifact index (`--index PATH`, relative to DIR): absent means "no acknowledgement for that part"
     (recorded as null, the payload still succeeds); present, it must be a JSON object whose `bundle_id` or
     `generation` names G, else the seal is refused (65 malformed, 73 another generation);
  3. write the manifest `.tau/bundles/G.json` (no overwrite: an existing manifest of G with other content is
     refused, 73; identical files are idempotent), then the marker `.tau/bundles/G.complete`, last;
  4. replace the mutable pointer `.tau/current` (`G\n`) atomically: the generation sealed last;
  steps 1-4 run under `.tau/locks/seal.lock`, one sealer of a tree at a time, which first removes the temp files a
  killed sealer left (failpoints seal.manifest_written, seal.marker_written, seal.current_replaced);
  5. with `--upload URL` (checked before the payload runs): upload every payload file (the bytes sent are hashed
     and must equal the manifest), then the manifest, then the marker, then the current pointer, so a reader that
     sees the marker sees everything (`blob.upload_bundle`).
The run identity (`--run RUN_ID`) is recorded with the shard and attempt of the environment (TAU_SHARD_ID,
TAU_ATTEMPT_ID) when TAU_RUN_ID names the same run, as it does inside a tau attempt.
"""

from __future__ import annotations

import os
import re
import socket

from taulib import __version__, env, failpoints, jsonio
from taulib.bundle import manifest as mf
from taulib.errors import BadInput, Conflict, NotFound, Refused, TauError
from taulib.rundir import locks


class PayloadFailed(TauError):
    """The payload COMMAND did not exit 0: tau-bundle-seal exits with its status and seals nothing."""

    def __init__(self, message: str, status: int, **details: object) -> None:
        super().__init__(message, **details)
        self.code = status

    @property
    def name(self) -> str:
        return "payload_failed"


def _index_entry(tree, index: str | None, generation: str) -> dict | None:
    if index is None:
        return None
    rel = mf.safe_relpath(index)
    try:
        data = tree.read_bytes(rel)
    except NotFound:
        data = None
    if data is None:
        return None  # declared but absent: no acknowledgement for that part, never a failed payload
    doc = jsonio.loads(data, f"artifact index {rel!r}")
    if not isinstance(doc, dict):
        raise BadInput(f"artifact index {rel!r} is not a JSON object")
    named = doc.get("bundle_id", doc.get("generation"))
    if not isinstance(named, str):
        raise BadInput(f"artifact index {rel!r} names no generation (bundle_id)")
    if named != generation:
        raise Conflict(f"artifact index {rel!r} belongs to generation {named!r}, not {generation!r}")
    return {"path": rel, "sha256": jsonio.sha256_hex(data), "generation": generation}


def _write_once(tree, rel: str, data: bytes) -> bool:
    """Publish DIR/rel with the link-no-overwrite protocol. True when created, False when identical bytes were
    there; other bytes are a conflict."""
    if tree.link_new(rel, data):
        return True
    if tree.read_bytes(rel) != data:
        raise Conflict(f"{rel} already exists with other content; a generation's acknowledgement is "
                       "immutable: choose a new generation")
    return False


def run_identity(run_id: str | None, environ: dict | None = None) -> dict | None:
    """The manifest's `run`: None without a run id; the shard and attempt only from the environment of that run."""
    if run_id is None:
        return None
    inside = env.get("TAU_RUN_ID", environ) == run_id
    run = {"run_id": run_id, "shard_id": env.get("TAU_SHARD_ID", environ) if inside else None,
           "attempt_id": env.get("TAU_ATTEMPT_ID", environ) if inside else None}
    for key, pattern in (("run_id", r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z"), ("shard_id", r"^shard-[0-9]{5,}\Z"),
                         ("attempt_id", r"^attempt-[0-9]{4,}\Z")):
        if run[key] is not None and not re.match(pattern, run[key]):
            source = "--run" if key == "run_id" else f"TAU_{key.upper()}"
            raise BadInput(f"{source} {run[key]!r} is not a {key.replace('_', ' ')}")
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


def _acknowledge(tree, tau, generation: str, files: list, index_entry: dict | None, run: dict | None,
                 command: list[str] | None) -> tuple[dict, bytes, bool]:
    """Steps 3 and 4, under `.tau/locks/seal.lock`: one sealer of a tree at a time, so it alone removes what a
    killed sealer left (temp files), and the no-link publication (check, then rename) is exact. (record, its
    bytes, whether the manifest was created)."""
    tau.clean_debris("")
    tau.clean_debris("bundles")
    existing = tree.read_bytes(mf.manifest_name(generation))
    if existing is not None:
        record = mf.decode(existing, generation)
        if (record["files"], record["index"], record["run"]) != (files, index_entry, run):
            raise Conflict(f"generation {generation!r} is already sealed with another manifest; a generation is "
                           "immutable: choose a new one", generation=generation)
        data = existing
    else:
        producer = {"host": socket.gethostname()[:255], "uid": os.geteuid(), "tau_version": __version__,
                    "command": command or None}
        record = mf.build(generation, files, run, producer, index_entry)
        data = jsonio.canonical(record)
    created = _write_once(tree, mf.manifest_name(generation), data)
    failpoints.hit("seal.manifest_written")
    _write_once(tree, mf.marker_name(generation), mf.marker_text(generation, jsonio.sha256_hex(data)))
    failpoints.hit("seal.marker_written")
    tree.rename_over(mf.CURRENT, mf.current_text(generation))
    failpoints.hit("seal.current_replaced")
    return record, data, created


def seal(root: str, generation: str, run: dict | None = None, index: str | None = None,
         command: list[str] | None = None, upload: str | None = None) -> dict:
    mf.check_generation(generation)
    if index is not None:
        mf.safe_relpath(index)
    if upload is not None:
        from taulib.bundle import endpoint

        endpoint.parse(upload)  # refused before the payload runs and before any request
    if command:
        status = run_payload(command)
        if status != 0:
            raise PayloadFailed(f"the payload {command[0]!r} exited with status {status}; nothing sealed", status,
                                payload_status=status)
    with mf.open_tree(root) as tree:
        root = tree.path
        files = mf.describe(tree)  # steps 1 and 2 only read: a refusal leaves the tree as it was
        index_entry = _index_entry(tree, index, generation)
        with tree.subtree(mf.TAU_DIR, create=True) as tau, locks.hold(tau, "seal"):
            record, data, created = _acknowledge(tree, tau, generation, files, index_entry, run, command)
    result = {"kind": "tau.bundle-seal", "schema_version": 1, "root": root, "generation": generation,
              "created": created, "manifest_sha256": jsonio.sha256_hex(data), "files": record["totals"]["files"],
              "bytes": record["totals"]["bytes"], "index": record["index"], "run": record["run"], "uploaded": None}
    if upload is not None:
        from taulib.bundle import blob

        result["uploaded"] = blob.upload_bundle(root, record, data, upload)
    return result
