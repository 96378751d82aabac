"""The one writer of run directories: records on top of the safe-filesystem layer (`taulib.fs.tree`).

Every byte tau puts into a run directory goes through a `RunDir`, a private `Tree` of the run: no symlink anywhere
inside a run is followed, every folder is ours and private (0700), every record ours and 0600.
Reads: records (validated, canonical JSON), logs and datasets as descriptors. Writes: records, by the protocols of
`taulib.fs.atomic`, after removing the crash debris of the folder (the caller holds the lock that owns it).
Promises:
- Every record is a dict with `kind` ("tau.<schema>") and `schema_version`; it is validated against its schema
  (`share/schemas`) before it is written and after it is read, and it must be in canonical form on disk.
- An immutable record is published without overwrite: identical bytes are an idempotent success (False), other
  bytes a Conflict (73). A mutable record's `revision` must be exactly one more than the stored one (1 for a new
  record), or the replace is a Conflict.
- Names inside a run follow one grammar, `[A-Za-z0-9][A-Za-z0-9._-]*`; anything else is refused (77).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from taulib import jsonio, schema
from taulib.errors import BadInput, Conflict, NotFound, Refused
from taulib.fs import atomic
from taulib.fs.openat import open_root
from taulib.fs.tree import Tree, _operation

if TYPE_CHECKING:
    from taulib.jsonio import Record

MAX_RECORD_BYTES = 16 * 1024 * 1024
_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def schema_of(kind: object) -> str:
    """The schema of a record of `kind` ("tau.run" -> "run"); BadInput for anything but a tau record kind."""
    if not isinstance(kind, str) or not kind.startswith("tau."):
        raise BadInput(f"record kind {kind!r} is not a tau record kind")
    return kind[4:]


def _in_place(rel: str, record: Record, shown: str) -> None:
    """Conflict when a record of an attempt lies in another attempt's folder (`shards/SHARD/attempts/ATTEMPT/...`
    holding a record whose shard_id or attempt_id is not SHARD or ATTEMPT): a folder renamed by hand would otherwise
    give the run another history. (A shard's own records, such as its winner, are checked where they are used.)"""
    parts = rel.split("/")
    if len(parts) < 5 or parts[0] != "shards" or parts[2] != "attempts":
        return
    for field, expected in (("shard_id", parts[1]), ("attempt_id", parts[3])):
        if field in record and record[field] != expected:
            raise Conflict(f"{shown} is the record of {record[field]}, not of {expected}, whose folder holds it; "
                           "the run was edited by hand or by another tool", path=shown)


class RunDir(Tree):
    """A run directory opened through a verified descriptor.

    `RunDir(path)` opens an existing directory; `RunDir(path, create=True)` creates it (0700) when missing, but its
    parent must exist. Use as a context manager or call `close()`.
    """

    def __init__(self, path: str, create: bool = False) -> None:
        fd, path_abs = open_root(path, label="run directory", create=create, private=True, context=" inside a run")
        super().__init__(fd, path_abs, private=True, context=" inside a run", what="run directory")

    def _check_segment(self, segment: str, rel: str) -> None:
        if not _COMPONENT.match(segment):
            raise Refused(f"path component {segment!r} is not allowed inside a run directory", path=rel)

    # -- reading ------------------------------------------------------------------------------------------------
    @_operation
    def listdir(self, rel: str = "") -> list[str]:
        """Names in folder `rel`, sorted, without tau's temp files. Missing folder: empty list."""
        return [n for n in super().listdir(rel) if not atomic.is_temp(n)]

    @_operation
    def has_debris(self, rel: str = "") -> bool:
        """Whether folder `rel` holds a temp file (a crashed writer's, or one being written now)."""
        return any(atomic.is_temp(n) for n in super().listdir(rel))

    @_operation
    def read_bytes(self, rel: str, limit: int | None = MAX_RECORD_BYTES) -> bytes | None:
        return super().read_bytes(rel, limit)

    @_operation
    def read(self, rel: str, kind: str | None = None) -> Record | None:
        """The validated record at `rel`, or None when absent. It must be canonical, of `kind` when given, and
        valid against its schema."""
        data = self.read_bytes(rel)
        if data is None:
            return None
        return self.decode(rel, data, kind)

    def decode(self, rel: str, data: bytes, kind: str | None = None) -> Record:
        shown = self.show(rel)
        record = jsonio.loads(data, shown)
        if not isinstance(record, dict):
            raise BadInput(f"{shown} is not a JSON object", path=shown)
        if kind is not None and record.get("kind") != kind:
            raise BadInput(f"{shown} has kind {record.get('kind')!r}, expected {kind!r}", path=shown)
        schema.validate(record, schema_of(record.get("kind")), shown)
        if jsonio.canonical(record) != data:
            raise BadInput(f"{shown} is not in canonical form; it was edited by hand or by another tool",
                           path=shown)
        _in_place(rel, record, shown)
        return record

    @_operation
    def require(self, rel: str, kind: str) -> Record:
        record = self.read(rel, kind)
        if record is None:
            raise NotFound(f"{self.show(rel)} does not exist", path=self.show(rel))
        return record

    # -- writing ------------------------------------------------------------------------------------------------
    @_operation
    def publish(self, rel: str, record: Record) -> bool:
        """Publish an immutable record. True when this call created it, False when identical bytes were there."""
        return self.publish_bytes(rel, self._encode(rel, record))

    @_operation
    def publish_bytes(self, rel: str, data: bytes) -> bool:
        self.clean_debris(rel.rpartition("/")[0])
        if self.link_new(rel, data):
            return True
        if self.read_bytes(rel) != data:
            raise Conflict(f"{self.show(rel)} already exists with different content; records are immutable",
                           path=self.show(rel))
        return False

    @_operation
    def replace(self, rel: str, record: Record) -> None:
        """Replace a mutable record whose `revision` must grow by exactly one (1 for a new record). The caller
        holds the lock that owns the record."""
        revision = record.get("revision")
        current = self.read(rel)
        expected = 1 if current is None else current["revision"] + 1
        if revision != expected:
            raise Conflict(f"{self.show(rel)} revision must be {expected}, not {revision!r}; another writer "
                           "changed it, or the update skips a revision", path=self.show(rel),
                           expected_revision=expected)
        if current is not None and current.get("kind") != record.get("kind"):
            raise Conflict(f"{self.show(rel)} holds a {current.get('kind')} record", path=self.show(rel))
        self.replace_bytes(rel, self._encode(rel, record))

    @_operation
    def replace_bytes(self, rel: str, data: bytes) -> None:
        self.clean_debris(rel.rpartition("/")[0])
        self.rename_over(rel, data)

    @_operation
    def open_append(self, rel: str) -> int:
        """A descriptor for appending to a log file (created 0600, never through a symlink)."""
        fd = self.open_own(rel, os.O_WRONLY | os.O_APPEND, "log file")
        os.fchmod(fd, 0o600)
        return fd

    @_operation
    def _encode(self, rel: str, record: Record) -> bytes:
        shown = self.show(rel)
        schema.validate(record, schema_of(record.get("kind")), f"record for {shown}")
        data = jsonio.canonical(record)
        if len(data) > MAX_RECORD_BYTES:
            raise BadInput(f"record for {shown} is larger than {MAX_RECORD_BYTES} bytes", path=shown)
        return data
