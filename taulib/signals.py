"""Clean-up that a stop signal cannot cut short: a stage removed, a claim released, transfer threads joined.

Reads and writes nothing. A command turns SIGTERM, SIGHUP and SIGINT into exceptions that unwind it
(`taulib.cli.common`); the clean-up on the way out (removing a fetch's or a collection's stage) must not itself be
interrupted by a second signal (Ctrl-C pressed twice, a SIGTERM after a SIGINT), or it would leave half a stage.
Promises: inside `deferred()`, those signals are only noted; when the block ends the previous handlers are back
and the first noted signal is raised again, so it takes effect exactly as it would have, only later. In a thread
other than the main one (where Python runs no signal handler anyway) it does nothing.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP for the duration of the block, then deliver the first one that came."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []

    def note(signum: int, _frame: object) -> None:
        noted.append(signum)

    previous = {}
    try:
        for signum in STOPS:
            previous[signum] = signal.signal(signum, note)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        if noted:
            signal.raise_signal(noted[0])
