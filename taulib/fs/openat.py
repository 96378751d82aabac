"""Opening one folder or file relative to its parent, never through a symlink: the steps under `fs.tree.Tree`.

Reads: one directory entry at a time. Writes: folders (mkdir 0700 -> fchmod 0700 -> fsync of the parent; failpoint
store.mkdir.created; another mode when the caller's tree asks for one) and removals of whole folders of ours.
Promises: every open is relative to a folder descriptor, with O_NOFOLLOW (and O_DIRECTORY for folders); `refused` is the
one place that recognises a symlink where a folder or a file was expected (Linux reports ELOOP, or ENOTDIR for
O_DIRECTORY|O_NOFOLLOW) and turns it into a refusal (exit 77). Nothing outside `taulib.fs` opens with these flags.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import NamedTuple

from taulib import failpoints
from taulib.errors import BadInput, NotFound, Refused
from taulib.fs import atomic

DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
CHUNK = 1 << 20  # bytes read at a time past a file's first read


class Modes(NamedTuple):
    """The permission bits of the folders and of the files a tree makes (`Tree.modes`)."""
    folders: int
    files: int


PRIVATE = Modes(0o700, 0o600)


def refused(exc: OSError, parent_fd: int, name: str, where: str, context: str, expected: str) -> Exception:
    """What an open of `name` that failed with `exc` means: a Refused for a symlink (or a file where a folder was
    expected), else the error itself."""
    if is_link(exc, parent_fd, name):
        return Refused(f"{where} is a symlink; tau never follows one{context}", path=where)
    if expected == "folder" and exc.errno == errno.ENOTDIR:
        return Refused(f"{where} is not a folder", path=where)
    return exc


def open_dir(parent_fd: int, name: str, *, create: bool, where: str, private: bool, context: str,
             mode: int = 0o700) -> int:
    """The descriptor of folder `name` in `parent_fd` (made `mode` when missing and `create`; one that exists keeps
    its own); NotFound otherwise."""
    try:
        fd = os.open(name, DIR, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise NotFound(f"{where} does not exist", path=where) from None
        return make_dir(parent_fd, name, where, private, context, mode)
    except OSError as exc:
        raise refused(exc, parent_fd, name, where, context, "folder") from None
    if private:
        check_private_dir(fd, where)
    return fd


def walk(dfd: int, prefix: str, out: list[tuple[str, int]], skip: frozenset[str], what: str, context: str) -> None:
    """Append (path, size) of every regular file below folder `dfd` to `out`; a symlink or a special file is
    refused, never followed. `skip` names top-level entries not to descend into."""
    for name in sorted(os.listdir(dfd)):
        if name in skip:
            continue
        rel = f"{prefix}{name}"
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            sub = open_dir(dfd, name, create=False, where=rel, private=False, context=context)
            try:
                walk(sub, rel + "/", out, frozenset(), what, context)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            out.append((rel, st.st_size))
        elif stat.S_ISLNK(st.st_mode):
            raise Refused(f"the {what} holds a symlink {rel!r}; tau never follows one: replace it by the file",
                          path=rel)
        else:
            raise Refused(f"the {what} holds {rel!r}, which is not a regular file or folder", path=rel)


def open_root(path: str, *, label: str, create: bool = False, private: bool = False, follow: bool = False,
              context: str = "") -> tuple[int, str]:
    """(descriptor, absolute path) of the folder PATH, named `label` in messages ("run directory"). Its parents
    are the caller's own path and are followed; the folder itself is followed only with `follow` (a tree the user
    names, such as a bundle folder), never when it is a run directory."""
    path_abs = os.path.abspath(path)
    if follow:
        return _open_followed(path_abs, f"{label} {path!r} does not exist", f"{label} {path!r} is not a folder"), \
            path_abs
    parent, name = os.path.split(path_abs)
    if not name:
        raise BadInput(f"{label} {path!r} is not a directory path")
    parent_fd = _open_followed(parent, f"parent folder of {label} {path!r} does not exist",
                               f"parent of {label} {path!r} is not a folder", path_abs)
    try:
        try:
            fd = os.open(name, DIR, dir_fd=parent_fd)
        except FileNotFoundError:
            if not create:
                raise NotFound(f"{label} {path!r} does not exist", path=path_abs) from None
            return make_dir(parent_fd, name, path_abs, private, context), path_abs
        except OSError as exc:
            if is_link(exc, parent_fd, name):
                raise Refused(f"{label} {path!r} is a symlink; pass the real path", path=path_abs) from None
            if exc.errno == errno.ENOTDIR:
                raise NotFound(f"{label} {path!r} is not a folder", path=path_abs) from None
            raise
        if private:
            check_private_dir(fd, path_abs)
        return fd, path_abs
    finally:
        os.close(parent_fd)


def open_named_file(path: str, label: str) -> int | None:
    """A descriptor (O_NONBLOCK: a FIFO never blocks) of the regular file the user names by PATH, or None when it
    does not exist. The folders leading to it are the user's path and are followed; the file itself never is: a
    symlink, a FIFO, a folder or a device is Refused, named `label` ("metrics file")."""
    try:
        fd = os.open(path, READ)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{label} {path!r} is a symlink; tau never follows one: name the file itself",
                          path=path) from None
        raise Refused(f"{label} {path!r} cannot be read ({exc.strerror})", path=path) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Refused(f"{label} {path!r} is not a regular file", path=path)
    return fd


def open_regular(path: str) -> int:
    """A read descriptor of the regular file `path` (the folders leading to it followed, the file itself never):
    OSError as open(2) gives it (ELOOP for a symlink), ValueError for what is not a regular file."""
    fd = os.open(path, READ)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError("is not a regular file")
    return fd


def _open_followed(path: str, missing: str, not_folder: str, shown: str | None = None) -> int:
    """A folder the caller names by path (symlinks in it followed), or NotFound with the message given."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotFound(missing, path=shown or path) from None
    except NotADirectoryError:
        raise NotFound(not_folder, path=shown or path) from None


def make_dir(parent_fd: int, name: str, where: str, private: bool, context: str, mode: int = 0o700) -> int:
    """The folder `name` made (or found: made meanwhile), its mode set to `mode` through its descriptor (the umask
    narrows what mkdir makes), its parent fsynced."""
    try:
        os.mkdir(name, mode, dir_fd=parent_fd)
    except FileExistsError:
        pass
    try:
        fd = os.open(name, DIR, dir_fd=parent_fd)
    except OSError as exc:  # someone put a symlink there between our mkdir and our open
        if is_link(exc, parent_fd, name):
            raise Refused(f"{where} is a symlink; tau never follows one{context}", path=where) from None
        raise
    if private:
        check_private_dir(fd, where)
    os.fchmod(fd, mode)
    failpoints.hit("store.mkdir.created")
    os.fsync(parent_fd)
    return fd


def is_link(exc: OSError, parent_fd: int, name: str) -> bool:
    """Whether an open failed because `name` is a symlink: ELOOP for O_NOFOLLOW, ENOTDIR (what Linux reports for
    O_DIRECTORY|O_NOFOLLOW on a symlink) when the entry is one."""
    if exc.errno == errno.ELOOP:
        return True
    if exc.errno != errno.ENOTDIR:
        return False
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def check_private_dir(fd: int, where: str) -> None:
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        os.close(fd)
        raise Refused(f"{where} belongs to another user", path=where)
    if st.st_mode & 0o022:
        os.close(fd)
        raise Refused(f"{where} is writable by group or others; tau keeps runs private (chmod 700)", path=where)


def kind(mode: int) -> str:
    return ("file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode)
            else "symlink" if stat.S_ISLNK(mode) else "other")


def rmtree_at(parent_fd: int, name: str) -> None:
    try:
        fd = os.open(name, DIR, dir_fd=parent_fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):  # a file or a symlink: unlinked, never followed
            atomic.unlink_quiet(parent_fd, name)
            return
        raise
    try:
        for entry in os.listdir(fd):
            st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                rmtree_at(fd, entry)
            else:
                atomic.unlink_quiet(fd, entry)
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except FileNotFoundError:
        pass


def read_opened(fd: int, where: str, private: bool, limit: int | None) -> bytes:
    """The bytes of the file open on `fd` (shown as `where`): a regular file (Refused otherwise), in a `private`
    tree ours and not writable by others, of at most `limit` bytes (BadInput otherwise)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{where} is not a regular file", path=where)
    if private and (st.st_uid != os.geteuid() or st.st_mode & 0o022):
        raise Refused(f"{where} is writable by another user or not ours; refusing to trust it", path=where)
    if limit is not None and st.st_size > limit:
        raise BadInput(f"{where} is larger than {limit} bytes", path=where)
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
        want = CHUNK
    data = b"".join(chunks)
    if limit is not None and len(data) > limit:
        raise BadInput(f"{where} is larger than {limit} bytes", path=where)
    return data


def entries(root: int) -> list[tuple[str, os.stat_result]]:
    """(path, lstat) of every entry below the folder open on `root`, sorted; folders are descended into, each
    opened from its parent with O_NOFOLLOW (a symlink is listed, never followed)."""
    out: list[tuple[str, os.stat_result]] = []
    pending = [(os.dup(root), "")]
    while pending:
        fd, sub = pending.pop()
        try:
            for name in os.listdir(fd):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                path = f"{sub}/{name}" if sub else name
                out.append((path, st))
                if stat.S_ISDIR(st.st_mode):
                    pending.append((os.open(name, DIR, dir_fd=fd), path))
        finally:
            os.close(fd)
    return sorted(out, key=lambda item: item[0])
