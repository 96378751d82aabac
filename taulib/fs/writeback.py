"""Keeping a large file that is being written out of the page cache: its pages are handed to writeback as they are
written and dropped once they are on disk, so that writing it neither evicts what other files have cached (the
winners a collection reads) nor leaves the final fsync with the whole file to write; or, where the file system
takes it, not going through the page cache at all (direct I/O).

Reads: /proc/self/mountinfo (which file system a descriptor is on). Writes: bytes the caller gives at the offsets it
gives, into descriptors it holds (`write_all`, WRITE bytes a call; `write_direct`, aligned); otherwise only advice
to the kernel about those descriptors, and their O_DIRECT flag (`start_direct_io`, `stop_direct_io`).
Promises: `Behind.wrote(end)` after every write (end: the bytes now surely in the file): each STEP-byte block is
handed to writeback once it is complete, and dropped from the page cache LAG blocks later (POSIX_FADV_DONTNEED,
which on Linux starts writing a range back and drops only the pages that are clean). `start_direct_io(fd)` turns
direct I/O on only for a file on a local block file system of DIRECT_TYPES (where writes of ALIGN-aligned buffers
at ALIGN-aligned offsets bypass the page cache: no copy into it, nothing to write back at fsync, nothing evicted); on
any other file system (NFS, Lustre, FUSE, tmpfs ...) the descriptor stays as it was. Never changes a byte; where
the advice does not exist it does nothing.
"""

from __future__ import annotations

import errno
import fcntl
import os
from functools import lru_cache

WRITE = 256 << 10  # bytes per pwrite: 8 MiB writes cost 5-10x the kernel time of 256 KiB ones (Linux 6, ext4)
STEP = 8 << 20  # bytes handed to writeback at a time
LAG = 2  # blocks between handing a block to writeback and dropping its (by then clean) pages
DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", 0) if os.uname().sysname == "Linux" else 0
ALIGN = 4096  # direct I/O: buffers, offsets and lengths in multiples of this (a page: any logical block size divides)
DIRECT_TYPES = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs"})  # local block file systems direct I/O is used on


def write_all(fd: int, view: memoryview, offset: int) -> None:
    """All of `view` into fd at `offset`, WRITE bytes a call."""
    while view:
        written = os.pwrite(fd, view[:WRITE], offset)
        view, offset = view[written:], offset + written


def write_direct(fd: int, view: memoryview, offset: int, length: int) -> None:
    """The first `length` bytes of `view` into fd (O_DIRECT set) at `offset`: view's address, offset and len(view)
    multiples of ALIGN (its bytes past `length` are padding, written too; the caller cuts the file to its size).
    Where the file system refuses a direct write after all (EINVAL: an alignment it wants larger; or a short
    write that left the rest unaligned), direct I/O is turned off for fd and the rest goes through the page cache,
    without its padding."""
    end = offset + length
    while view:
        try:
            written = os.pwrite(fd, view, offset)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            stop_direct_io(fd)
            write_all(fd, view[:max(0, end - offset)], offset)
            return
        view, offset = view[written:], offset + written


def stop_direct_io(fd: int) -> None:
    """Turn direct I/O off for fd (nothing when it is off)."""
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~getattr(os, "O_DIRECT", 0))


def start_direct_io(fd: int) -> bool:
    """Turn direct I/O on for fd when its file system is a local block one of DIRECT_TYPES and takes it; whether
    it is on."""
    o_direct = getattr(os, "O_DIRECT", 0)
    if not o_direct or fstype(os.fstat(fd).st_dev) not in DIRECT_TYPES:
        return False
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | o_direct)
    except OSError:  # the file system refused it after all
        return False
    return True


@lru_cache(maxsize=16)
def fstype(dev: int) -> str | None:
    """The type of the file system mounted from device number `dev` (an st_dev), as /proc/self/mountinfo names it;
    None when it is not found there (not Linux, no /proc)."""
    wanted = f"{os.major(dev)}:{os.minor(dev)}"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                fields, _, rest = line.partition(" - ")
                parts = fields.split()
                if len(parts) > 2 and parts[2] == wanted and rest:
                    return rest.split()[0]
    except OSError:
        return None
    return None


def release(fd: int, offset: int, length: int) -> None:
    """Start writing [offset, offset+length) back and drop its pages that are clean already."""
    if DONTNEED and length > 0:
        os.posix_fadvise(fd, offset, length, DONTNEED)


class Behind:
    """The writeback of one file being written from its start."""

    __slots__ = ("fd", "blocks")

    def __init__(self, fd: int) -> None:
        self.fd, self.blocks = fd, 0  # blocks handed to writeback so far

    def wrote(self, end: int) -> None:
        while DONTNEED and (self.blocks + 1) * STEP <= end:
            release(self.fd, self.blocks * STEP, STEP)
            if self.blocks >= LAG:
                release(self.fd, (self.blocks - LAG) * STEP, STEP)
            self.blocks += 1
