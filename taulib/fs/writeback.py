"""Keeping a large file that is being written out of the page cache: its pages are handed to writeback as they are
written and dropped once they are on disk, so that writing it neither evicts what other files have cached (the
winners a collection reads) nor leaves the final fsync with the whole file to write.

Reads: nothing. Writes: bytes the caller gives at the offsets it gives, into descriptors it holds (`write_all`,
WRITE bytes a call); otherwise only advice to the kernel about those descriptors.
Promises: `Behind.wrote(end)` after every write (end: the bytes now surely in the file): each STEP-byte block is
handed to writeback once it is complete, and dropped from the page cache LAG blocks later (POSIX_FADV_DONTNEED,
which on Linux starts writing a range back and drops only the pages that are clean). Never changes a byte; where
the advice does not exist it does nothing.
"""

from __future__ import annotations

import os

WRITE = 256 << 10  # bytes per pwrite: 8 MiB writes cost 5-10x the kernel time of 256 KiB ones (Linux 6, ext4)
STEP = 8 << 20  # bytes handed to writeback at a time
LAG = 2  # blocks between handing a block to writeback and dropping its (by then clean) pages
DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", 0) if os.uname().sysname == "Linux" else 0


def write_all(fd: int, view: memoryview, offset: int) -> None:
    """All of `view` into fd at `offset`, WRITE bytes a call."""
    while view:
        written = os.pwrite(fd, view[:WRITE], offset)
        view, offset = view[written:], offset + written


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
