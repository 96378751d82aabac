"""The safe-filesystem layer: a folder tree reached through one descriptor, never through a symlink below it.

Reads: folders and files below the tree's root. Writes: folders (mkdir 0700 -> fchmod 0700 -> fsync of the parent;
failpoint store.mkdir.created) and files by the protocols of `taulib.fs.atomic`. Everything tau touches on disk
(run directories, bundle trees, collection stages and destinations, fetch stages) goes through a `Tree`.
A tree's `modes` are those of the folders it makes and of the new files `create` and `write_new` make: private
(0700, 0600) unless opened with others (a group-readable collection's stage: 0750, 0640), set by fchmod on the new
descriptor (the umask never narrows them, no path is followed); records (`link_new`, `rename_over`, `open_own`) are
always private.
Promises:
- The root is opened once; every folder below it is opened from its parent with O_DIRECTORY|O_NOFOLLOW and every
  file with O_NOFOLLOW (`taulib.fs.openat`, where the one refusal of a symlink is), so nothing below the root is
  reached through a symlink.
- A private tree (a run directory) accepts only folders of ours that group and others cannot write, and reads only
  records that are regular files of ours that others cannot write.
- Paths are relative and `/`-separated, never with a `.`, `..` or NUL segment; a tree whose names follow a grammar
  (a run directory) checks it in `_check_segment`.
- Folder descriptors are cached (no more than MAX_CACHED_DIRS are kept between calls; a descriptor in use by a call
  is never closed under it) and all are closed with the tree. A tree may be shared by threads: its calls take
  turns.
"""

from __future__ import annotations

import functools
import os
import stat
import threading
from collections import OrderedDict
from typing import Callable, Concatenate, ParamSpec, Self, TypeVar

from taulib.errors import IOFailure, NotFound, Refused
from taulib.fs import atomic, openat
from taulib.fs.openat import PRIVATE, Modes

MAX_CACHED_DIRS = 128  # folder descriptors kept open between calls (a run can have 100,000s of folders)
_T = TypeVar("_T", bound="Tree")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _operation(method: Callable[Concatenate[_T, _P], _R]) -> Callable[Concatenate[_T, _P], _R]:
    """Public Tree calls: the folder-descriptor cache is trimmed only when no call is in progress, so a descriptor a
    call is using is never closed under it."""

    @functools.wraps(method)
    def wrapper(self: _T, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:  # threads share a tree (bundle transfers): one call at a time touches its cache
            if self._depth == 0 and len(self._dirs) > MAX_CACHED_DIRS:
                self._trim()
            self._depth += 1
            try:
                return method(self, *args, **kwargs)
            finally:
                self._depth -= 1

    return wrapper


class Tree:
    """A folder tree reached through the descriptor `fd` of its root (which the tree owns and closes).

    `private` trees hold only tau's own private files (run directories); `context` ends the refusal of a symlink
    ("... tau never follows one inside a run"); `what` names the tree in `walk`'s refusals ("bundle tree"); `modes`
    are those of the folders it makes and the files `create` and `write_new` make.
    """

    def __init__(self, fd: int, path: str, *, private: bool = False, context: str = "", what: str = "tree",
                 modes: Modes = PRIVATE) -> None:
        self.fd = fd
        self.path = path
        self.private = private
        self.context = context
        self.what = what
        self.modes = modes
        self._dirs: OrderedDict[str, int] = OrderedDict({"": fd})
        self._depth = 0
        self._lock = threading.RLock()

    @classmethod
    def open(cls, path: str, *, label: str, create: bool = False, private: bool = False, follow: bool = False,
             context: str = "", what: str = "tree") -> Tree:
        fd, path_abs = openat.open_root(path, label=label, create=create, private=private, follow=follow,
                                        context=context)
        return cls(fd, path_abs, private=private, context=context, what=what)

    # -- lifetime -----------------------------------------------------------------------------------------------
    def close(self) -> None:
        for fd in self._dirs.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._dirs = OrderedDict()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _trim(self) -> None:
        while len(self._dirs) > MAX_CACHED_DIRS // 2:
            key = next(k for k in self._dirs if k != "")
            os.close(self._dirs.pop(key))

    # -- names --------------------------------------------------------------------------------------------------
    def show(self, rel: str) -> str:
        """The path of `rel` for messages."""
        return os.path.join(self.path, rel) if rel else self.path

    def _check_segment(self, segment: str, rel: str) -> None:
        if segment in (".", "..") or "\0" in segment:
            raise Refused(f"path {rel!r} escapes its folder or is not normalised", path=rel)

    def _segments(self, rel: str) -> list[str]:
        parts = [p for p in rel.split("/") if p]
        for part in parts:
            self._check_segment(part, rel)
        return parts

    def _leaf(self, rel: str, create: bool = False) -> tuple[int, str]:
        """(descriptor of the folder holding `rel`, its last name)."""
        folder, _, name = rel.rpartition("/")
        if not name:
            raise Refused(f"path {rel!r} names no file", path=rel)
        self._check_segment(name, rel)
        return self.folder(folder, create), name

    # -- folders ------------------------------------------------------------------------------------------------
    @_operation
    def folder(self, rel: str, create: bool = False) -> int:
        """Descriptor of the folder `rel` (the tree keeps it), created component by component if asked (with the
        tree's folder mode)."""
        key = "/".join(self._segments(rel))
        fd = self._dirs.get(key)
        if fd is not None:
            self._dirs.move_to_end(key)
            return fd
        parent_key, _, name = key.rpartition("/")
        parent_fd = self.folder(parent_key, create)
        fd = self._open_dir(parent_fd, name, create, self.show(key))
        self._dirs[key] = fd
        return fd

    def _open_dir(self, parent_fd: int, name: str, create: bool, where: str, mode: int | None = None) -> int:
        return openat.open_dir(parent_fd, name, create=create, where=where, private=self.private,
                               context=self.context, mode=self.modes.folders if mode is None else mode)

    def _refused(self, exc: OSError, parent_fd: int, name: str, where: str, expected: str) -> Exception:
        return openat.refused(exc, parent_fd, name, where, self.context, expected)

    @_operation
    def has_folder(self, rel: str) -> bool:
        try:
            self.folder(rel)
            return True
        except NotFound:
            return False

    @_operation
    def make_folders(self, rel: str) -> None:
        self.folder(rel, create=True)

    @_operation
    def subtree(self, rel: str, create: bool = False, what: str | None = None, modes: Modes | None = None) -> Tree:
        """The folder `rel` as a tree of its own (with its own descriptor: close it, or use it in a with), making
        its folders and files with `modes` (default this tree's); the folder `rel` itself too when this call makes
        it (one that exists keeps its mode: a tree never widens a folder it did not make)."""
        modes = modes or self.modes
        key = "/".join(self._segments(rel))
        if create and key and key not in self._dirs and modes != self.modes:
            parent_key, _, name = key.rpartition("/")
            self._dirs[key] = self._open_dir(self.folder(parent_key, create), name, True, self.show(key),
                                             modes.folders)
        fd = os.dup(self.folder(rel, create))
        return Tree(fd, self.show(rel), private=self.private, context=self.context, what=what or self.what,
                    modes=modes)

    @_operation
    def listdir(self, rel: str = "") -> list[str]:
        """Names in folder `rel`, sorted. A missing folder is empty."""
        try:
            fd = self.folder(rel)
        except NotFound:
            return []
        return sorted(os.listdir(fd))

    @_operation
    def scan(self, rel: str = "") -> list[tuple[str, str]]:
        """(name, type) of every entry of folder `rel`, sorted; type is file, dir, symlink or other."""
        fd = self.folder(rel)
        out = []
        with os.scandir(fd) as entries:
            for entry in entries:
                out.append((entry.name, openat.kind(entry.stat(follow_symlinks=False).st_mode)))
        return sorted(out)

    @_operation
    def walk(self, rel: str = "", skip: frozenset[str] = frozenset()) -> list[tuple[str, int]]:
        """(path relative to `rel`, size) of every regular file below folder `rel`, sorted, not descending into
        the top-level names in `skip`. A symlink or a special file anywhere below is refused, never followed."""
        out: list[tuple[str, int]] = []
        openat.walk(self.folder(rel), "", out, skip, self.what, self.context)
        return sorted(out)

    @_operation
    def entries(self, rel: str = "") -> list[tuple[str, os.stat_result]]:
        """(path relative to `rel`, lstat) of every entry below folder `rel` (folders, files, symlinks, anything),
        sorted; folders are descended into, through no symlink (`openat.entries`)."""
        return openat.entries(self.folder(rel))

    @_operation
    def remove_tree(self, rel: str) -> None:
        """Remove folder `rel` and everything in it, following no symlink (one found there is unlinked, never
        followed); missing is done. The parent folder is fsynced."""
        parent, name = self._leaf(rel)
        key = "/".join(self._segments(rel))
        for k in [k for k in self._dirs if k == key or k.startswith(key + "/")]:
            os.close(self._dirs.pop(k))
        openat.rmtree_at(parent, name)
        os.fsync(parent)

    @_operation
    def sync_folder(self, rel: str = "") -> None:
        """fsync folder `rel`: the entries made in it (by a program tau ran, say) survive a power cut."""
        os.fsync(self.folder(rel))

    @_operation
    def sync_folders(self, paths: list[str]) -> None:
        """fsync every folder on the way to each of `paths` (relative), the root included, deepest first: the
        files' names and their folders' names survive a power cut."""
        folders = {"/".join(p.split("/")[:i]) for p in paths for i in range(p.count("/") + 1)}
        for rel in sorted(folders, key=lambda f: f.count("/") + bool(f), reverse=True):
            os.fsync(self.folder(rel))

    @_operation
    def remove_file(self, rel: str) -> bool:
        """Unlink the entry `rel` (a symlink itself, never what it points to; a folder is refused with OSError);
        True when it was there. Its folder is not fsynced: the caller does that once after a batch of removals."""
        dfd, name = self._leaf(rel)
        try:
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            return False
        return True

    @_operation
    def remove_empty(self, rel: str) -> None:
        """Remove the empty folder `rel` (OSError when it is not empty)."""
        parent, name = self._leaf(rel)
        key = "/".join(self._segments(rel))
        if key in self._dirs:
            os.close(self._dirs.pop(key))
        os.rmdir(name, dir_fd=parent)

    # -- files --------------------------------------------------------------------------------------------------
    @_operation
    def lstat(self, rel: str) -> os.stat_result | None:
        """The entry `rel` itself (a symlink is not followed), or None when it (or its folder) does not exist."""
        try:
            dfd, name = self._leaf(rel)
        except NotFound:
            return None
        try:
            return os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def exists(self, rel: str) -> bool:
        return self.lstat(rel) is not None

    @_operation
    def open_read(self, rel: str) -> int:
        """A read descriptor of the regular file `rel` (of ours, in a private tree); NotFound when missing."""
        dfd, name = self._leaf(rel)
        where = self.show(rel)
        try:
            fd = os.open(name, openat.READ, dir_fd=dfd)
        except FileNotFoundError:
            raise NotFound(f"{where} does not exist", path=where) from None
        except OSError as exc:
            raise self._refused(exc, dfd, name, where, "file") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (self.private and st.st_uid != os.geteuid()):
            os.close(fd)
            raise Refused(f"{where} is not a regular file" + (" of ours" if self.private else ""), path=where)
        return fd

    def read_tail(self, rel: str, size: int) -> bytes:
        """The last `size` bytes of the regular file `rel` (all of it when shorter), through `open_read` (NotFound,
        Refused): the end of an output file that may be larger than anything read whole."""
        fd = self.open_read(rel)
        try:
            return os.pread(fd, size, max(0, os.fstat(fd).st_size - size))
        finally:
            os.close(fd)

    @_operation
    def read_bytes(self, rel: str, limit: int | None = None) -> bytes | None:
        """The bytes of the regular file `rel`, or None when it (or its folder) does not exist. In a private tree
        the file must be ours and not writable by others."""
        try:
            dfd, name = self._leaf(rel)
        except NotFound:
            return None
        try:
            fd = os.open(name, openat.READ, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            where = self.show(rel)
            refused = self._refused(exc, dfd, name, where, "file")
            raise (IOFailure(f"cannot open {where}: {exc.strerror}", path=where) if refused is exc else refused) \
                from None
        try:
            return openat.read_opened(fd, self.show(rel), self.private, limit)
        finally:
            os.close(fd)

    @_operation
    def open_own(self, rel: str, flags: int, what: str) -> int:
        """A descriptor of the file `rel`, created 0600 when missing (folders too), never through a symlink; it
        must be a regular file of ours (log and lock files)."""
        dfd, name = self._leaf(rel, create=True)
        where = self.show(rel)
        try:
            fd = os.open(name, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        except OSError as exc:
            raise self._refused(exc, dfd, name, where, "file") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            os.close(fd)
            raise Refused(f"{what} {where} is not a regular file of ours", path=where)
        return fd

    def open_lock_file(self, rel: str) -> int:
        """A descriptor of a sidecar lock file (created 0600, never through a symlink)."""
        return self.open_own(rel, os.O_RDWR, "lock file")

    @_operation
    def create(self, rel: str, readable: bool = False) -> int:
        """A new file `rel` of the tree's file mode (0600 unless the tree was opened with others), open for writing,
        and reading when asked (O_EXCL), its folders made as needed."""
        dfd, name = self._leaf(rel, create=True)
        return atomic.create(dfd, name, readable, self.modes.files)

    @_operation
    def write_new(self, rel: str, data: bytes) -> None:
        """A new file `rel` of the tree's file mode written whole and fsynced (see `atomic.write_new`)."""
        dfd, name = self._leaf(rel, create=True)
        atomic.write_new(dfd, name, data, self.modes.files)

    @_operation
    def link_new(self, rel: str, data: bytes) -> bool:
        """Publish `rel` with the immutable protocol; False when the name already existed."""
        dfd, name = self._leaf(rel, create=True)
        return atomic.link_new(dfd, name, data)

    @_operation
    def rename_over(self, rel: str, data: bytes) -> None:
        """Replace `rel` with the mutable protocol."""
        dfd, name = self._leaf(rel, create=True)
        try:
            atomic.rename_over(dfd, name, data)
        except IsADirectoryError:
            raise Refused(f"{self.show(rel)} is a folder", path=self.show(rel)) from None

    @_operation
    def replace_beside(self, name: str, data: bytes) -> None:
        """Replace the file `name` in the root folder (one the tree does not own: a status file beside a run) with
        the mutable protocol, its temp file named after it (`atomic.beside_temp`); the debris of an earlier writer
        of that name is removed first (the caller is its only writer: it holds the lock that says so)."""
        if not name or "/" in name:
            raise Refused(f"{name!r} is not a file name", path=name)
        self._check_segment(name, name)
        try:
            atomic.clean_beside(self.fd, name)
            atomic.rename_over(self.fd, name, data, atomic.beside_temp(name))
        except IsADirectoryError:
            raise Refused(f"{self.show(name)} is a folder", path=self.show(name)) from None

    @_operation
    def rename_file(self, src: str, name: str) -> None:
        """Rename the file `src` over `name` in its own folder (a file made beside the one it replaces), fsynced."""
        dfd, sname = self._leaf(src)
        os.rename(sname, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        os.fsync(dfd)

    @_operation
    def clean_debris(self, rel: str) -> None:
        """Remove crash debris from folder `rel` (the caller holds the lock that owns it)."""
        atomic.clean_debris(self.folder(rel, create=True))

    @_operation
    def same_file(self, rel: str, fd: int) -> bool:
        """True when `rel` still names the file open as `fd` (used after taking a lock)."""
        st = self.lstat(rel)
        fst = os.fstat(fd)
        return st is not None and (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)
