"""Publishing a staged folder at its final name without ever replacing anything (collections, bundle fetches).

Reads and Writes: two entries of one folder, the `parent` Tree (the stage and the final name), and a reservation
marker beside them on the fallback path.
Promises: `publish_folder(parent, stage, name)` renames the stage to the final name with
`renameat2(RENAME_NOREPLACE)`, or raises Conflict (73) when the name exists; nothing that exists is ever replaced.
Where the filesystem lacks renameat2 (EINVAL, ENOSYS, ENOTSUP: ZFS, some NFS servers), or TAU_NO_RENAMEAT2=1, it
falls back to: create a reservation marker (O_EXCL) beside the target and fsync the parent, `mkdir` the target
exclusively (the no-replace claim, an empty folder given the stage's mode through its descriptor), `rename` the
stage onto the empty reserved folder (POSIX allows replacing an empty directory), remove the marker. Either way the
folder that appears at the final name is the stage itself, with the modes it was given. `recover_reservation`
undoes a crash in between: an empty target of ours plus its marker.
"""

from __future__ import annotations

import os
import stat

from taulib import failpoints
from taulib.errors import Conflict
from taulib.fs import atomic, openat
from taulib.fs.tree import Tree


def publish_folder(parent: Tree, stage: str, name: str) -> None:
    """Rename `stage` to `name` (both entries of `parent`) without replacing anything; fsyncs the parent."""
    renamed = atomic.rename_noreplace(parent.fd, stage, name)
    if renamed is None:
        _fallback(parent, stage, name)
        return
    if not renamed:
        raise Conflict(f"{name!r} already exists; tau never overwrites a dataset", path=name)
    os.fsync(parent.fd)


def marker_name(name: str) -> str:
    return f".{name}.tau-reserved"


def _fallback(parent: Tree, stage: str, name: str) -> None:
    marker = marker_name(name)
    atomic.write_new(parent.fd, marker, f"{stage}\n{name}\n".encode())
    os.fsync(parent.fd)  # the marker's name before the claim: a power cut never keeps the claim without it
    failpoints.hit("publish.reserved")
    mode = stat.S_IMODE(os.stat(stage, dir_fd=parent.fd, follow_symlinks=False).st_mode)
    try:
        os.mkdir(name, mode, dir_fd=parent.fd)
    except FileExistsError:
        os.unlink(marker, dir_fd=parent.fd)
        raise Conflict(f"{name!r} already exists; tau never overwrites a dataset", path=name) from None
    claim = os.open(name, openat.DIR, dir_fd=parent.fd)
    try:
        os.fchmod(claim, mode)  # the umask narrowed what mkdir made: the empty claim has the stage's mode too
    finally:
        os.close(claim)
    os.fsync(parent.fd)
    failpoints.hit("publish.claimed")
    os.rename(stage, name, src_dir_fd=parent.fd, dst_dir_fd=parent.fd)
    os.fsync(parent.fd)
    failpoints.hit("publish.renamed")
    os.unlink(marker, dir_fd=parent.fd)
    os.fsync(parent.fd)


def recover_reservation(parent: Tree, name: str) -> None:
    """Undo a fallback publication interrupted between the claim and the rename."""
    marker = marker_name(name)
    mst = parent.lstat(marker)
    if mst is None or not stat.S_ISREG(mst.st_mode) or mst.st_uid != os.geteuid():
        return
    dst = parent.lstat(name)
    if dst is not None and stat.S_ISDIR(dst.st_mode) and dst.st_uid == os.geteuid() and not parent.listdir(name):
        parent.remove_empty(name)
    os.unlink(marker, dir_fd=parent.fd)
    os.fsync(parent.fd)
