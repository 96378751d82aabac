"""Reading an input's files: opened without following a symlink, hashed beside the work, and the errors that say
the input is no longer what the run's index recorded.

Reads: input files, by the paths the index records (never written). Writes: nothing.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")

READ = 4 << 20  # bytes read at a time


class Changed(Exception):
    """An input file is not what the run's index recorded (its bytes, its size), or is gone: the attempt fails
    "input changed", not retried."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unreadable(Exception):
    """An input piece matches its digest but cannot be decoded (a Parquet page tau-init did not read)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def open_file(path: str) -> int:
    """A read descriptor of the regular file `path`, never through a symlink as its last part (`fs.openat`: OSError,
    ELOOP for a symlink; ValueError for what is not a regular file)."""
    from taulib.fs import openat

    return openat.open_regular(path)


def gone(path: str, exc: OSError | ValueError, shown: str) -> Changed:
    """The error of an input file that cannot be opened as the regular file it was."""
    if isinstance(exc, FileNotFoundError):
        return Changed(f"input changed: {shown} ({path}) was moved or deleted since the run was made")
    if isinstance(exc, OSError) and exc.errno == 40:  # ELOOP: a symlink now
        return Changed(f"input changed: {shown} ({path}) is now a symbolic link; tau never follows one it did not "
                       "index")
    why = exc.strerror if isinstance(exc, OSError) else str(exc)
    return Changed(f"input changed: {shown} ({path}) cannot be read as the file it was: {why}")


class Beside:
    """A sha256 of chunks (and of pieces of them, into hashes of their own) computed on a second thread while the
    caller works on the same chunks (hashlib lets go of the interpreter lock): one chunk in flight at a time, never
    changed while it is hashed."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.pool = ThreadPoolExecutor(2, thread_name_prefix="tau-input-hash")  # the hashes, and one task (`run`)
        self.pending: Future[None] | None = None

    def update(self, chunk: bytes, parts: list[tuple[Any, memoryview]] | None = None) -> None:
        """Hash `chunk`, then each (hash, bytes) of `parts`, on the second thread."""
        self._wait()
        self.pending = self.pool.submit(self._hash, chunk, parts or [])

    def run(self, task: Callable[..., T], *args: Any) -> Future[T]:
        """Run one more task beside the hashes (a reader in C++ that lets go of the interpreter lock too)."""
        return self.pool.submit(task, *args)

    def _hash(self, chunk: bytes, parts: list[tuple[Any, memoryview]]) -> None:
        self.sha.update(chunk)
        for sha, view in parts:
            sha.update(view)

    def _wait(self) -> None:
        if self.pending is not None:
            self.pending.result()
            self.pending = None

    def hexdigest(self) -> str:
        self._wait()
        return self.sha.hexdigest()

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def hash_range(fd: int, offset: int, length: int, sink: int | None = None) -> str:
    """The sha256 of `length` bytes of `fd` from `offset`, copied to the same offset of `sink` when given (a
    private sparse copy that only verified bytes reach); a file that ends early hashes what it has."""
    sha = hashlib.sha256()
    done = 0
    while done < length:
        chunk = os.pread(fd, min(READ, length - done), offset + done)
        if not chunk:
            break
        sha.update(chunk)
        if sink is not None:
            os.pwrite(sink, chunk, offset + done)
        done += len(chunk)
    return sha.hexdigest()
