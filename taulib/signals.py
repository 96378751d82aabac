"""Clean-up that a stop signal cannot cut short: a stage removed, a claim released, transfer threads joined.

Reads and writes nothing. A command turns SIGTERM, SIGHUP and SIGINT into exceptions that unwind it
(`taulib.cli.common`); the clean-up on the way out (removing a fetch's or a collection's stage) must not itself be
interrupted by a second signal (Ctrl-C pressed twice, a SIGTERM after a SIGINT), or it would leave half a stage.
Promises: inside `deferred()`, those signals are only noted; when the block ends the previous handlers are back
and the first noted signal is raised again, so it takes effect exactly as it would have, only later. In a thread
other than the main one (where Python runs no signal handler anyway) it does nothing.

Also: a signal takes effect at once even while the main thread waits. Python runs handlers in the main thread
only, and the kernel may hand a process's signal to any of its threads (Linux 6 does, to an idle pyarrow or
transfer thread, while the main one sleeps); the main thread would then notice it only when its wait ends (60 s
later, or never). `relay_to_main()` closes that gap: every caught signal is also written to a wakeup pipe, and a
small daemon thread reading it interrupts the main thread with SIGURG (caught, and ignored), whose interrupted
wait then runs the pending handlers.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WAKE = signal.SIGURG  # ignored by default, so harmless wherever it lands; used by nothing else in a Python process


def relay_to_main() -> bool:
    """From now on a signal caught by Python interrupts the main thread's wait wherever the kernel delivered it.
    Called once, from the main thread, by every command at start; False where it cannot be (another thread, or a
    wakeup fd already set by someone else, which is then left alone)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    read_end, write_end = os.pipe()  # close-on-exec, both
    os.set_blocking(write_end, False)  # the signal handler must never block on a full pipe
    before = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    if before != -1:  # already relayed (a second command in this process), or someone else's: put it back
        signal.set_wakeup_fd(before)
        os.close(read_end)
        os.close(write_end)
        return False
    signal.signal(WAKE, _woken)
    main = threading.main_thread().ident
    threading.Thread(target=_relay, args=(read_end, main), name="tau-signal-relay", daemon=True).start()
    return True


def _woken(_signum: int, _frame: object) -> None:
    """SIGURG's handler: nothing; being delivered (and interrupting the main thread's wait) is its whole job."""


def _relay(read_end: int, main: int) -> None:
    while True:
        try:
            caught = os.read(read_end, 64)  # one byte per caught signal: its number
        except InterruptedError:
            continue
        if not caught:
            return
        if any(signum != WAKE for signum in caught):  # WAKE's own bytes: the main thread is already awake
            try:
                signal.pthread_kill(main, WAKE)
            except (ProcessLookupError, OSError):  # the main thread has ended: nothing to wake
                return


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
