"""A real FUSE filesystem without hard links and without renameat2's flags, for the fallback paths.

A passthrough (fusepy on libfuse 2) of a backing folder that answers link(2) with EPERM, as FUSE and SMB mounts,
some object-store gateways and several network filesystems do. libfuse 2's high-level API has no rename2, so the
kernel answers renameat2(RENAME_NOREPLACE) with EINVAL: exactly the filesystems tau's fallbacks exist for.

`python tests/fusefs.py BACKING MOUNTPOINT` serves in the foreground until SIGINT or SIGTERM. `mounted(tmp)` is a
context manager that starts it as a child, waits for the mount, yields the mount point and stops the child it
started (by PID), unmounting if needed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ATTRS = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size", "st_uid", "st_ino")


def passthrough():
    """The read side of a passthrough FUSE file system of a backing folder (`root`), shared by this file system and
    tests/lazyfs.py: paths resolved under the root, every OSError answered with its errno, attributes, access,
    entries, links and statfs read from the backing folder. fusepy is imported here, in the server process only."""
    from fuse import FuseOSError, Operations

    class Passthrough(Operations):
        def __init__(self, root: str) -> None:
            self.root = os.path.abspath(root)

        def _p(self, path: str) -> str:
            return os.path.join(self.root, path.lstrip("/"))

        def __call__(self, op, *args):
            try:
                return super().__call__(op, *args)
            except OSError as exc:
                raise FuseOSError(exc.errno or errno.EIO) from None

        def getattr(self, path, fh=None):
            st = os.lstat(self._p(path))
            return {k: getattr(st, k) for k in ATTRS}

        def access(self, path, amode):
            if not os.access(self._p(path), amode, follow_symlinks=False):
                raise FuseOSError(errno.EACCES)

        def readdir(self, path, fh):
            return [".", "..", *os.listdir(self._p(path))]

        def readlink(self, path):
            return os.readlink(self._p(path))

        def statfs(self, path):
            st = os.statvfs(self._p(path))
            return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                                "f_files", "f_flag", "f_frsize", "f_namemax")}

    return Passthrough


def serve(backing: str, mountpoint: str) -> None:
    from fuse import FUSE, FuseOSError

    class NoLinks(passthrough()):
        def mkdir(self, path, mode):
            os.mkdir(self._p(path), mode)

        def mknod(self, path, mode, dev):
            os.mknod(self._p(path), mode, dev)

        def rmdir(self, path):
            os.rmdir(self._p(path))

        def symlink(self, target, source):
            os.symlink(source, self._p(target))

        def link(self, target, source):
            raise FuseOSError(errno.EPERM)

        def unlink(self, path):
            os.unlink(self._p(path))

        def rename(self, old, new):
            os.rename(self._p(old), self._p(new))

        def chmod(self, path, mode):
            os.chmod(self._p(path), mode, follow_symlinks=False)

        def chown(self, path, uid, gid):
            os.chown(self._p(path), uid, gid, follow_symlinks=False)

        def utimens(self, path, times=None):
            os.utime(self._p(path), times, follow_symlinks=False)

        def truncate(self, path, length, fh=None):
            os.truncate(self._p(path), length)

        def create(self, path, mode, fi=None):
            return os.open(self._p(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)

        def open(self, path, flags):
            return os.open(self._p(path), flags & ~(os.O_CREAT | os.O_EXCL))

        def read(self, path, size, offset, fh):
            return os.pread(fh, size, offset)

        def write(self, path, data, offset, fh):
            return os.pwrite(fh, data, offset)

        def flush(self, path, fh):
            return 0

        def release(self, path, fh):
            os.close(fh)

        def fsync(self, path, datasync, fh):
            os.fsync(fh)

        def fsyncdir(self, path, datasync, fh):
            return 0

    FUSE(NoLinks(backing), mountpoint, foreground=True, nothreads=True, allow_other=False)


def _unmount(mountpoint: Path) -> None:
    if os.path.ismount(mountpoint):
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, timeout=30)


@contextlib.contextmanager
def serving(argv: list[str], mountpoint: Path, log: Path):
    """Start the file system server `argv` (its output to `log`), wait until `mountpoint` is mounted, and on the way
    out stop the server this started, by its PID (SIGINT: libfuse's own handler leaves its loop and unmounts), then
    unmount what is left."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 20
            while not os.path.ismount(mountpoint):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the FUSE file system did not mount: {log.read_text()!r}")
                time.sleep(0.05)
            yield
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
            _unmount(mountpoint)


@contextlib.contextmanager
def mounted(tmp: Path):
    """Serve a fresh backing folder under `tmp` at `tmp/mnt`; yields the mount point (a Path)."""
    backing, mountpoint = tmp / "backing", tmp / "mnt"
    backing.mkdir(mode=0o700)
    mountpoint.mkdir(mode=0o700)
    with serving([sys.executable, __file__, str(backing), str(mountpoint)], mountpoint, tmp / "fusefs.log"):
        yield mountpoint


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
