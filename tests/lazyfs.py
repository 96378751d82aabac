"""A LazyFS in miniature: a FUSE passthrough (fusepy on libfuse 2) that forgets, on command, everything not yet made
durable, as a power cut does.

It serves a backing folder (reads and writes go straight to it: the page cache of this file system) and keeps,
beside it, the op log of every change since the last cut in the model of tests/crashstates.py: entries made,
renamed and removed, data written and cut, fsyncs of files and of folders (FUSE's fsync and fsyncdir). Hard links
work; renameat2's flags do not (libfuse 2's high-level API has no rename2: tau falls back to "absent, then
rename"). Attributes and entries are never cached by the kernel and files are opened with direct I/O, so that
after a cut nothing stale is read.

Commands are files in a control folder CONTROL outside the mount:
  arm       holds N: freeze the file system after N more changing operations (rewritten to arm again; 0
            disarms);
  frozen    written by the file system when it froze: the operation it holds (which then fails with EIO);
  cut       holds a seed: the power cut. The backing folder becomes a state a power cut may leave
            (`crashstates.power_cut`: half the time only what was fsynced, else a random subset of the unsynced
            entry changes and fates of unsynced data); `cut-done` says which. Until `resume` exists, every changing
            operation fails with EIO (the killed processes' last requests are never applied), reads are served;
  resume    the file system continues (disarmed), from the state the cut left.
The test kills every process of the workload (a power cut kills everything) between `frozen` and `cut`.

`python tests/lazyfs.py BACKING MOUNTPOINT CONTROL` serves in the foreground until SIGINT or SIGTERM;
`mounted(tmp)` is a context manager like fusefs.mounted: it yields (mount point, control folder) and stops the
server it started by its PID.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import crashstates as cs  # noqa: E402
from fusefs import passthrough, serving  # noqa: E402


def say(path: Path, text: str) -> None:
    """Write a control file whole at once (a temporary name, then a rename): the other side polls for it and must
    never read it empty or half written (a cut read as seed 0, not the seed given)."""
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(text)
    os.replace(temp, path)


def serve(backing: str, mountpoint: str, control: str) -> None:
    from fuse import FUSE, FuseOSError

    class Lazy(passthrough()):
        def __init__(self) -> None:
            super().__init__(backing)
            self.control = Path(control)
            self.fhs: dict[int, int] = {}  # backing descriptor -> inode of the model
            self.changes = 0  # changing operations served since the mount
            self.target: int | None = None
            self.armed_mtime = 0
            self.dead = False
            self.cuts = 0
            self.reset()

        def reset(self) -> None:
            self.model = cs.Model(self.root)
            self.ops: list[cs.Op] = []
            self.fhs.clear()

        # -- the commands ---------------------------------------------------------------------------------------
        def _gate(self, what: str) -> None:
            """Before every changing operation: refuse it after a cut, freeze when armed and due."""
            if self.dead:
                if not (self.control / "resume").exists():
                    raise FuseOSError(errno.EIO)
                (self.control / "resume").unlink()
                self.dead, self.target = False, None
            try:
                mtime = (self.control / "arm").stat().st_mtime_ns
            except FileNotFoundError:
                mtime = 0
            if mtime and mtime != self.armed_mtime:
                self.armed_mtime = mtime
                after = int((self.control / "arm").read_text())
                self.target = self.changes + after if after > 0 else None
            self.changes += 1
            if self.target is None or self.changes < self.target:
                return
            say(self.control / "frozen", f"{self.changes} {what}\n")
            while not (self.control / "cut").exists():
                time.sleep(0.01)
            self._cut(int((self.control / "cut").read_text()))
            raise FuseOSError(errno.EIO)

        def _cut(self, seed: int) -> None:
            rec = cs.Recording(self.root, self.model.inodes, self.ops, 0, b"", b"")
            label, state = cs.power_cut(rec, random.Random(seed))
            cs.materialise(state, self.root, keep_root=True)
            self.cuts += 1
            self.dead, self.target = True, None
            (self.control / "cut").unlink()
            (self.control / "frozen").unlink()
            say(self.control / "cut-done", f"{self.cuts} {label} after {len(self.ops)} operations\n")
            self.reset()

        def _emit(self, kind: str, path: str, **kw) -> None:
            self.ops.append(cs.Op(kind, 0, "fuse", path.lstrip("/"), **kw))

        def _ino(self, path: str, fh=None) -> int | None:
            if fh is not None and fh in self.fhs:
                return self.fhs[fh]
            return self.model.lookup(path.lstrip("/"))

        def _link(self, path: str, ino: int) -> None:
            where = self.model.parent(path.lstrip("/"))
            if where is not None:
                self.model.live[where[0]][where[1]] = ino
                self._emit("link", path, ino=ino, dir=where[0], name=where[1])

        def _unlink(self, path: str) -> None:
            where = self.model.parent(path.lstrip("/"))
            if where is not None and where[1] in self.model.live[where[0]]:
                ino = self.model.live[where[0]].pop(where[1])
                self._emit("unlink", path, ino=ino, dir=where[0], name=where[1])

        # -- reading ----------------------------------------------------------------------------------------------
        def open(self, path, flags):
            # O_APPEND dropped: the kernel gives every write its offset (the file's end), which pwrite must keep
            fh = os.open(self._p(path), flags & ~(os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_APPEND))
            ino = self.model.lookup(path.lstrip("/"))
            if ino is not None:
                self.fhs[fh] = ino
            return fh

        def read(self, path, size, offset, fh):
            return os.pread(fh, size, offset)

        def flush(self, path, fh):
            return 0

        def release(self, path, fh):
            self.fhs.pop(fh, None)
            os.close(fh)

        def opendir(self, path):
            return 0

        def releasedir(self, path, fh):
            return 0

        # -- changing ---------------------------------------------------------------------------------------------
        def create(self, path, mode, fi=None):
            self._gate(f"create {path}")
            fh = os.open(self._p(path), os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
            ino = self.model.new("f", mode & 0o7777)
            self._link(path, ino)
            self.fhs[fh] = ino
            return fh

        def mkdir(self, path, mode):
            self._gate(f"mkdir {path}")
            os.mkdir(self._p(path), mode)
            self._link(path, self.model.new("d", mode & 0o7777))

        def write(self, path, data, offset, fh):
            self._gate(f"write {path}")
            written = os.pwrite(fh, data, offset)
            ino = self._ino(path, fh)
            if ino is not None:
                self._emit("write", path, ino=ino, offset=offset, data=bytes(data[:written]))
            return written

        def truncate(self, path, length, fh=None):
            self._gate(f"truncate {path}")
            os.truncate(self._p(path), length)
            ino = self._ino(path, fh)
            if ino is not None:
                self._emit("trunc", path, ino=ino, size=length)

        def rename(self, old, new):
            self._gate(f"rename {old} {new}")
            os.rename(self._p(old), self._p(new))
            src, dst = self.model.parent(old.lstrip("/")), self.model.parent(new.lstrip("/"))
            ino = self.model.live[src[0]].pop(src[1])
            self.model.live[dst[0]][dst[1]] = ino
            self._emit("rename", new, ino=ino, dir=src[0], name=src[1], dir2=dst[0], name2=dst[1])

        def link(self, target, source):
            self._gate(f"link {source} {target}")
            os.link(self._p(source), self._p(target))
            self._link(target, self.model.lookup(source.lstrip("/")))

        def unlink(self, path):
            self._gate(f"unlink {path}")
            os.unlink(self._p(path))
            self._unlink(path)

        def rmdir(self, path):
            self._gate(f"rmdir {path}")
            os.rmdir(self._p(path))
            self._unlink(path)

        def symlink(self, target, source):
            raise FuseOSError(errno.EPERM)  # tau never makes one; the model has none

        def mknod(self, path, mode, dev):
            raise FuseOSError(errno.EPERM)

        def chmod(self, path, mode):
            os.chmod(self._p(path), mode, follow_symlinks=False)
            ino = self.model.lookup(path.lstrip("/"))
            if ino is not None:
                self.model.inodes[ino].mode = mode & 0o7777

        def chown(self, path, uid, gid):
            os.chown(self._p(path), uid, gid, follow_symlinks=False)

        def utimens(self, path, times=None):
            os.utime(self._p(path), times, follow_symlinks=False)

        def fsync(self, path, datasync, fh):
            self._gate(f"fsync {path}")
            ino = self._ino(path, fh)
            if ino is not None:
                self._emit("sync", path, ino=ino)

        def fsyncdir(self, path, datasync, fh):
            self._gate(f"fsyncdir {path}")
            ino = self.model.lookup(path.lstrip("/"))
            if ino is not None:
                self._emit("sync", path, ino=ino)

    FUSE(Lazy(), mountpoint, foreground=True, nothreads=True, allow_other=False, direct_io=True, attr_timeout=0,
         entry_timeout=0, negative_timeout=0)


@contextlib.contextmanager
def mounted(tmp: Path):
    """Serve a fresh backing folder under `tmp` at `tmp/mnt`; yields (mount point, control folder)."""
    backing, mountpoint, control = tmp / "backing", tmp / "mnt", tmp / "control"
    for folder in (backing, mountpoint, control):
        folder.mkdir(mode=0o700)
    with serving([sys.executable, __file__, str(backing), str(mountpoint), str(control)], mountpoint,
                 tmp / "lazyfs.log"):
        yield mountpoint, control


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], sys.argv[3])
