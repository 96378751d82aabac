"""The one exit-code table and the typed errors that carry its codes.

Library code raises these; the command wrapper (`taulib.cli.common`) is the only place that turns them into the
single JSON error object on stderr and the process exit status. The table is documented in tau(1) and every
command's man page; changing a number breaks scripts, so never renumber.
"""

from __future__ import annotations

# code -> (name, meaning). The names appear as "error" in the JSON error object.
EXIT_CODES: dict[int, tuple[str, str]] = {
    0: ("ok", "success"),
    1: ("check_failed", "a check said no (verification failed, a shard has no winner)"),
    2: ("usage", "bad command line"),
    65: ("bad_input", "input or a record is malformed or fails its schema"),
    66: ("not_found", "the run, shard, attempt or record does not exist"),
    69: ("unavailable", "a service (scheduler, storage, API server) cannot be asked"),
    70: ("internal", "a bug in tau: please report it"),
    73: ("conflict", "already exists, or conflicts with what is recorded"),
    74: ("io_error", "an operating-system error while reading or writing"),
    75: ("busy", "busy or not yet known: try again"),
    77: ("refused", "refused for trust or permission"),
    129: ("interrupted", "stopped by SIGHUP (the terminal went away); the signal is named in the error object"),
    130: ("interrupted", "stopped by Ctrl-C (SIGINT); the signal is named in the error object"),
    143: ("interrupted", "stopped by SIGTERM (kill, timeout); the signal is named in the error object"),
}

OK = 0
CHECK_FAILED = 1
USAGE = 2
BAD_INPUT = 65
NOT_FOUND = 66
UNAVAILABLE = 69
INTERNAL = 70
CONFLICT = 73
IO_ERROR = 74
BUSY = 75
REFUSED = 77
INTERRUPTED = 130  # 128 + the signal's number: 129 SIGHUP, 130 SIGINT, 143 SIGTERM


class TauError(Exception):
    """An error with an exit code from the table and a message meant for people.

    `details` is a small JSON-able dict added to the error object (paths, ids, the schema path that failed).
    """

    code = INTERNAL

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    @property
    def name(self) -> str:
        return EXIT_CODES[self.code][0]


class CheckFailed(TauError):
    code = CHECK_FAILED


class UsageError(TauError):
    code = USAGE


class BadInput(TauError):
    code = BAD_INPUT


class NotFound(TauError):
    code = NOT_FOUND


class Unavailable(TauError):
    code = UNAVAILABLE


class Internal(TauError):
    code = INTERNAL


class Conflict(TauError):
    code = CONFLICT


class IOFailure(TauError):
    code = IO_ERROR


class Busy(TauError):
    code = BUSY


class Refused(TauError):
    code = REFUSED


class FailpointError(TauError):
    """Raised by a failpoint armed with `error`: behaves like an I/O failure at that step."""

    code = IO_ERROR


class SubmitRefused(Unavailable):
    """The scheduler definitely refused a submission (nothing was submitted): its journal entry is retired."""


class SubmitLimited(SubmitRefused):
    """The scheduler refused a submission for a submit limit (a user's or QOS's MaxSubmitJobs filled meanwhile):
    nothing was submitted, and its shards wait for a later submission, as shards beyond the limits' room do."""


class Ambiguous(Busy):
    """The scheduler may or may not have taken a submission (a timeout, a lost reply): its journal entry stays
    PREPARED, and the next call resolves it by the job's exact name instead of submitting again."""
