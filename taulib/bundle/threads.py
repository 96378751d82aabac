"""The threads a bundle transfer runs on (uploads, downloads, the reading of other generations' manifests), and the
one wait on them that a stop signal may cut at any moment.

Reads and writes nothing itself (the calls it runs do). Promises: no thread started here outlives the call that
started it, a stop signal or two notwithstanding (`run_all`, `join`); the first failure of a call is raised in the
caller's thread once the others have ended; a `held_lock` is released by another thread and waited on with
`acquire`, which a stop signal can interrupt without leaving a lock half taken.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable, TypeVar

from taulib import signals

_T = TypeVar("_T")


def run_all(items: list[_T], fn: Callable[[_T], None], workers: int, stop: threading.Event | None = None) -> None:
    """fn(item) for every item on `workers` threads; the first failure cancels what has not started and is
    raised once the running calls have returned (no call outlives this function, whatever signals come). `stop`
    is set as soon as a call failed or the caller is leaving (a signal): calls waiting to retry give up."""
    if not items:
        return
    failed: list[BaseException] = []
    left = [len(items), False]  # calls not ended yet; whether `finished` was released
    count = threading.Lock()
    finished = held_lock()  # released once: every call ended, or one failed

    def one(item: _T) -> None:
        try:
            if not failed:
                fn(item)
        except BaseException as exc:  # noqa: BLE001 - raised by the caller's thread, below
            failed.append(exc)
            if stop is not None:
                stop.set()
        finally:
            with count:
                left[0] -= 1
                if (failed or not left[0]) and not left[1]:
                    left[1] = True
                    finished.release()

    pool = ThreadPoolExecutor(max_workers=min(workers, len(items)))
    try:
        for item in items:
            pool.submit(one, item)
        finished.acquire()
        if failed:
            raise failed[0]
    finally:
        if stop is not None:
            stop.set()
        join(pool)


def held_lock() -> threading.Lock:
    """A lock held by nobody in particular, for another thread to release: waiting on it (`acquire`) is the one
    wait that a stop signal can interrupt at any moment without leaving a lock half taken (a Condition's or a
    Future's wait can be cut between its wake-up and its re-acquire, and then fails to release)."""
    lock = threading.Lock()
    lock.acquire()
    return lock


def join(pool: ThreadPoolExecutor) -> None:
    """Cancel what has not started and wait for what runs: a thread never writes into a stage being removed."""
    with signals.deferred():
        pool.shutdown(wait=True, cancel_futures=True)


def raise_first(futures: Iterable[Future[Any]]) -> None:
    """Raise the failure of the first of `futures` that ended with one (nothing when none did)."""
    for future in futures:
        if future.done() and not future.cancelled():
            error = future.exception()
            if error is not None:
                raise error
