"""The one writer: every byte tau puts into a run directory goes through this module.

Reads and writes are descriptor-bound: the run directory is opened once, and every folder below it is reached with
`openat(O_DIRECTORY|O_NOFOLLOW)` from its parent, so no symlink anywhere inside a run is followed. Files are opened
with `O_NOFOLLOW` and checked after open (regular file, our owner, not writable by others).

Protocols (each step has a failpoint named in `taulib.failpoints`):
- immutable publish: temp file (O_EXCL, 0600) -> write -> fsync -> link(temp, name) -> unlink temp -> fsync folder.
  An existing name with identical bytes is an idempotent success; different bytes raise Conflict. A crash leaves
  the old state (no name) or the new one (name complete) plus a temp file.
- mutable replace: the record's `revision` must be exactly one more than the stored one (1 for a new record);
  temp -> write -> fsync -> rename over name -> fsync folder.
- mkdir: mkdirat 0700 -> fchmod 0700 -> fsync parent.
- debris: temp files are named `.tau.<16 hex>.tmp`. Before writing into a folder, the writer (who holds the lock
  that owns the folder) removes the temp files found there: one still linked to a record (same inode: a crash
  between link and unlink) and unlinked orphans. Nothing is removed by pattern alone: the exact temp grammar,
  our uid, a regular file, and the inode identity decide.

Every record is a dict with `kind` ("tau.<schema>") and `schema_version`; it is validated against its schema before
it is written and after it is read, and it must be in canonical form on disk.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import stat
from collections import OrderedDict

from taulib import failpoints, jsonio, schema
from taulib.errors import BadInput, Conflict, IOFailure, NotFound, Refused

MAX_RECORD_BYTES = 16 * 1024 * 1024
MAX_CACHED_DIRS = 128  # folder descriptors kept open between calls (a run can have 100,000s of folders)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP = re.compile(r"^\.tau\.[0-9a-f]{16}\.tmp\Z")  # \Z: "$" would also match before a final newline
_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def schema_of(kind: str) -> str:
    if not isinstance(kind, str) or not kind.startswith("tau."):
        raise BadInput(f"record kind {kind!r} is not a tau record kind")
    return kind[4:]


def _split(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p]
    for part in parts:
        if not _COMPONENT.match(part):
            raise Refused(f"path component {part!r} is not allowed inside a run directory", path=rel)
    return parts


def _operation(method):
    """Public RunDir calls: the folder-descriptor cache is trimmed only when no call is in progress, so a
    descriptor a call is using is never closed under it."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self._depth == 0 and len(self._dirs) > MAX_CACHED_DIRS:
            self._trim()
        self._depth += 1
        try:
            return method(self, *args, **kwargs)
        finally:
            self._depth -= 1

    return wrapper


class RunDir:
    """A run directory opened through a verified descriptor.

    `RunDir(path)` opens an existing directory; `RunDir(path, create=True)` creates it (0700) when missing, but its
    parent must exist. Use as a context manager or call `close()`.
    """

    def __init__(self, path: str, create: bool = False) -> None:
        self.path = os.path.abspath(path)
        parent, name = os.path.split(self.path)
        if not name:
            raise BadInput(f"run directory {path!r} is not a directory path")
        try:
            parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise NotFound(f"parent folder of run directory {path!r} does not exist", path=self.path) from None
        except NotADirectoryError:
            raise NotFound(f"parent of run directory {path!r} is not a folder", path=self.path) from None
        try:
            if create:
                self.fd = _open_child_dir(parent_fd, name, create=True, where=self.path)
            else:
                try:
                    self.fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
                except FileNotFoundError:
                    raise NotFound(f"run directory {path!r} does not exist", path=self.path) from None
                except NotADirectoryError:
                    # O_DIRECTORY|O_NOFOLLOW on a symlink fails with ENOTDIR on Linux, not ELOOP
                    if _is_symlink(parent_fd, name):
                        raise Refused(f"run directory {path!r} is a symlink; pass the real path",
                                      path=self.path) from None
                    raise NotFound(f"run directory {path!r} is not a folder", path=self.path) from None
                except OSError as exc:
                    if exc.errno == errno.ELOOP:
                        raise Refused(f"run directory {path!r} is a symlink; pass the real path",
                                      path=self.path) from None
                    raise
                _check_private_dir(self.fd, self.path)
        finally:
            os.close(parent_fd)
        self._dirs: OrderedDict[str, int] = OrderedDict({"": self.fd})
        self._depth = 0

    # -- lifetime -----------------------------------------------------------------------------------------------
    def close(self) -> None:
        for fd in self._dirs.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._dirs = OrderedDict()

    def _trim(self) -> None:
        while len(self._dirs) > MAX_CACHED_DIRS // 2:
            key = next(k for k in self._dirs if k != "")
            os.close(self._dirs.pop(key))

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- folders ------------------------------------------------------------------------------------------------
    @_operation
    def dir_fd(self, rel: str, create: bool = False) -> int:
        """Descriptor of the folder `rel` (relative to the run), created 0700 component by component if asked."""
        key = "/".join(_split(rel))
        fd = self._dirs.get(key)
        if fd is not None:
            self._dirs.move_to_end(key)
            return fd
        parent_key, _, name = key.rpartition("/")
        parent_fd = self.dir_fd(parent_key, create)
        fd = _open_child_dir(parent_fd, name, create, os.path.join(self.path, key))
        self._dirs[key] = fd
        return fd

    @_operation
    def has_dir(self, rel: str) -> bool:
        try:
            self.dir_fd(rel)
            return True
        except NotFound:
            return False

    @_operation
    def listdir(self, rel: str) -> list[str]:
        """Names in folder `rel`, sorted, without tau's temp files. Missing folder: empty list."""
        try:
            fd = self.dir_fd(rel)
        except NotFound:
            return []
        return sorted(n for n in os.listdir(fd) if not _TEMP.match(n))

    # -- reading ------------------------------------------------------------------------------------------------
    @_operation
    def read_bytes(self, rel: str) -> bytes | None:
        """Bytes of the regular file `rel`, or None when it does not exist."""
        folder, _, name = rel.rpartition("/")
        _split(name)
        try:
            dfd = self.dir_fd(folder)
        except NotFound:
            return None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused(f"{self._show(rel)} is a symlink; tau never follows one inside a run",
                              path=self._show(rel)) from None
            raise IOFailure(f"cannot open {self._show(rel)}: {exc.strerror}", path=self._show(rel)) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Refused(f"{self._show(rel)} is not a regular file", path=self._show(rel))
            if st.st_uid != os.geteuid() or st.st_mode & 0o022:
                raise Refused(f"{self._show(rel)} is writable by another user or not ours; refusing to trust it",
                              path=self._show(rel))
            if st.st_size > MAX_RECORD_BYTES:
                raise BadInput(f"{self._show(rel)} is larger than {MAX_RECORD_BYTES} bytes", path=self._show(rel))
            # one read of size+1 bytes sees the whole file and its end (reads cost ~0.1 ms each on some kernels)
            want = st.st_size + 1
            chunks = []
            while True:
                chunk = os.read(fd, want)
                if not chunk:
                    break
                chunks.append(chunk)
                if len(chunk) < want:
                    break
                want = 1 << 20
            return b"".join(chunks)
        finally:
            os.close(fd)

    @_operation
    def read(self, rel: str, kind: str | None = None) -> dict | None:
        """The validated record at `rel`, or None when absent.

        The record must be canonical, of `kind` when given, and valid against its schema.
        """
        data = self.read_bytes(rel)
        if data is None:
            return None
        return self.decode(rel, data, kind)

    def decode(self, rel: str, data: bytes, kind: str | None = None) -> dict:
        shown = self._show(rel)
        record = jsonio.loads(data, shown)
        if not isinstance(record, dict):
            raise BadInput(f"{shown} is not a JSON object", path=shown)
        if kind is not None and record.get("kind") != kind:
            raise BadInput(f"{shown} has kind {record.get('kind')!r}, expected {kind!r}", path=shown)
        schema.validate(record, schema_of(record.get("kind")), shown)  # type: ignore[arg-type]
        if jsonio.canonical(record) != data:
            raise BadInput(f"{shown} is not in canonical form; it was edited by hand or by another tool",
                           path=shown)
        return record

    @_operation
    def require(self, rel: str, kind: str) -> dict:
        record = self.read(rel, kind)
        if record is None:
            raise NotFound(f"{self._show(rel)} does not exist", path=self._show(rel))
        return record

    @_operation
    def exists(self, rel: str) -> bool:
        folder, _, name = rel.rpartition("/")
        try:
            dfd = self.dir_fd(folder)
        except NotFound:
            return False
        try:
            os.stat(name, dir_fd=dfd, follow_symlinks=False)
            return True
        except FileNotFoundError:
            return False

    # -- writing ------------------------------------------------------------------------------------------------
    @_operation
    def publish(self, rel: str, record: dict) -> bool:
        """Publish an immutable record. True when this call created it, False when identical bytes were there."""
        data = self._encode(rel, record)
        return self.publish_bytes(rel, data)

    @_operation
    def publish_bytes(self, rel: str, data: bytes) -> bool:
        folder, _, name = rel.rpartition("/")
        _split(name)
        dfd = self.dir_fd(folder, create=True)
        self._clean(dfd)
        if link_new(dfd, name, data):
            return True
        if self.read_bytes(rel) != data:
            raise Conflict(f"{self._show(rel)} already exists with different content; records are immutable",
                           path=self._show(rel))
        return False

    @_operation
    def replace(self, rel: str, record: dict) -> None:
        """Replace a mutable record whose `revision` must grow by exactly one (1 for a new record).

        The caller holds the lock that owns the record.
        """
        revision = record.get("revision")
        current = self.read(rel)
        expected = 1 if current is None else current["revision"] + 1
        if revision != expected:
            raise Conflict(f"{self._show(rel)} revision must be {expected}, not {revision!r}; another writer "
                           "changed it, or the update skips a revision", path=self._show(rel),
                           expected_revision=expected)
        if current is not None and current.get("kind") != record.get("kind"):
            raise Conflict(f"{self._show(rel)} holds a {current.get('kind')} record", path=self._show(rel))
        self.replace_bytes(rel, self._encode(rel, record))

    @_operation
    def replace_bytes(self, rel: str, data: bytes) -> None:
        folder, _, name = rel.rpartition("/")
        _split(name)
        dfd = self.dir_fd(folder, create=True)
        self._clean(dfd)
        rename_over(dfd, name, data)

    @_operation
    def open_append(self, rel: str) -> int:
        """A descriptor for appending to a log file (created 0600, never through a symlink)."""
        fd = self._open_own(rel, os.O_WRONLY | os.O_APPEND, "log file")
        os.fchmod(fd, 0o600)
        return fd

    @_operation
    def open_lock_file(self, rel: str) -> int:
        """A descriptor of a sidecar lock file (created 0600, never through a symlink)."""
        return self._open_own(rel, os.O_RDWR, "lock file")

    def _open_own(self, rel: str, flags: int, what: str) -> int:
        folder, _, name = rel.rpartition("/")
        _split(name)
        dfd = self.dir_fd(folder, create=True)
        fd = os.open(name, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            os.close(fd)
            raise Refused(f"{what} {self._show(rel)} is not a regular file of ours", path=self._show(rel))
        return fd

    @_operation
    def same_file(self, rel: str, fd: int) -> bool:
        """True when `rel` still names the file open as `fd` (used after taking a lock)."""
        folder, _, name = rel.rpartition("/")
        try:
            st = os.stat(name, dir_fd=self.dir_fd(folder), follow_symlinks=False)
        except (FileNotFoundError, NotFound):
            return False
        fst = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)

    @_operation
    def open_read(self, rel: str) -> int:
        """A read descriptor of a regular file of ours (bulk data: datasets), never through a symlink."""
        folder, _, name = rel.rpartition("/")
        _split(name)
        dfd = self.dir_fd(folder)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
        except FileNotFoundError:
            raise NotFound(f"{self._show(rel)} does not exist", path=self._show(rel)) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused(f"{self._show(rel)} is a symlink; tau never follows one inside a run",
                              path=self._show(rel)) from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            os.close(fd)
            raise Refused(f"{self._show(rel)} is not a regular file of ours", path=self._show(rel))
        return fd

    @_operation
    def scan(self, rel: str) -> list[tuple[str, str]]:
        """(name, type) of every entry of folder `rel`, sorted; type is file, dir, symlink or other."""
        fd = self.dir_fd(rel)
        out = []
        with os.scandir(fd) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                kind = ("file" if stat.S_ISREG(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode)
                        else "symlink" if stat.S_ISLNK(st.st_mode) else "other")
                out.append((entry.name, kind))
        return sorted(out)

    @_operation
    def mkdir(self, rel: str) -> None:
        self.dir_fd(rel, create=True)

    @_operation
    def remove_tree(self, rel: str) -> None:
        """Remove a folder of ours and everything in it, without following symlinks (for debris folders)."""
        folder, _, name = rel.rpartition("/")
        parent = self.dir_fd(folder)
        key = "/".join(_split(rel))
        fd = self._dirs.pop(key, None)
        if fd is not None:
            os.close(fd)
        for k in [k for k in self._dirs if k.startswith(key + "/")]:
            os.close(self._dirs.pop(k))
        rmtree_at(parent, name)
        os.fsync(parent)

    # -- internals ----------------------------------------------------------------------------------------------
    def _show(self, rel: str) -> str:
        return os.path.join(self.path, rel) if rel else self.path

    def _encode(self, rel: str, record: dict) -> bytes:
        shown = self._show(rel)
        schema.validate(record, schema_of(record.get("kind")), f"record for {shown}")  # type: ignore[arg-type]
        data = jsonio.canonical(record)
        if len(data) > MAX_RECORD_BYTES:
            raise BadInput(f"record for {shown} is larger than {MAX_RECORD_BYTES} bytes", path=shown)
        return data

    def _clean(self, dfd: int) -> None:
        """Remove crash debris (temp files) from a folder whose lock the caller holds."""
        uid = os.geteuid()
        with os.scandir(dfd) as entries:
            names = [e.name for e in entries if _TEMP.match(e.name)]
        for name in names:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
                continue
            if st.st_nlink > 1 and not _linked_record(dfd, st):
                continue  # linked somewhere we cannot see: leave it
            _unlink_quiet(name, dfd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_new(dfd: int, name: str, data: bytes) -> None:
    """A new private file `name` (O_EXCL, 0600, never through a symlink) in folder dfd, written whole and fsynced.
    For files inside a private stage that is published as a whole afterwards; the folder's fsync is the caller's."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_temp(dfd: int, data: bytes, protocol: str) -> str:
    """Step one of both protocols: a new temp file (O_EXCL, 0600) in folder dfd, written and fsynced."""
    temp = f".tau.{os.urandom(8).hex()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        os.fchmod(fd, 0o600)
        _write_all(fd, data)
        failpoints.hit(f"{protocol}.temp_written")
        os.fsync(fd)
        failpoints.hit(f"{protocol}.temp_synced")
    except BaseException:
        os.close(fd)
        _unlink_quiet(temp, dfd)
        raise
    os.close(fd)
    return temp


def link_new(dfd: int, name: str, data: bytes) -> bool:
    """The immutable publish protocol in folder dfd: True when `name` was created with `data`, False when the name
    already existed (its content is the caller's to compare)."""
    temp = write_temp(dfd, data, "store.publish")
    try:
        try:
            os.link(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            return False
        failpoints.hit("store.publish.linked")
    finally:
        _unlink_quiet(temp, dfd)
    failpoints.hit("store.publish.temp_removed")
    os.fsync(dfd)
    return True


def rename_over(dfd: int, name: str, data: bytes) -> None:
    """The mutable replace protocol in folder dfd (the caller checked the revision rule)."""
    temp = write_temp(dfd, data, "store.replace")
    try:
        os.rename(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        _unlink_quiet(temp, dfd)
        raise
    failpoints.hit("store.replace.renamed")
    os.fsync(dfd)


def _linked_record(dfd: int, temp_st: os.stat_result) -> bool:
    with os.scandir(dfd) as entries:
        for entry in entries:
            if _TEMP.match(entry.name):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) == (temp_st.st_dev, temp_st.st_ino):
                return True
    return False


def _open_child_dir(parent_fd: int, name: str, create: bool, where: str) -> int:
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise NotFound(f"{where} does not exist", path=where) from None
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
        except FileExistsError:
            pass
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        os.fchmod(fd, 0o700)
        failpoints.hit("store.mkdir.created")
        os.fsync(parent_fd)
        return fd
    except NotADirectoryError:
        if _is_symlink(parent_fd, name):  # what Linux reports for O_DIRECTORY|O_NOFOLLOW on a symlink
            raise Refused(f"{where} is a symlink; tau never follows one inside a run", path=where) from None
        raise Refused(f"{where} is not a folder", path=where) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{where} is a symlink; tau never follows one inside a run", path=where) from None
        raise
    _check_private_dir(fd, where)
    return fd


def _is_symlink(parent_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _check_private_dir(fd: int, where: str) -> None:
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        os.close(fd)
        raise Refused(f"{where} belongs to another user", path=where)
    if st.st_mode & 0o022:
        os.close(fd)
        raise Refused(f"{where} is writable by group or others; tau keeps runs private (chmod 700)", path=where)


def _unlink_quiet(name: str, dfd: int) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        pass


def rmtree_at(parent_fd: int, name: str) -> None:
    """Remove the folder NAME of the folder PARENT_FD with everything in it, following no symlink (a symlink or a
    file there is unlinked). Missing is done."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        return
    except (NotADirectoryError, OSError) as exc:
        if isinstance(exc, NotADirectoryError) or exc.errno == errno.ELOOP:
            _unlink_quiet(name, parent_fd)
            return
        raise
    try:
        for entry in os.listdir(fd):
            st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                rmtree_at(fd, entry)
            else:
                _unlink_quiet(entry, fd)
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except FileNotFoundError:
        pass
