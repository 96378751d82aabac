"""What every tau command shares: error translation, output, stdin, options.

A command module builds a click command with `command(...)`, parses its options, calls one taulib function and
returns the JSON-able result (or calls `emit`). This module is the only place that turns a TauError (or anything
unexpected) into the single JSON error object on stderr and an exit code from `taulib.errors.EXIT_CODES`. No
traceback reaches a user unless TAU_DEBUG=1.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

import click

from taulib import __version__, jsonio
from taulib.errors import EXIT_CODES, INTERNAL, USAGE, BadInput, TauError

EPIPE_EXIT = 141  # what a C tool killed by SIGPIPE reports: the reader went away


def error_object(command: str, code: int, message: str, details: dict | None = None) -> dict:
    obj = {"error": EXIT_CODES.get(code, ("error", ""))[0], "code": code, "command": command,
           "message": message if message.startswith(command + ":") else f"{command}: {message}"}
    if details:
        obj["details"] = details
    return obj


def write_error(command: str, code: int, message: str, details: dict | None = None) -> None:
    try:
        sys.stderr.buffer.write(jsonio.canonical(error_object(command, code, message, details)))
        sys.stderr.flush()
    except (BrokenPipeError, OSError):
        pass


class StdoutClosed(Exception):
    """The reader of stdout went away (EPIPE). Not an OSError, which click itself would turn into exit 1."""


def emit(obj: object) -> None:
    """Print one JSON document (one line) on stdout."""
    try:
        sys.stdout.buffer.write(jsonio.canonical(obj))
        sys.stdout.flush()
    except BrokenPipeError:
        raise StdoutClosed() from None


def emit_bytes(data: bytes) -> None:
    """Write raw bytes on stdout (an attempt's output), flushed."""
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        raise StdoutClosed() from None


def emit_text(text: str) -> None:
    try:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise StdoutClosed() from None


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
    try:
        cmd.main(args=args, prog_name=name, standalone_mode=False)
        code = 0
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.exceptions.Abort:
        write_error(name, 130, "interrupted")
        code = 130
    except click.ClickException as exc:
        write_error(name, USAGE, exc.format_message(), None)
        code = USAGE
    except TauError as exc:
        write_error(name, exc.code, exc.message, exc.details or None)
        code = exc.code
    except (BrokenPipeError, StdoutClosed):
        code = EPIPE_EXIT
    except KeyboardInterrupt:
        write_error(name, 130, "interrupted")
        code = 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: never a traceback
        from taulib import env

        if env.get("TAU_DEBUG"):
            raise
        write_error(name, INTERNAL, f"internal error ({type(exc).__name__}: {exc}); please report it with "
                     "TAU_DEBUG=1 output")
        code = INTERNAL
    return code


def main_for(name: str, cmd: click.Command) -> Callable[[], None]:
    def main() -> None:
        code = run_command(name, cmd)
        if code == EPIPE_EXIT:
            # stdout is gone: make interpreter shutdown's flush quiet too.
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except OSError:
                pass
        sys.exit(code)

    return main


def command(name: str, summary: str, example: str, **settings) -> Callable[[Callable], click.Command]:
    """Decorator: a click command with --help (summary and example) and --version."""

    def wrap(func: Callable) -> click.Command:
        epilog = "\b\nExample:\n" + "\n".join("  " + line for line in example.strip().splitlines())
        epilog += f"\n\nExit codes and records: man {name}; man 5 tau-run."
        cmd = click.command(name=name, help=summary, epilog=epilog,
                            context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
                            **settings)(func)
        cmd = click.version_option(__version__, "--version", prog_name=name,
                                   message="%(prog)s %(version)s")(cmd)
        return cmd

    return wrap


def watch(read: Callable[[], dict], render: Callable[[dict], str], done: Callable[[dict], bool],
          interval: float, what: str) -> None:
    """Render `read()` again whenever it changes (the screen cleared on a terminal), until `done(doc)`; a source
    that does not answer (Unavailable) is shown and asked again. Ends with 130 on Ctrl-C, like any command."""
    import time

    from taulib.errors import Unavailable

    tty = sys.stdout.isatty()
    shown = None
    while True:
        try:
            doc = read()
            text, finished = render(doc), done(doc)
        except Unavailable as exc:
            text, finished = f"cannot read {what}: {exc.message}\n", False
        if text != shown:
            emit_text(("\x1b[H\x1b[2J" if tty else "" if shown is None else "\n") + text.rstrip("\n"))
            shown = text
        if finished:
            return
        time.sleep(interval)


def output_option(func: Callable) -> Callable:
    return click.option("-o", "--output", "output", type=click.Choice(["json", "table"]), default="json",
                        show_default=True, help="json for programs, table for people.")(func)


def run_dir_argument(func: Callable) -> Callable:
    return click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False, path_type=str))(func)
