"""Candidate datasets: describing what an attempt produced, and verifying it again before it wins.

Reads: the files of an attempt's dataset folder (through the run's RunDir: never through a symlink). Writes:
nothing but their mode (0600, whatever the client's umask); `describe` fsyncs each file and the folder, so that a
manifest made from them never outlives their bytes after a power cut. Promises: a candidate holds only regular
`*.parquet` files of one schema; `verify` re-hashes every byte and compares it with the manifest before a winner is
published.

A client only has to write Parquet files into `$TAU_OUTPUT_DIR` and exit 0; tau builds the candidate manifest
itself: every file's relative path, size, sha256 and Parquet row count, and the digest of the shared Arrow schema
(`sha256` of the schema without metadata, serialised). Imports pyarrow, so only the in-allocation side, tau-winner
and tau-collect load this module.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import TYPE_CHECKING

from taulib import jsonio
from taulib.errors import BadInput, Conflict, Refused
from taulib.rules import fields as rules_fields
from taulib.rundir import layout, locks

if TYPE_CHECKING:
    import pyarrow as pa

    from taulib.jsonio import Record
    from taulib.rundir.records import RunDir
    from taulib.rundir.run import Run

_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.parquet$")
CHUNK = 1 << 20


def schema_digest(arrow_schema: pa.Schema) -> str:
    return hashlib.sha256(arrow_schema.remove_metadata().serialize().to_pybytes()).hexdigest()


def _hash_fd(fd: int) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(fd, CHUNK)
        if not chunk:
            break
        size += len(chunk)
        h.update(chunk)
    return size, h.hexdigest()


def _parquet_facts(fd: int, shown: str) -> tuple[int, str, list[dict[str, str]]]:
    """(rows, schema digest, fields) of a Parquet file."""
    import pyarrow.parquet as pq

    os.lseek(fd, 0, os.SEEK_SET)
    with os.fdopen(os.dup(fd), "rb") as fh:
        try:
            meta = pq.ParquetFile(fh).metadata
        except Exception as exc:  # pyarrow raises ArrowInvalid / OSError for a file that is not Parquet
            raise BadInput(f"{shown} is not a readable Parquet file: {exc}", path=shown) from None
        arrow = meta.schema.to_arrow_schema()
        return meta.num_rows, schema_digest(arrow), fields_of(arrow)


def fields_of(arrow_schema: pa.Schema) -> list[dict[str, str]]:
    """An Arrow schema's fields, spelt as the run's output schema spells them ({name, type as Arrow prints it})."""
    return [{"name": f.name, "type": str(f.type)} for f in arrow_schema]


def _open_own_file(run_dir: RunDir, shown: str) -> int:
    """A read descriptor of a dataset file that is the run's alone: a regular file of ours with no other name. A
    hard link to a file outside the run would let tau change (fchmod) or vouch for bytes that live elsewhere."""
    fd = run_dir.open_read(shown)
    st = os.fstat(fd)
    if st.st_nlink != 1:
        os.close(fd)
        raise Refused(f"{shown} has {st.st_nlink} names (a hard link); a candidate's files must be its own: write "
                      "them, do not link them", path=shown)
    return fd


def describe(run_dir: RunDir, dataset_rel: str) -> tuple[list[Record], str | None, list[dict[str, str]] | None]:
    """Files of a dataset folder as manifest entries, their common schema digest and their fields (None, None when
    the folder is empty)."""
    entries = run_dir.scan(dataset_rel)
    files: list[Record] = []
    digests: set[str] = set()
    fields = None
    for name, kind in entries:
        shown = f"{dataset_rel}/{name}"
        if kind != "file" or not _PART.match(name):
            raise BadInput(f"dataset {dataset_rel!r} holds {name!r} ({kind}); a candidate may hold only "
                           "*.parquet files", path=shown)
        fd = _open_own_file(run_dir, shown)
        try:
            os.fchmod(fd, 0o600)  # a candidate is as private as the run's records, whatever the client's umask
            size, sha = _hash_fd(fd)
            rows, digest, fields = _parquet_facts(fd, shown)
            os.fsync(fd)  # the client may not have: the manifest must never outlive the bytes it describes
        finally:
            os.close(fd)
        files.append({"path": name, "size": size, "sha256": sha, "rows": rows})
        digests.add(digest)
    if entries:
        run_dir.sync_folder(dataset_rel)  # and the files' names, made by the client, before the manifest names them
    if len(digests) > 1:
        raise BadInput(f"dataset {dataset_rel!r} mixes Parquet files of different schemas", path=dataset_rel)
    return files, (digests.pop() if digests else None), fields


def verify(run_dir: RunDir, manifest: Record) -> None:
    """Re-hash every file of a candidate and compare sizes, digests, row counts and the schema digest."""
    dataset = manifest["dataset"]
    present = {name for name, _ in run_dir.scan(dataset)}
    listed = {f["path"] for f in manifest["files"]}
    if present != listed:
        extra, missing = sorted(present - listed), sorted(listed - present)
        raise Conflict(f"dataset {dataset!r} does not match its manifest (missing {missing}, extra {extra})",
                       path=dataset)
    for entry in manifest["files"]:
        shown = f"{dataset}/{entry['path']}"
        fd = _open_own_file(run_dir, shown)
        try:
            size, sha = _hash_fd(fd)
            if (size, sha) != (entry["size"], entry["sha256"]):
                raise Conflict(f"{shown} changed after it was recorded (size {size}, expected {entry['size']}; "
                               "sha256 differs)" if size != entry["size"] else
                               f"{shown} changed after it was recorded (sha256 differs)", path=shown)
            rows, digest, _ = _parquet_facts(fd, shown)
        finally:
            os.close(fd)
        if rows != entry["rows"]:
            raise Conflict(f"{shown} has {rows} rows, its manifest says {entry['rows']}", path=shown)
        if digest != manifest["schema_digest"]:
            raise Conflict(f"{shown} has a schema other than the manifest's", path=shown)


def run_schema(run: Run) -> Record | None:
    """The run's output schema record (schema.json), or None until it is fixed."""
    return run.dir.read(layout.SCHEMA, "tau.output-schema")


def fix_schema(run: Run, fields: list[dict[str, str]], fixed_by: dict[str, str] | None) -> Record:
    """Record the run's output schema once (immutable; the first to publish it fixes it) and return the record that
    stands, which may be another's."""
    record: Record = {"kind": "tau.output-schema", "schema_version": 1, "run_id": run.run_id, "fields": fields,
              "fixed_by": fixed_by, "fixed_at": jsonio.now_rfc3339()}
    with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "root"):
        existing = run_schema(run)
        if existing is not None:
            return existing
        run.dir.publish(layout.SCHEMA, record)
        return record


def footer_fields(fd: int, shown: str) -> list[dict[str, str]]:
    """The fields of a Parquet file, from its footer alone, spelt as the run's schema spells them (BadInput when it
    is not a readable Parquet file)."""
    return _parquet_facts(fd, shown)[2]


def schema_problem(run: Run, sid: str, aid: str, fields: list[dict[str, str]]) -> str | None:
    """Why a complete candidate's columns cannot join the run's (naming the fields that differ), or None. The first
    complete candidate of a run without a declared schema fixes it."""
    return columns_problem(run_schema(run) or fix_schema(run, fields, {"shard_id": sid, "attempt_id": aid}), fields)


def columns_problem(record: Record, fields: list[dict[str, str]]) -> str | None:
    """Why `fields` cannot join the run's output schema `record` (naming the fields that differ), or None: the rule
    a winner is held to, also applied to each file while its client runs (`lifecycle.drift`)."""
    found = rules_fields.differences(record["fields"], fields)
    if not found:
        return None
    source = ("the plan" if record["fixed_by"] is None
              else f"{record['fixed_by']['shard_id']}/{record['fixed_by']['attempt_id']}")
    return (f"the client wrote columns other than the run's output schema (fixed by {source}): "
            f"{rules_fields.describe(found)}")
