"""What every tau command shares: error translation, output, stdin, options.

A command module builds a click command with `command(...)`, parses its options, calls one taulib function and
returns the JSON-able result (or calls `emit`). This module is the only place that turns a TauError (or anything
unexpected) into the single JSON error object on stderr and an exit code from `taulib.errors.EXIT_CODES`. No
traceback reaches a user unless TAU_DEBUG=1.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import click

from taulib import __version__, failpoints, jsonio, signals
from taulib.errors import EXIT_CODES, INTERNAL, IO_ERROR, USAGE, BadInput, TauError

F = TypeVar("F", bound=Callable[..., Any])  # a command's function, as an option's decorator returns it

EPIPE_EXIT = 141  # what a C tool killed by SIGPIPE reports: the reader went away


def error_object(command: str, code: int, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = {"error": EXIT_CODES.get(code, ("error", ""))[0], "code": code, "command": command,
           "message": message if message.startswith(command + ":") else f"{command}: {message}"}
    if details:
        obj["details"] = details
    return obj


def write_error(command: str, code: int, message: str, details: dict[str, Any] | None = None) -> None:
    try:
        sys.stderr.buffer.write(jsonio.canonical(error_object(command, code, message, details)))
        sys.stderr.flush()
    except (BrokenPipeError, OSError):
        pass


class Stopped(BaseException):
    """A stop signal (SIGTERM, SIGHUP) reached a command: it unwinds like Ctrl-C, so the error object names the
    signal and the exit code is 128 + its number. A BaseException, as KeyboardInterrupt is, so that no `except
    Exception` on the way swallows it. Every commit protocol is crash-safe, so unwinding at any point is too."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _stopped(signum: int, _frame: object) -> None:
    _unwinding()
    raise Stopped(signum)


def _keyboard(_signum: int, _frame: object) -> None:
    _unwinding()
    raise KeyboardInterrupt


def _taken(_signum: int, _frame: object) -> None:
    """A stop signal after the first: the command is already unwinding, and ends by the first one. (A handler of
    Python's that does nothing, not SIG_IGN: Python raises an OSError for a signal that arrived just before it
    became ignored.)"""


def _unwinding() -> None:
    """The first stop signal unwinds the command, which ends by it; the ones after it change nothing. A second
    Ctrl-C or kill must neither cut short the clean-up the first one began (a stage being removed, transfer threads
    being joined) nor land inside a wait on a lock, where Python would leave the lock half taken (and fail, 70, to
    release it)."""
    for signum in signals.STOPS:
        if signal.getsignal(signum) in (_stopped, _keyboard):
            signal.signal(signum, _taken)


def _catch_stop_signals() -> None:
    """Turn SIGTERM and SIGHUP into `Stopped`, and SIGINT into KeyboardInterrupt, the first time only, where their
    action is still the default (a command that supervises a client, tau-attempt, installs its own for as long as
    it runs)."""
    defaults = {**{signum: (signal.SIG_DFL, _stopped) for signum in STOP_SIGNALS},
                signal.SIGINT: (signal.default_int_handler, _keyboard)}
    for signum, (default, handler) in defaults.items():
        try:
            if signal.getsignal(signum) is default:
                signal.signal(signum, handler)
        except ValueError:  # not the main thread (a test harness): the default action stays
            pass
    signals.relay_to_main()


def _interrupted(name: str, signum: int) -> int:
    signame = signal.Signals(signum).name
    write_error(name, 128 + signum, f"interrupted by {signame}", {"signal": signame})
    return 128 + signum


class StdoutClosed(Exception):
    """The reader of stdout went away (EPIPE). Not an OSError, which click itself would turn into exit 1."""


def emit(obj: object) -> None:
    """Print one JSON document (one line) on stdout."""
    emit_bytes(jsonio.canonical(obj))


def emit_bytes(data: bytes) -> None:
    """Write bytes on stdout, every one of them: a pipe's reader that goes away part way (`| head`) is noticed
    (StdoutClosed, exit 141), never taken for a complete write."""
    try:
        sys.stdout.flush()
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # not a real file (a test harness): its own write
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except BrokenPipeError:
        raise StdoutClosed() from None


def emit_text(text: str) -> None:
    emit_bytes((text if text.endswith("\n") else text + "\n").encode())


def read_stdin_json(what: str = "standard input") -> object:
    if sys.stdin is None or sys.stdin.closed:
        raise BadInput(f"{what} is empty; expected a JSON document")
    data = sys.stdin.buffer.read()
    if not data.strip():
        raise BadInput(f"{what} is empty; expected a JSON document")
    return jsonio.loads(data, what)


def run_command(name: str, cmd: click.Command, argv: list[str] | None = None) -> int:
    """Run a click command with tau's conventions and return the exit code."""
    args = sys.argv[1:] if argv is None else argv
    os.umask(0o077)  # everything tau and its clients create is private: 0600 files, 0700 folders
    _catch_stop_signals()
    failpoints.command = name  # what a qualified failpoint (`tau-collect:collect.staged`) and the trace name
    if any("\0" in arg for arg in args):  # no exec(2) can pass one; a caller in this process could
        write_error(name, USAGE, "an argument holds a NUL character", None)
        return USAGE
    try:
        cmd.main(args=args, prog_name=name, standalone_mode=False)
        code = 0
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.exceptions.Abort:
        code = _interrupted(name, signal.SIGINT)
    except click.ClickException as exc:
        write_error(name, USAGE, exc.format_message(), None)
        code = USAGE
    except TauError as exc:
        write_error(name, exc.code, exc.message, exc.details or None)
        code = exc.code
    except (BrokenPipeError, StdoutClosed):
        code = EPIPE_EXIT
    except KeyboardInterrupt:
        code = _interrupted(name, signal.SIGINT)
    except Stopped as exc:
        code = _interrupted(name, exc.signum)
    except OSError as exc:  # the operating system said no: a full disk, a read-only or vanished filesystem, ...
        where = f" ({exc.filename})" if exc.filename else ""
        write_error(name, IO_ERROR, f"{exc.strerror or exc}{where}; nothing that was committed is lost, "
                    "run the command again once the cause is gone", {"errno": exc.errno})
        code = IO_ERROR
    except Exception as exc:  # noqa: BLE001 - the last line of defence: never a traceback
        from taulib import env

        if env.get("TAU_DEBUG"):
            raise
        write_error(name, INTERNAL, f"internal error ({type(exc).__name__}: {exc}); please report it with "
                     "TAU_DEBUG=1 output")
        code = INTERNAL
    return code


def main_for(name: str, cmd: click.Command, settings: Callable[[], dict[str, str]] | None = None,
             by_signal: bool = False) -> Callable[[], None]:
    """The program's entry point: run `cmd` and exit with its code. With `settings` (environment variables that act
    only as a process starts, such as the allocators'), a process that lacks some first starts itself again with
    them (`restart_with`). With `by_signal` (a command a scheduler runs and judges by how it ended, tau-attempt), a
    stop signal ends it by that same signal once it is reported, wherever it arrived, never by an exit status
    128 + N, which a scheduler reads as a failure."""

    def main() -> None:
        if settings is not None:
            restart_with(settings())
        code = run_command(name, cmd)
        if code == EPIPE_EXIT:
            # stdout is gone: make interpreter shutdown's flush quiet too.
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except OSError:
                pass
        stopped_by = code - 128 if by_signal and code - 128 in (signal.SIGINT, *STOP_SIGNALS) else None
        if stopped_by is not None or signal.getsignal(signal.SIGTERM) is _taken \
                or signal.getsignal(signal.SIGINT) is _taken:
            # stopped, cleaned up and reported: end now, before the interpreter's shutdown gives the stop signals
            # their default action back (one more would kill it, and its exit status would be that signal's)
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            if stopped_by is not None:
                signal.signal(stopped_by, signal.SIG_DFL)
                os.kill(os.getpid(), stopped_by)
            os._exit(code)
        sys.exit(code)

    return main


def restart_with(extra: dict[str, str]) -> None:
    """Replace this process (same PID, arguments, standard streams) by the same program with `extra` added to its
    environment, and TAU_RESTARTED=1, so that it is done once at most; nothing happens when `extra` is empty, when
    this process was started that way already, when the program was not started from a file or a module
    (`python -c`, a script on stdin), or when exec fails (the command then runs as it is).
    Reads: the process environment. Writes: nothing."""
    from taulib import env

    if not extra or env.get("TAU_RESTARTED") or not sys.orig_argv or sys.argv[0] in ("", "-", "-c"):
        return
    environ = env.current()
    environ.update(extra, TAU_RESTARTED="1")
    try:
        os.execve(sys.executable, sys.orig_argv, environ)
    except OSError:
        return


def command(name: str, summary: str, example: str) -> Callable[[Callable[..., Any]], click.Command]:
    """Decorator: a click command with --help (summary and example) and --version."""

    def wrap(func: Callable[..., Any]) -> click.Command:
        epilog = "\b\nExample:\n" + "\n".join("  " + line for line in example.strip().splitlines())
        epilog += f"\n\nExit codes and records: man {name}; man 5 tau-run."
        cmd = click.command(name=name, help=summary, epilog=epilog,
                            context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})(func)
        cmd = click.version_option(__version__, "--version", prog_name=name,
                                   message="%(prog)s %(version)s")(cmd)
        return cmd

    return wrap


def watch(read: Callable[[], dict[str, Any]], render: Callable[[dict[str, Any]], str],
          done: Callable[[dict[str, Any]], bool], interval: float, what: str) -> None:
    """Render `read()` again whenever it changes (the screen cleared on a terminal), until `done(doc)`; a source
    that does not answer (Unavailable) is shown and asked again. Once `done` holds, the source is read once more and
    that is the last frame (drawn when it differs, and the end only if `done` still holds): what ended is shown as it
    settled, never a frame read while it was ending. Ends with 130 on Ctrl-C, like any command."""
    import time

    from taulib.errors import Unavailable

    tty = sys.stdout.isatty()
    shown = None
    confirming = False
    while True:
        try:
            doc = read()
            text, finished = render(doc), done(doc)
        except Unavailable as exc:
            text, finished = f"cannot read {what}: {exc.message}\n", False
        if finished and not confirming:
            confirming = True  # read again, at once, and draw that
            continue
        confirming = False
        if text != shown:
            emit_text(("\x1b[H\x1b[2J" if tty else "" if shown is None else "\n") + text.rstrip("\n"))
            shown = text
        if finished:
            return
        time.sleep(interval)


if TYPE_CHECKING:  # generic from click 8.4 on (what a parameter converts to), a plain class before it
    _ParamType = click.ParamType[str]
else:
    _ParamType = click.ParamType


class ShardType(_ParamType):
    """A shard as a person names it: `shard-00007`, or its number (`7`, `007`, `shard-7`), given to the command as
    the canonical id (`layout.canonical_shard_id`); what is no shard's name reaches the library as it was typed,
    which refuses it as it refuses a shard beyond the run (66, not found)."""

    name = "shard_id"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from taulib.rundir import layout

        return layout.canonical_shard_id(str(value))


SHARD = ShardType()  # type=common.SHARD on every option or argument that takes a shard id


def output_option(func: F) -> F:
    return click.option("-o", "--output", "output", type=click.Choice(["json", "table"]), default="json",
                        show_default=True, help="json for programs, table for people.")(func)


def progress_option(func: F) -> F:
    """--progress/--no-progress: None when neither is given (then progress shows when stderr is a terminal)."""
    return click.option("--progress/--no-progress", "progress", default=None,
                        help="Show progress on standard error (rows or files and bytes done, rate, time left), or "
                             "not; default: only when standard error is a terminal.")(func)


def run_dir_argument(func: F) -> F:
    return click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False, path_type=str))(func)
