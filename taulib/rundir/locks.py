"""Sidecar locks (portalocker) on files in `RUN/locks/`, taken in one documented order, with timeouts.

Reads and Writes: only the lock files, which are never data files; they live in `RUN/locks/` and are created 0600
through the writer (`RunDir.open_lock_file`). Promises: the order below is enforced within a process (a violation
is a bug: AssertionError), and a lock is never held on a lock file that was replaced meanwhile.
Order (a process that holds a lock may only take locks that come later in this list):

  1. `drive.lock`           tau-drive's cycle of a run (held for the whole cycle; never by an allocation)
     `resume-<shard>.lock`  a resumable shard's dataset workspace (held for a whole allocation)
  2. `run.lock`             shared by every command; exclusive only while a run is created
  3. `status.lock`          the status file kept beside the run (tau-reconcile --status-file): its writers take
                            turns, so that a newer status is never replaced by an older one
  4. `submit.lock`          the submission journal (tau-submit, tau-retry)
     `collect.lock`         the collection journal (tau-collect)
     `index.lock`           the sealed-shard index, every segment (a winner's publisher, tau-reconcile)
     `bundles.lock`         the run's bundle records (tau-bundle-seal --record)
     `usage.lock`           what the submissions' tasks used (tau-reconcile)
  5. `root.lock`            the records in the run's top folder written after tau-init (cancel.json, schema.json)
  6. `shard-<NNNNN>.lock`   one shard's records, in ascending shard order when several are held

Apart from the order: `local-slot-K.lock` and `local-gpu-K.lock`, a live local task's place (of the run's
max_parallel) and its GPUs, taken by the local executor's supervisor with `try_hold` (never waited for), and held
through one open file, shared with the task's process, for as long as either lives.

A lock not granted within the timeout (`TAU_LOCK_TIMEOUT` seconds, default 30) raises Busy (exit 75).
portalocker uses flock(2) on Linux, which NFS (v4, or v3 with lockd) and Lustre (mounted with `flock`) support.
portalocker is imported only when a lock is actually taken.
"""

from __future__ import annotations

import os
import sys
import time
import types
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO, Iterator

from taulib import env
from taulib.errors import Busy

if TYPE_CHECKING:
    from taulib.fs.tree import Tree


def _skip_version_lookup() -> None:
    """Let portalocker be imported without its version lookup.

    portalocker's `__about__` imports importlib.metadata (about 25 ms, half the start-up budget of a fast command)
    only to learn its own version, which tau never reads. A stand-in for that one module is registered before
    portalocker is first imported; the locking code itself is portalocker's own.
    """
    if "portalocker" not in sys.modules and "portalocker.__about__" not in sys.modules:
        about = types.ModuleType("portalocker.__about__")
        about.__dict__.update(__package_name__="portalocker", __author__="", __email__="", __version__="unknown",
                              __description__="", __url__="")
        sys.modules["portalocker.__about__"] = about


def timeout_seconds() -> float:
    return env.get("TAU_LOCK_TIMEOUT")


def _rank(name: str) -> tuple[int, str]:
    if name.startswith("resume-") or name == "drive":
        return (1, name)
    if name == "run":
        return (2, name)
    if name == "status":
        return (3, name)
    if name in ("submit", "collect", "index", "bundles", "usage"):
        return (4, name)
    if name == "root":
        return (5, name)
    return (6, name)


class _Held:
    """Locks held by this process, to enforce the documented order."""

    stack: list[tuple[int, str]] = []


@contextmanager
def hold(tree: Tree, name: str, shared: bool = False, timeout: float | None = None) -> Iterator[None]:
    """Hold lock `name` of `tree` (a run's `RunDir`, or any folder whose locks live in its `locks/`) for the
    duration of the block."""
    _skip_version_lookup()
    import portalocker

    rank = _rank(name)
    if _Held.stack and rank <= _Held.stack[-1]:
        raise AssertionError(f"lock order violated: {name} after {_Held.stack[-1][1]}")
    rel = f"locks/{name}.lock"
    limit = timeout_seconds() if timeout is None else timeout
    flags = (portalocker.LOCK_SH if shared else portalocker.LOCK_EX) | portalocker.LOCK_NB
    deadline = time.monotonic() + limit
    pause = 0.005
    while True:
        fd = tree.open_lock_file(rel)
        fh = os.fdopen(fd, "r+b", buffering=0)
        try:
            portalocker.lock(fh, flags)
        except portalocker.exceptions.LockException:
            fh.close()
            if time.monotonic() >= deadline:
                raise Busy(f"{tree.path!r} is busy: another tau process holds {rel} (waited {limit:g}s); "
                           "try again", lock=rel, path=tree.path) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
            continue
        if tree.same_file(rel, fd):
            break
        fh.close()  # the lock file was replaced under us: take the lock on the new one
    _Held.stack.append(rank)
    try:
        yield
    finally:
        _Held.stack.pop()
        try:
            portalocker.unlock(fh)
        finally:
            fh.close()


def shard_lock_name(shard_id: str) -> str:
    return shard_id  # "shard-00007"


def resume_lock_name(shard_id: str) -> str:
    return f"resume-{shard_id}"


def try_hold(tree: Tree, name: str) -> BinaryIO | None:
    """Lock `name` exclusively if it is free now, without waiting: the open lock file (the lock lasts while it, or
    a copy a child process inherited, stays open; close it to let go), or None when another process holds it.
    Outside the order: never waited for, it can hold up nobody who holds it."""
    _skip_version_lookup()
    import portalocker

    rel = f"locks/{name}.lock"
    while True:
        fd = tree.open_lock_file(rel)
        fh = os.fdopen(fd, "r+b", buffering=0)
        try:
            portalocker.lock(fh, portalocker.LOCK_EX | portalocker.LOCK_NB)
        except portalocker.exceptions.LockException:
            fh.close()
            return None
        if tree.same_file(rel, fd):
            return fh
        fh.close()  # the lock file was replaced under us: try the new one
