"""Downloading the blobs of a bundle into staged files (tau-bundle-fetch), or only hashing them (tau-bundle-verify
--deep): the sha256 of every byte, in order, however the bytes arrive.

Reads: blobs, through `taulib.bundle.rest`; and the ranges of a staged file just written, to hash them in order.
Writes: the file descriptors the caller opened (positional writes); nothing else. Promises:
- the large blobs first: ranged GETs of SPAN bytes (a file's last SPANS ranges TAIL bytes: `spans`), SPANS at a
  time over all the large blobs in turn, each streamed from the socket into its file `writeback.WRITE` bytes at
  a time by its transfer thread; this thread reads back, in order, what the range it waits for has written so
  far (the page cache), READ bytes at a time while the range arrives, and hashes it, so the digest is that of
  the bytes in the file, then has the kernel start writing each hashed range to disk (so the caller's fsync has
  little left to wait for); a blob is finished (checked, fsynced by the caller) when its last range is hashed,
  while the next blob's ranges arrive. Without a file (verify), ranges of RANGE bytes are held in memory (WINDOW
  buffers at most) and hashed from there;
- then the blobs of up to RANGE bytes, WORKERS at a time, each one GET into a buffer, written and hashed from
  there: over a direct connection all in this thread (`taulib.bundle.direct`, no thread per blob); through a
  proxy a transfer thread each;
- every request carries the blob's listed etag (If-Match); the blob must have exactly its listed size;
- transfer threads are joined before a call returns or raises, a stop signal or two notwithstanding; the first
  failure stops the rest, and no retry is waited for after it; a file the caller opened is closed by `finish`, or
  here when its transfer failed.
Memory: a buffer per transfer thread (only the pages a blob filled are resident), WINDOW of RANGE bytes without a
file.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

from taulib.bundle.blob import RANGE, WINDOW, WORKERS, _held_lock, _join, run_all
from taulib.bundle.rest import Client
from taulib.errors import CheckFailed
from taulib.fs import writeback

SPAN = 64 << 20  # bytes per ranged GET into a file: fewer requests cost the storage endpoint less CPU (Azurite)
# ranged GETs into files in flight: 4 of 64 MiB beat 8 of 32 in 5 of 5 rounds on one 1 GiB blob (median 2.50 s
# against 2.97; fewer threads hand the GIL around less) and matched them on the checkpoint mix
SPANS = 4
TAIL = 16 << 20  # bytes per range of a file's last SPANS ranges (see `spans`)
READ = 1 << 20  # bytes per read-back for hashing: stays in the CPU's cache between the copy and the hash
_local = threading.local()  # each thread's buffer


def _buffer() -> mmap.mmap:
    """This thread's buffer of RANGE bytes: anonymous memory, whose pages stay the kernel's zero page until written
    (a bytearray is zeroed through, so resident, at once)."""
    buffer = getattr(_local, "buffer", None)
    if buffer is None:
        buffer = _local.buffer = mmap.mmap(-1, RANGE)
    return buffer


def download(client: Client, name: str, fd: int | None, size: int, etag: str | None, progress=None) -> str:
    """Read blob `name` (into fd with positional writes, fd readable too; or nowhere when fd is None) and return
    its sha256. The blob must keep its etag and have exactly `size` bytes."""
    if size <= RANGE:
        return _small(client, name, fd, size, etag, progress, None)
    digests = {}
    _large(client, "", [{"path": name, "size": size}], {name: etag},
           None if fd is None else lambda entry: fd, lambda entry, sha, _fd: digests.update(sha=sha), progress,
           close=False)
    return digests["sha"]


def download_many(client: Client, prefix: str, entries: list[dict], etags: dict[str, str], open_fd, finish,
                  progress=None) -> None:
    """Download manifest entries, the large ones first. open_fd(entry) gives the file descriptor to write into
    (open for reading and writing), or open_fd is None: hash only; finish(entry, sha256, fd) checks and closes it.
    The first failure stops the rest."""
    _large(client, prefix, [e for e in entries if e["size"] > RANGE], etags, open_fd, finish, progress)
    if not getattr(client, "proxied", True):  # no thread per blob: `taulib.bundle.direct`
        from taulib.bundle import direct

        direct.download_small(client, prefix, [e for e in entries if e["size"] <= RANGE], etags, open_fd, finish,
                              progress)
        return
    stop = threading.Event()

    def one(entry: dict) -> None:
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


def _small(client: Client, name: str, fd: int | None, size: int, etag: str | None, progress, stop) -> str:
    view = memoryview(_buffer())[:size]
    client.read(name, etag, view, None, stop)
    if fd is not None:
        writeback.write_all(fd, view, 0)
    sha = hashlib.sha256(view)
    if progress:
        progress(size)
    return sha.hexdigest()


def _large(client: Client, prefix: str, entries: list[dict], etags: dict, open_fd, finish, progress,
           close: bool = True) -> None:
    """The large entries' ranges, SPANS (into files) or WINDOW (into memory) at a time in their order, each digested
    in this thread in that order."""
    if not entries:
        return
    jobs = [(entry, offset, length) for entry in entries
            for offset, length in spans(entry["size"], RANGE if open_fd is None else SPAN)]
    state: dict[str, list] = {}  # path: [fd, sha256]
    written: dict[tuple, int] = {}  # (path, offset) of a range into a file: its bytes in the file so far
    hashed: dict[tuple, int] = {}  # (path, offset): its bytes hashed so far (in order)
    spare: queue.SimpleQueue = queue.SimpleQueue()  # the in-memory ranges' buffers, reused
    readback = memoryview(bytearray(READ))

    def begin(job) -> None:
        entry, offset, _ = job
        if offset == 0:
            state[entry["path"]] = [open_fd(entry) if open_fd else None, hashlib.sha256()]

    def fetch(job, stopped: threading.Event):
        entry, offset, length = job
        name, fd = f"{prefix}/{entry['path']}" if prefix else entry["path"], state[entry["path"]][0]
        if fd is None:
            try:
                buffer = spare.get_nowait()
            except queue.Empty:
                buffer = mmap.mmap(-1, RANGE)
            view = memoryview(buffer)[:length]
            got = client.read(name, etag=etags.get(entry["path"]), view=view, start=offset, stop=stopped)
        else:
            view, key = None, (entry["path"], offset)

            def sink(piece, at) -> None:
                writeback.write_all(fd, piece, at)
                written[key] = at + len(piece) - offset

            got = client.stream(name, etags.get(entry["path"]), offset, length,
                                memoryview(_buffer())[:writeback.WRITE], sink, stopped)
        if got != length:
            raise CheckFailed(f"{name} ended early: {offset + got} of {entry['size']} bytes")
        return view

    def catch_up(job) -> bool:
        """Hash what has arrived of the range being waited for; whether there was any."""
        entry, offset, length = job
        key = (entry["path"], offset)
        end = offset + written.get(key, 0)
        at = offset + hashed.get(key, 0)
        if end - at < READ:
            return False
        fd, sha = state[entry["path"]]
        while end - at >= READ:
            n = os.preadv(fd, [readback], at)
            if n <= 0:
                raise CheckFailed(f"{entry['path']} is shorter on disk than what arrived ({at} bytes)")
            sha.update(readback[:n])
            at += n
        hashed[key] = at - offset
        return True

    def digest(job, view) -> None:
        entry, offset, length = job
        fd, sha = state[entry["path"]]
        if view is not None:
            sha.update(view)
            spare.put(view.obj)
        else:
            at, end = offset + hashed.pop((entry["path"], offset), 0), offset + length
            written.pop((entry["path"], offset), None)
            while at < end:
                n = os.preadv(fd, [readback[:min(READ, end - at)]], at)
                if n <= 0:
                    raise CheckFailed(f"{entry['path']} is shorter on disk than what arrived ({at} bytes)")
                sha.update(readback[:n])
                at += n
            # the range is hashed: its pages go to disk now, and the final fsync has less to wait for
            writeback.release(fd, offset, length)
        if progress:
            progress(length)
        if offset + length == entry["size"]:
            del state[entry["path"]]
            finish(entry, sha.hexdigest(), fd)

    try:
        _windowed(jobs, begin, fetch, digest, WINDOW if open_fd is None else SPANS,
                  None if open_fd is None else catch_up)
    finally:
        for fd, _ in state.values():  # the files whose transfer did not finish
            if fd is not None and close:
                os.close(fd)


def spans(size: int, span: int) -> list[tuple[int, int]]:
    """The (offset, length) of the ranged GETs of a blob of `size` bytes: `span` bytes each, except that into a
    file the last SPANS * TAIL bytes go in ranges of TAIL bytes, so that what is still to hash when the last byte
    arrives (the ranges in flight beside the one being hashed) is small."""
    tail = min(size, SPANS * TAIL) if span == SPAN else 0
    out, offset = [], 0
    while offset < size:
        length = min(span, size - tail - offset) if offset < size - tail else min(TAIL, size - offset)
        out.append((offset, length))
        offset += length
    return out


def _windowed(jobs: list, begin, fetch, digest, window: int, partial=None) -> None:
    """fetch(job, stopped) for every job on up to `window` threads, at most `window` jobs ahead of digest(job, what
    fetch returned), which runs in this thread in the jobs' order; begin(job) runs here before a job is handed
    out."""
    arrived: dict[int, object] = {}
    failed: dict[int, BaseException] = {}
    ended = [_held_lock() for _ in jobs]  # released by the job's thread when it ends
    stopped = threading.Event()

    def run(i: int) -> None:
        try:
            if not stopped.is_set():
                arrived[i] = fetch(jobs[i], stopped)
        except BaseException as exc:  # noqa: BLE001 - raised by the caller's thread, below
            failed[i] = exc
        finally:
            ended[i].release()

    pool = ThreadPoolExecutor(max_workers=min(window, len(jobs)))
    submitted = 0
    try:
        for i, job in enumerate(jobs):
            while submitted < len(jobs) and submitted - i < window:
                begin(jobs[submitted])
                pool.submit(run, submitted)
                submitted += 1
            while not ended[i].acquire(timeout=0.2 if partial is None else 0.005):
                if failed:  # a later job failed: no need to wait for this one
                    raise failed[min(failed)]
                if partial is not None:
                    while partial(job) and not failed:
                        pass
            if i in failed:
                raise failed[i]
            digest(job, arrived.pop(i))
    finally:
        stopped.set()
        _join(pool)  # before the caller closes a file: nothing is written into a descriptor closed or reused

