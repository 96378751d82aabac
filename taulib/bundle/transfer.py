"""Downloading the blobs of a bundle into staged files (tau-bundle-fetch), or only hashing them (tau-bundle-verify
--deep): the sha256 of every byte, in order, however the bytes arrive.

Reads: blobs, through `taulib.bundle.rest` (and `taulib.bundle.small_blobs`). Writes: the file descriptors the caller
opened (positional writes); nothing else. Promises:
- the large blobs first (over RANGE bytes): ranged GETs of SPAN bytes, over all the large blobs in turn, SPANS at a
  time, each on a transfer thread, received from the socket straight into a buffer of its own (the thread woken per
  `connections.LOW_WATER` bytes); the transfer thread then goes on to its next range at once. This thread takes the
  ranges in their order: it hands each to the one writer thread, which writes it into its file, and hashes it from
  the same buffer meanwhile, so no byte is read back and no transfer waits for the disk; a buffer is reused once its
  range is hashed and written, and at most BUFFERS ranges are held (SPANS in flight, the others arrived and waiting
  for the one before them, or being written), so memory is bounded whatever the sizes. A staged file on a local
  block file system is written with direct I/O (`fs.writeback.start_direct_io`: no copy into the page cache, nothing
  evicted, nothing left for the final fsync to write; its last block padded with zeros, then the file cut to its
  size); on any other file system through the page cache, each hashed range handed to writeback and dropped from
  the cache. A file is finished (checked, fsynced by the caller) when its last range is hashed and written, while
  the next file's ranges arrive;
- then the blobs of up to RANGE bytes, WORKERS at a time, each one GET into a buffer, written and hashed from
  there: when no proxy applies all in this thread (`taulib.bundle.small_blobs`, no thread per blob); through a
  proxy a transfer thread each;
- every request carries the blob's listed etag (If-Match); the blob must have exactly its listed size;
- transfer threads (and the writer) are joined before a call returns or raises, a stop signal or two
  notwithstanding; the first failure (or a stop signal) stops the rest, no retry is waited for after it, and when
  no proxy applies the connections the large blobs' threads are reading are cut (`rest.Client.interrupt`), so
  that none waits for its read to time out; a file the caller opened is closed by `finish`, or here when its
  transfer failed.
Memory: BUFFERS buffers of SPAN bytes, and a RANGE buffer per small-blob transfer thread (anonymous memory: only the
pages a body filled are resident).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVarTuple

from taulib import signals
from taulib.bundle.blob import RANGE, WORKERS
from taulib.bundle.rest import Client
from taulib.bundle.threads import held_lock, join, run_all
from taulib.errors import CheckFailed
from taulib.fs import writeback

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from taulib.bundle.small_blobs import Finish, OpenFd, Progress
    from taulib.jsonio import Record

SPAN = 16 << 20  # bytes per ranged GET of a large blob, each into a buffer of its own
SPANS = 4  # ranged GETs in flight, a transfer thread each
BUFFERS = SPANS + 2  # ranges held at most: those in flight, and a finished one or two waiting for their hash
_local = threading.local()  # each thread's buffer
_Ts = TypeVarTuple("_Ts")


def _buffer() -> mmap.mmap:
    """This thread's buffer of RANGE bytes: anonymous memory, whose pages stay the kernel's zero page until written
    (a bytearray is zeroed through, so resident, at once)."""
    buffer = getattr(_local, "buffer", None)
    if buffer is None:
        buffer = _local.buffer = mmap.mmap(-1, RANGE)
    return buffer


def download(client: Client, name: str, fd: int | None, size: int, etag: str | None,
             progress: Progress | None = None) -> str:
    """Read blob `name` (into fd with positional writes through the page cache; or nowhere when fd is None) and
    return its sha256. The blob must keep its etag and have exactly `size` bytes."""
    if size <= RANGE:
        return _small(client, name, fd, size, etag, progress, None)
    digests: dict[str, str] = {}
    _large(client, "", [{"path": name, "size": size}], {name: etag},
           None if fd is None else lambda entry: fd, lambda entry, sha, _fd: digests.update(sha=sha), progress,
           own=False)
    return digests["sha"]


def download_many(client: Client, prefix: str, entries: list[Record], etags: dict[str, str], open_fd: OpenFd | None,
                  finish: Finish, progress: Progress | None = None) -> None:
    """Download manifest entries, the large ones first. open_fd(entry) gives a new file descriptor to write into,
    this transfer's own (direct I/O may be turned on for it), or open_fd is None: hash only; finish(entry, sha256,
    fd) checks and closes it. The first failure stops the rest."""
    _large(client, prefix, [e for e in entries if e["size"] > RANGE], etags, open_fd, finish, progress)
    if not getattr(client, "proxied", True):  # no thread per blob: `taulib.bundle.small_blobs`
        from taulib.bundle import small_blobs

        small_blobs.download(client, prefix, [e for e in entries if e["size"] <= RANGE], etags, open_fd, finish,
                             progress)
        return
    stop = threading.Event()

    def one(entry: Record) -> None:
        fd = open_fd(entry) if open_fd else None
        try:
            sha = _small(client, f"{prefix}/{entry['path']}", fd, entry["size"], etags.get(entry["path"]), progress,
                         stop)
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        finish(entry, sha, fd)

    run_all([e for e in entries if e["size"] <= RANGE], one, workers=WORKERS, stop=stop)


def _small(client: Client, name: str, fd: int | None, size: int, etag: str | None, progress: Progress | None,
           stop: threading.Event | None) -> str:
    view = memoryview(_buffer())[:size]
    client.read(name, etag, view, None, stop)
    if fd is not None:
        writeback.write_all(fd, view, 0)
    sha = hashlib.sha256(view)
    if progress:
        progress(size)
    return sha.hexdigest()


def _large(client: Client, prefix: str, entries: list[Record], etags: Mapping[str, str | None], open_fd: OpenFd | None,
           finish: Finish, progress: Progress | None, own: bool = True) -> None:
    """The large entries' ranges, SPANS in flight and BUFFERS held at most, in their order, each hashed in this
    thread in that order. `own`: the descriptors open_fd gives are this transfer's (direct I/O may be turned on,
    and one whose file did not finish is closed here)."""
    if not entries:
        return
    jobs = [(entry, offset, length) for entry in entries for offset, length in spans(entry["size"])]
    files: dict[str, list[Any]] = {}  # path: [fd or None, sha256, whether direct I/O is on]
    held: dict[int, mmap.mmap] = {}  # job: its buffer, from its hand-out to its digest
    spare: list[mmap.mmap] = []  # buffers of digested jobs, for the next ones

    def begin(i: int) -> None:
        entry, offset, _ = jobs[i]
        if offset == 0:
            fd = open_fd(entry) if open_fd else None
            files[entry["path"]] = [fd, hashlib.sha256(), own and fd is not None and writeback.start_direct_io(fd)]
        held[i] = spare.pop() if spare else mmap.mmap(-1, SPAN)

    def fetch(i: int, stopped: threading.Event) -> None:
        entry, offset, length = jobs[i]
        name = f"{prefix}/{entry['path']}" if prefix else entry["path"]
        got = client.fill(name, etags.get(entry["path"]), offset, memoryview(held[i])[:length], stopped)
        if got != length:
            raise CheckFailed(f"{name} ended early: {offset + got} of {entry['size']} bytes")

    def write(fd: int, direct_io: bool, buffer: mmap.mmap, offset: int, length: int) -> None:
        if not direct_io:
            writeback.write_all(fd, memoryview(buffer)[:length], offset)
            return
        padded = -(-length // writeback.ALIGN) * writeback.ALIGN
        buffer[length:padded] = bytes(padded - length)  # the blob's last block: the file is cut to its size after
        writeback.write_direct(fd, memoryview(buffer)[:padded], offset, length)

    def digest(i: int) -> None:
        entry, offset, length = jobs[i]
        fd, sha, direct_io = files[entry["path"]]
        written = None if fd is None else writer.start(write, fd, direct_io, held[i], offset, length)
        sha.update(memoryview(held[i])[:length])  # while the writer writes the same bytes
        if written is not None:
            writer.wait(written)
        spare.append(held.pop(i))
        if fd is not None and not direct_io:  # hashed: its pages go to disk now, the final fsync has less to wait for
            writeback.release(fd, offset, length)
        if progress:
            progress(length)
        if offset + length == entry["size"]:
            del files[entry["path"]]
            if direct_io and entry["size"] % writeback.ALIGN:
                os.ftruncate(fd, entry["size"])  # the padding of its last block
            finish(entry, sha.hexdigest(), fd)

    writer = _Writer()
    try:
        _windowed(len(jobs), begin, fetch, digest, client)
    finally:
        writer.close()  # before a file is closed: nothing is written into a descriptor closed or reused
        for fd, _, _ in files.values():  # the files whose transfer did not finish
            if fd is not None and own:
                os.close(fd)


class _Writer:
    """One thread that writes ranges into their files, one at a time, while the caller's thread hashes them."""

    def __init__(self) -> None:
        self.pool: ThreadPoolExecutor | None = None

    def start(self, write: Callable[[*_Ts], None], *args: *_Ts) -> tuple[threading.Lock, list[BaseException]]:
        """write(*args) on the writer thread; returns what `wait` takes."""
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=1)
        done, failed = held_lock(), []

        def run() -> None:
            try:
                write(*args)
            except BaseException as exc:  # noqa: BLE001 - raised by the caller's thread, in wait
                failed.append(exc)
            finally:
                done.release()

        self.pool.submit(run)
        return done, failed

    @staticmethod
    def wait(started: tuple[threading.Lock, list[BaseException]]) -> None:
        """Until that write has ended; raises what it raised."""
        done, failed = started
        done.acquire()  # a lock's wait: a stop signal may cut it at any moment (`threads.held_lock`)
        if failed:
            raise failed[0]

    def close(self) -> None:
        if self.pool is not None:
            join(self.pool)


def spans(size: int, span: int = SPAN) -> list[tuple[int, int]]:
    """The (offset, length) of the ranged GETs of a blob of `size` bytes: `span` bytes each, the last one less."""
    return [(offset, min(span, size - offset)) for offset in range(0, size, span)]


def _windowed(count: int, begin: Callable[[int], None], fetch: Callable[[int, threading.Event], None],
              digest: Callable[[int], None], client: Client) -> None:
    """fetch(i, stopped) for i in range(count) on SPANS threads, at most BUFFERS ahead of digest(i), which runs in
    this thread in order, after fetch(i) returned; begin(i) runs here before i is handed out. On a failure (or a
    stop signal), client.interrupt() cuts what the threads are waiting on before they are joined, and
    client.resume() undoes it once they are."""
    failed: dict[int, BaseException] = {}
    ended = [held_lock() for _ in range(count)]  # released by the job's thread when it ends
    stopped = threading.Event()

    def run(i: int) -> None:
        try:
            if not stopped.is_set():
                fetch(i, stopped)
        except BaseException as exc:  # noqa: BLE001 - raised by the caller's thread, below
            failed[i] = exc
        finally:
            ended[i].release()

    pool = ThreadPoolExecutor(max_workers=min(SPANS, count))
    submitted = 0
    try:
        for i in range(count):
            while submitted < count and submitted - i < BUFFERS:
                begin(submitted)
                pool.submit(run, submitted)
                submitted += 1
            while not ended[i].acquire(timeout=0.2):
                if failed:  # a later job failed: no need to wait for this one
                    raise failed[min(failed)]
            if i in failed:
                raise failed[i]
            digest(i)
    except BaseException:
        stopped.set()
        with signals.deferred():
            client.interrupt()
        raise
    finally:
        stopped.set()
        join(pool)  # before the caller closes a file: nothing is written into a descriptor closed or reused
        client.resume()  # the client's next requests (a caller's, after this failure) wait for their answers again
