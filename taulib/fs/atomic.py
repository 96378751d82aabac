"""The write protocols, one folder descriptor at a time (git's tempfile.c under lockfile.c).

Writes: files in the folder whose descriptor the caller passes; nothing else. Reads: that folder's listing, to
remove debris. Each step has a failpoint (`taulib.failpoints`), named after the protocol.
Promises:
- `write_new`: a new file (O_EXCL, 0600 or the mode asked for, set by fchmod on its descriptor whatever the umask;
  never through a symlink), written whole and fsynced; for files inside a stage that is published as a whole
  afterwards (the folder's fsync is the caller's).
- immutable publish, `link_new`: temp file (O_EXCL, 0600) -> write -> fsync -> link(temp, name) -> unlink temp ->
  fsync folder. The name is created complete or not at all; an existing name is never touched (False).
  On a filesystem without hard links (link fails EPERM, EOPNOTSUPP, ENOSYS: FUSE and SMB mounts, some object
  stores) the link step becomes renameat2(temp, name, RENAME_NOREPLACE), as atomic and as no-replace; where that
  is missing too (EINVAL, ENOSYS, or TAU_NO_RENAMEAT2=1) it becomes "name absent? then rename(temp, name)", which is
  exact because every writer of such a name holds the lock that owns its folder (the run directory's records), and
  for an artifact tree's manifest, which has no lock, only the same bytes may win twice.
- mutable replace, `rename_over`: temp -> write -> fsync -> rename over name -> fsync folder. A reader sees the old
  bytes or the new ones, never a mix.
- debris: temp files are named `.tau.<16 hex>.tmp`. `clean_debris` (run by the writer that holds the lock owning
  the folder) removes the temp files there: one still linked to a record (same inode: a crash between link and
  unlink) and unlinked orphans. Nothing is removed by pattern alone: the exact grammar, our uid, a regular file and
  the inode identity decide.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import TYPE_CHECKING

from taulib import env, failpoints

if TYPE_CHECKING:
    from typing import Callable, Literal

    _Renameat2 = Callable[[int, bytes, int, bytes, int], int]

_TEMP = r"^\.tau\.[0-9a-f]{16}\.tmp\Z"  # \Z: "$" would also match before a final newline; compiled on first use
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_RW = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
RENAME_NOREPLACE = 1
# errnos that mean "this filesystem cannot do that" (never "you may not" or "it exists"):
NO_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)})
NO_RENAMEAT2 = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)})
_renameat2: _Renameat2 | Literal[False] | None = None  # None: not looked up yet; False: libc has none


def _libc_renameat2() -> _Renameat2 | None:
    global _renameat2
    if _renameat2 is None:
        import ctypes  # on first use: a command that never renames without replacing does not pay for it

        libc = ctypes.CDLL(None, use_errno=True)
        fn = getattr(libc, "renameat2", None)
        if fn is not None:
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
        _renameat2 = fn or False
    return _renameat2 or None


def rename_noreplace(dfd: int, src: str, dst: str) -> bool | None:
    """renameat2(src, dst, RENAME_NOREPLACE) within folder dfd: True when renamed, False when dst exists, None
    when this filesystem (or libc) cannot, or TAU_NO_RENAMEAT2=1 says not to try. Other errors raise OSError."""
    fn = None if env.get("TAU_NO_RENAMEAT2") else _libc_renameat2()
    if fn is None:
        return None
    if fn(dfd, os.fsencode(src), dfd, os.fsencode(dst), RENAME_NOREPLACE) == 0:
        return True
    import ctypes

    err = ctypes.get_errno()
    if err in (errno.EEXIST, errno.ENOTEMPTY):
        return False
    if err in NO_RENAMEAT2:
        return None
    raise OSError(err, os.strerror(err), dst)


def is_temp(name: str) -> bool:
    return re.match(_TEMP, name) is not None


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def create(dfd: int, name: str, readable: bool = False, mode: int = 0o600) -> int:
    """A new file `name` in folder dfd, open for writing, and reading too when asked (O_EXCL, never through a
    symlink), of exactly `mode` (private by default): set on its descriptor, since the umask narrows what open
    makes."""
    fd = os.open(name, _NEW_FILE_RW if readable else _NEW_FILE, mode, dir_fd=dfd)
    try:
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        unlink_quiet(dfd, name)
        raise
    return fd


def write_new(dfd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    fd = create(dfd, name, mode=mode)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_temp(dfd: int, data: bytes, protocol: str, temp: str | None = None) -> str:
    """Step one of both protocols: a new temp file in folder dfd (named `temp`, by default `.tau.<16 hex>.tmp`),
    written and fsynced; its name."""
    temp = temp or f".tau.{os.urandom(8).hex()}.tmp"
    fd = create(dfd, temp)  # 0600, whatever the umask
    try:
        write_all(fd, data)
        failpoints.hit(f"{protocol}.temp_written")
        os.fsync(fd)
        failpoints.hit(f"{protocol}.temp_synced")
    except BaseException:
        os.close(fd)
        unlink_quiet(dfd, temp)
        raise
    os.close(fd)
    return temp


def link_new(dfd: int, name: str, data: bytes) -> bool:
    """The immutable publish protocol: True when `name` was created with `data`, False when the name already
    existed (its content is the caller's to compare)."""
    temp = write_temp(dfd, data, "store.publish")
    try:
        try:
            os.link(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in NO_LINKS:
                raise
            return _publish_without_link(dfd, temp, name)
        failpoints.hit("store.publish.linked")
    finally:
        unlink_quiet(dfd, temp)
    failpoints.hit("store.publish.temp_removed")
    os.fsync(dfd)
    return True


def _publish_without_link(dfd: int, temp: str, name: str) -> bool:
    """The link step where hard links are missing: the temp file itself becomes `name`, never over anything."""
    renamed = rename_noreplace(dfd, temp, name)
    if renamed is None:  # no renameat2 either: check, then rename (the caller holds the folder's lock)
        try:
            os.stat(name, dir_fd=dfd, follow_symlinks=False)
            renamed = False
        except FileNotFoundError:
            os.rename(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            renamed = True
    if renamed:
        failpoints.hit("store.publish.renamed")
        os.fsync(dfd)
    return renamed


def rename_over(dfd: int, name: str, data: bytes, temp: str | None = None) -> None:
    """The mutable replace protocol (the caller checked whatever rule governs the record)."""
    temp = write_temp(dfd, data, "store.replace", temp)
    try:
        os.rename(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        unlink_quiet(dfd, temp)
        raise
    failpoints.hit("store.replace.renamed")
    os.fsync(dfd)


def beside_temp(name: str) -> str:
    """The temp name of a file tau replaces in a folder it does not own (a status file beside a run):
    `.NAME.tau-<16 hex>.tmp`, so that only a writer of that one name ever removes it (`clean_beside`)."""
    return f".{name}.tau-{os.urandom(8).hex()}.tmp"


def clean_beside(dfd: int, name: str) -> None:
    """Remove the crash debris of replacing `name` (the caller is its only writer): regular files of ours named
    exactly like `beside_temp(name)`."""
    pattern = re.compile(rf"^\.{re.escape(name)}\.tau-[0-9a-f]{{16}}\.tmp\Z")
    uid = os.geteuid()
    with os.scandir(dfd) as entries:
        names = [e.name for e in entries if pattern.match(e.name)]
    for temp in names:
        try:
            st = os.stat(temp, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == uid and st.st_nlink == 1:
            unlink_quiet(dfd, temp)


def clean_debris(dfd: int) -> None:
    """Remove crash debris (temp files) from a folder whose owning lock the caller holds."""
    uid = os.geteuid()
    with os.scandir(dfd) as entries:
        names = [e.name for e in entries if is_temp(e.name)]
    for name in names:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            continue
        if st.st_nlink > 1 and not _linked_record(dfd, st):
            continue  # linked somewhere we cannot see: leave it
        unlink_quiet(dfd, name)


def _linked_record(dfd: int, temp_st: os.stat_result) -> bool:
    with os.scandir(dfd) as entries:
        for entry in entries:
            if is_temp(entry.name):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) == (temp_st.st_dev, temp_st.st_ino):
                return True
    return False


def unlink_quiet(dfd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        pass
