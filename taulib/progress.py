"""Progress on standard error for the commands that move bulk data (tau-collect, tau-bundle-fetch, tau-bundle-verify):
what is done (rows or files, and bytes), the rate and the time left.

Reads: nothing. Writes: standard error only, never standard output (which carries the command's one JSON
document). Promises:
- a meter writes only when it is enabled: by default when standard error is a terminal, or as a command's
  `--progress` / `--no-progress` says; a disabled meter writes nothing at all and costs one test per call;
- on a terminal one line is redrawn in place (carriage return, erased to its end, cut to the terminal's width) at
  most every INTERVAL seconds; into a file or a pipe (forced with --progress) it appends one line at most every
  PIPE_INTERVAL seconds;
- `close()` draws the final state and ends the line with a newline, so what the command writes after it (its JSON
  error, when it failed) starts on a line of its own;
- it is safe to call from several threads (bundle transfers); the rate is the average since the start, the time
  left that rate applied to what remains of the known total.
Cheap to import: the standard library's os, sys, time and threading only (a command that never shows progress pays
nothing for it).
"""

from __future__ import annotations

import os
import sys
import threading
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (the type checker reads it as True)
if TYPE_CHECKING:
    from typing import Callable, TextIO

INTERVAL = 0.2  # seconds between redraws on a terminal
PIPE_INTERVAL = 1.0  # seconds between lines into a file or a pipe
MIB = 1 << 20


def enabled(choice: bool | None, stream: TextIO | None = None) -> bool:
    """Whether to show progress: `choice` (a command's --progress / --no-progress) when given, else whether the
    stream (standard error) is a terminal."""
    if choice is not None:
        return choice
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):  # closed, or not a real file
        return False


class Meter:
    """A progress line for `label` ("collecting", "fetching g7"). `count` counts `unit` (rows, files) out of
    `total_count`; `nbytes` counts bytes out of `total_bytes`; either total may be None (unknown). The share done,
    and so the time left, follows the bytes when their total is known, else the count."""

    def __init__(self, label: str, *, unit: str, total_count: int | None = None, total_bytes: int | None = None,
                 bytes_word: str = "", show: bool | None = None, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled(show, self.stream)
        self.label, self.unit, self.bytes_word = label, unit, bytes_word
        self.total_count, self.total_bytes = total_count, total_bytes
        self.count = self.nbytes = 0
        self.clock = clock
        self.started = clock()
        self.drawn = 0.0  # when the last line was drawn (0: never)
        self.tty = self.enabled and _isatty(self.stream)
        self.interval = INTERVAL if self.tty else PIPE_INTERVAL
        self.lock = threading.Lock()

    def add(self, count: int = 0, nbytes: int = 0) -> None:
        """Count `count` more units and `nbytes` more bytes done; redraws when the last line is old enough."""
        if not self.enabled:
            return
        with self.lock:
            self.count += count
            self.nbytes += nbytes
            now = self.clock()
            if now - (self.drawn or self.started) >= self.interval:
                self._draw(now, final=False)

    def __call__(self, nbytes: int) -> None:
        """Bytes done (the callback of `bundle.blob.download`)."""
        self.add(0, nbytes)

    def close(self) -> None:
        """Draw the final state and end the line (nothing when disabled, or when nothing was done nor drawn)."""
        if not self.enabled:
            return
        with self.lock:
            if self.drawn or self.count or self.nbytes:
                self._draw(self.clock(), final=True)
            self.enabled = False

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def line(self, now: float) -> str:
        """The progress line at monotonic time `now`."""
        elapsed = max(now - self.started, 1e-9)
        count = f"{self.count:,}" + (f"/{self.total_count:,}" if self.total_count is not None else "") + f" {self.unit}"
        size = (_mib(self.nbytes) + (f"/{_mib(self.total_bytes)}" if self.total_bytes is not None else "") + " MiB"
                + (f" {self.bytes_word}" if self.bytes_word else ""))
        by_bytes = self.total_bytes is not None
        done, total = (self.nbytes, self.total_bytes) if by_bytes else (self.count, self.total_count)
        share = f" ({100 * done // total if total else 100}%)" if total is not None else ""
        if by_bytes:
            fields = [size + share, count]
        else:
            fields = [count + share, size, f"{_si(self.count / elapsed)} {self.unit}/s"]
        fields += [f"{_mib(self.nbytes / elapsed)} MiB/s", f"ETA {_eta(done, total, elapsed)}"]
        return f"{self.label}: " + ", ".join(fields)

    def _draw(self, now: float, final: bool) -> None:
        text = self.line(now)
        if self.tty:
            width = _width(self.stream)
            text = "\r" + text[:width - 1] + "\x1b[K" + ("\n" if final else "")
        else:
            text += "\n"
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # stderr went away: nothing to show progress on any more
            self.enabled = False
        self.drawn = now


def _mib(n: float) -> str:
    return f"{n / MIB:,.1f}"


def _si(n: float) -> str:
    return f"{n:.0f}" if n < 1e3 else f"{n / 1e3:.1f}k" if n < 1e6 else f"{n / 1e6:.1f}M"


def _eta(done: int, total: int | None, elapsed: float) -> str:
    if total is None:
        return "--:--:--"
    left = max(total - done, 0)
    if not left:
        return "0:00:00"
    if not done or elapsed < 0.5:
        return "--:--:--"
    seconds = int(left * elapsed / done)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _width(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80  # 0: a terminal that never said its size
    except (AttributeError, ValueError, OSError):
        return 80
