"""Processes tau owns: known by pid and start time (so a recycled pid is never mistaken for one of ours), adopted
when their parents die, and stopped to the last one (tau-run(5) "Processes").

An allocation (tau-attempt run) and a local executor's supervisor each make themselves the subreaper of what they
start (`become_subreaper`, Linux's PR_SET_CHILD_SUBREAPER): a process that leaves its parent behind (a client's
server started with `setsid`, a service's worker whose server died) is then adopted by them instead of by init, and
`sweep` stops whatever of it is left, naming each process, as Slurm's cgroup does on a real cluster. A service is
started with `parent_death` so that the kernel stops it if its allocation is killed before it could stop it.

Reads /proc (the process table, each process's stat and command line). Writes nothing; signals only processes that
are children of this process, or that it started.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
COMMAND_CHARS = 200  # characters of a command line kept when a process is named
POLL = 0.05  # seconds between looks while processes stop


def module_argv(module: str, *args: str) -> list[str]:
    """The command line that runs a module of tau in a new interpreter (this one), never a module that a folder
    named like tau's in the working directory holds: `-P`, so that `-m` does not put the working directory first on
    the module path (a local supervisor or task inherits the caller's)."""
    return [sys.executable, "-P", "-m", module, *args]


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None for a process that is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text[text.rfind(")") + 2:].split() or None


def start_ticks(pid: int) -> int | None:
    """Start time of a live, non-zombie process in clock ticks since boot, or None."""
    fields = _stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def alive(pid: int, ticks: int) -> bool:
    """Whether process `pid` is the live process that started at `ticks`."""
    return start_ticks(pid) == ticks


def _prctl() -> Callable[..., int] | None:
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function: Callable[..., int] = libc.prctl
        return function
    except (OSError, AttributeError):
        return None


def become_subreaper() -> bool:
    """Make this process the one that adopts its descendants whose parents die (Linux 3.4 and later); False where
    the system does not allow it."""
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def parent_death(signum: int) -> Callable[[], None]:
    """A function for `subprocess.Popen(preexec_fn=...)` after which the child gets `signum` when this process
    dies (PR_SET_PDEATHSIG); a child whose parent died before it was set ends at once. Made before the fork, so
    that the child only calls what is loaded already; call it before this process starts any thread."""
    prctl = _prctl()
    parent = os.getpid()

    def preexec() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)

    return preexec


def children(parent: int | None = None) -> list[int]:
    """The pids of the processes whose parent is `parent` (default: this process), zombies included, sorted."""
    parent = os.getpid() if parent is None else parent
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if fields is not None and len(fields) > 1 and fields[1] == str(parent):
                found.append(int(name))
    return sorted(found)


def tree_rss(roots: list[int]) -> dict[int, int]:
    """{root: the resident memory, in bytes, of that process and every process descended from it}, from one pass
    over the process table (as Slurm's jobacct_gather/linux sums a step's processes); 0 for a root that is gone."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if fields is not None and len(fields) > 21 and fields[0] not in ("Z", "X"):
                parents[int(name)] = int(fields[1])
                rss[int(name)] = int(fields[21]) * page
    total = dict.fromkeys(roots, 0)
    for pid, size in rss.items():
        seen, up = 0, pid
        while up not in total and up in parents and seen < 64:  # the nearest root above it, if any
            up, seen = parents[up], seen + 1
        if up in total:
            total[up] += size
    return total


def command_line(pid: int) -> str:
    """A process's command line, its arguments joined by spaces, without control characters, COMMAND_CHARS
    characters at most ("" when it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read(4 * COMMAND_CHARS)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    text = "".join(c if c.isprintable() else " " for c in text)
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 3] + "..."


def signal_tree(pid: int, signum: int) -> None:
    """Signal a process and, when it leads a process group, its whole group."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def reap(pid: int) -> bool:
    """Collect a child's exit if it has ended; whether it is gone (ended and collected, or not a child)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid


def sweep(keep: frozenset[int] = frozenset(), grace: float = 5.0, patience: float = 30.0) -> list[dict[str, object]]:
    """Stop every child of this process but `keep` (what it still waits for itself): SIGTERM to each (and to the
    group it leads), SIGKILL `grace` seconds later to what is left, each one collected, again for what they leave in
    turn, for `patience` seconds at most. Returns each process stopped as {pid, command}, in the order found."""
    named: dict[int, dict[str, object]] = {}
    told: dict[int, float] = {}
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        left = [pid for pid in children() if pid not in keep and not reap(pid)]
        if not left:
            break
        now = time.monotonic()
        for pid in left:
            if pid not in told:
                command = command_line(pid)
                if command:  # a zombie has none: it only waits to be collected
                    named[pid] = {"pid": pid, "command": command}
                told[pid] = now
                signal_tree(pid, signal.SIGTERM)
            elif now - told[pid] >= grace:
                signal_tree(pid, signal.SIGKILL)
        time.sleep(POLL)
    return list(named.values())
