"""The small blobs of tau-bundle-fetch (and of tau-bundle-verify --deep) when no proxy applies to Blob storage:
every GET multiplexed in the main thread by `taulib.bundle.multiplex`, each file checked, fsynced and closed by a
few threads that wait on the disk (through a proxy, `taulib.bundle.transfer` gives each small blob a thread of its
own). Measured on 2,000 blobs of 1-64 KiB against Azurite on the same 2 cores: a thread per transfer made ~97 futex
calls a blob (the interpreter lock handed around every recv and write) and used ~1.3-1.6 CPU-ms a blob; this
~0.9-1.1, leaving the CPU to the storage endpoint.

Reads: blobs, through `multiplex`. Writes: the files the caller's open_fd opens; nothing else. Promises, as
`transfer.download_many`'s for its small entries: WORKERS GETs at a time, each blob whole into its connection's
buffer (pinned to its listed etag, exactly its listed size), then its file opened, written and hashed from that
buffer, and handed to finish(entry, sha256, fd), which checks it, fsyncs it and closes it, on FSYNCS threads with
OPEN_FILES waiting at most. The first failure stops the rest; when this returns or raises nothing writes into a
file any more and every file it opened is closed, a stop signal or two notwithstanding.
Memory: a RANGE buffer per connection (anonymous memory: only the pages a blob filled are resident).
"""
from __future__ import annotations

import hashlib
import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from taulib import signals
from taulib.bundle import multiplex
from taulib.bundle.blob import RANGE, WORKERS
from taulib.bundle.rest import Client
from taulib.bundle.threads import held_lock
from taulib.fs import writeback

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from taulib.jsonio import Record

    # the callbacks of `transfer.download_many` (and of `download` here)
    OpenFd = Callable[[Record], int]  # open_fd(entry): a new file descriptor to write the entry into
    Finish = Callable[[Record, str, int | None], None]  # finish(entry, sha256, fd): fd None when only hashed
    Progress = Callable[[int], None]  # progress(bytes)

FSYNCS = 4  # threads that check, fsync and close finished files (a fsync waits on the disk)
OPEN_FILES = 64  # finished files waiting for their fsync, at most, before the transfer waits for the oldest


def download(client: Client, prefix: str, entries: list[Record], etags: dict[str, str], open_fd: OpenFd | None,
             finish: Finish, progress: Progress | None) -> None:
    """The small entries (at most RANGE bytes each) of `transfer.download_many`, WORKERS at a time over `multiplex`,
    each one GET into its connection's buffer, then written, hashed and handed to finish() (check, fsync, close)
    on FSYNCS threads; with open_fd None only hashed, and finish(entry, sha256, None) called in this thread."""
    if not entries:
        return
    closing = _Closing(finish)
    engine = multiplex.Engine(client, WORKERS, RANGE)

    def wholes() -> Iterator[_Whole]:
        for entry in entries:
            name = f"{prefix}/{entry['path']}" if prefix else entry["path"]
            yield _Whole(entry, name, etags.get(entry["path"]), open_fd, closing, progress)

    try:
        engine.run(wholes())
        closing.wait()
    finally:
        with signals.deferred():  # nothing is written into a stage after this returns
            engine.close()
            closing.join()


class _Whole(multiplex.Get):
    """A small blob, read whole into the connection's buffer, then written, hashed and handed to finish()."""

    def __init__(self, entry: Record, name: str, etag: str | None, open_fd: OpenFd | None, closing: _Closing,
                 progress: Progress | None) -> None:
        super().__init__(name, etag, entry["size"])
        self.entry, self.open_fd, self.closing, self.progress = entry, open_fd, closing, progress

    def ended(self, body: memoryview) -> None:
        sha = hashlib.sha256(body).hexdigest()
        if self.open_fd is None:  # only hashed (tau-bundle-verify --deep): nothing to fsync
            self.closing.finish(self.entry, sha, None)
        else:
            fd = self.open_fd(self.entry)
            try:
                writeback.write_all(fd, body, 0)
            except BaseException:
                os.close(fd)
                raise
            self.closing.add(self.entry, sha, fd)
        if self.progress:
            self.progress(self.length)


class _Closing:
    """finish(entry, sha256, fd) of the files a transfer finished, on FSYNCS threads, OPEN_FILES waiting at most;
    the first failure is raised by the next `add` or by `wait`. `join` after a failure only closes the files still
    waiting."""

    def __init__(self, finish: Finish) -> None:
        self.finish, self.stopping = finish, False
        self.pending: deque[threading.Lock] = deque()  # released by each file's thread once it is closed
        self.failed: list[BaseException] = []
        self.pool = ThreadPoolExecutor(max_workers=FSYNCS)

    def add(self, entry: Record, sha: str, fd: int) -> None:
        done = held_lock()  # released by the thread once the file is closed

        def run() -> None:
            try:
                if self.stopping or self.failed:
                    os.close(fd)
                else:
                    self.finish(entry, sha, fd)
            except BaseException as exc:  # noqa: BLE001 - raised by the transfer's thread
                self.failed.append(exc)
            finally:
                done.release()

        self.pending.append(done)
        self.pool.submit(run)
        while len(self.pending) > OPEN_FILES:
            self.pending.popleft().acquire()
        if self.failed:
            raise self.failed[0]

    def wait(self) -> None:
        while self.pending:
            self.pending.popleft().acquire()
        if self.failed:
            raise self.failed[0]

    def join(self) -> None:
        self.stopping = True
        self.pool.shutdown(wait=True)
