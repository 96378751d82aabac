"""Publishing a staged folder at its final name without ever replacing anything (collections).

`publish_dir(parent_fd, stage, name)` uses `renameat2(RENAME_NOREPLACE)`. Where the filesystem lacks it (EINVAL,
ENOSYS, ENOTSUP: ZFS, some NFS servers), it falls back to: create a reservation marker (O_EXCL) beside the target,
`mkdir` the target exclusively (the no-replace claim), `rename` the stage onto the empty reserved folder (POSIX
allows replacing an empty directory), remove the marker. `recover_reservation` undoes a crash in between: an empty
target of ours plus its marker. Both paths raise Conflict when the name exists.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

from taulib import store
from taulib.errors import Conflict

RENAME_NOREPLACE = 1
_FALLBACK_ERRNOS = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}
_renameat2 = None


def _libc_renameat2():
    global _renameat2
    if _renameat2 is None:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = getattr(libc, "renameat2", None)
        if fn is not None:
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
        _renameat2 = fn or False
    return _renameat2 or None


def rename_noreplace(parent_fd: int, src: str, dst: str, force_fallback: bool = False) -> None:
    fn = None if force_fallback else _libc_renameat2()
    if fn is not None:
        if fn(parent_fd, os.fsencode(src), parent_fd, os.fsencode(dst), RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err in (errno.EEXIST, errno.ENOTEMPTY):
            raise Conflict(f"{dst!r} already exists; tau never overwrites a dataset", path=dst)
        if err not in _FALLBACK_ERRNOS:
            raise OSError(err, os.strerror(err), dst)
    _fallback(parent_fd, src, dst)


def marker_name(dst: str) -> str:
    return f".{dst}.tau-reserved"


def _fallback(parent_fd: int, src: str, dst: str) -> None:
    marker = marker_name(dst)
    store.write_new(parent_fd, marker, f"{src}\n{dst}\n".encode())
    try:
        os.mkdir(dst, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        os.unlink(marker, dir_fd=parent_fd)
        raise Conflict(f"{dst!r} already exists; tau never overwrites a dataset", path=dst) from None
    os.fsync(parent_fd)
    os.rename(src, dst, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
    os.fsync(parent_fd)
    os.unlink(marker, dir_fd=parent_fd)


def recover_reservation(parent_fd: int, dst: str) -> None:
    """Undo a fallback publication interrupted between the claim and the rename."""
    marker = marker_name(dst)
    try:
        mst = os.stat(marker, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mst.st_mode) or mst.st_uid != os.geteuid():
        return
    try:
        dst_st = os.stat(dst, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        os.unlink(marker, dir_fd=parent_fd)
        return
    if stat.S_ISDIR(dst_st.st_mode) and dst_st.st_uid == os.geteuid():
        fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
        try:
            empty = not os.listdir(fd)
        finally:
            os.close(fd)
        if empty:
            os.rmdir(dst, dir_fd=parent_fd)
    os.unlink(marker, dir_fd=parent_fd)
    os.fsync(parent_fd)
