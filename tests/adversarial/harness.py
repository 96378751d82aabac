"""The adversarial suite's shared parts: its size knob, its report, and running a command in this process.

Size: `TAU_ADVERSITY_SCALE` multiplies every generated-case count and every race's rounds (default 1, sized for
CI on a 2-core machine; the nightly run uses 10). The report (cases tried, cases that misbehaved, failpoints
total and exercised) is printed at the end of the pytest run and written to `TAU_ADVERSITY_REPORT` when that
names a file.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
from collections import Counter
from typing import NamedTuple

SCALE = max(1, int(os.environ.get("TAU_ADVERSITY_SCALE", "1")))
REPORT: Counter = Counter()
EXERCISED: set[tuple[str, str]] = set()  # (command, failpoint) crashed and recovered from


def scaled(n: int) -> int:
    return n * SCALE


class Outcome(NamedTuple):
    code: int
    out: bytes
    err: bytes


def invoke(name: str, argv: list[str], stdin: bytes | None = b"") -> Outcome:
    """Run the tau command `name` ("tau-init") in this process with tau's conventions (`run_command`), stdin from
    bytes, stdout and stderr captured; the process's signal handlers and umask are restored afterwards."""
    from importlib import import_module

    from taulib.cli import common, registry

    command = registry.by_name(name.removeprefix("tau-"))
    cli = import_module(command.module).cli
    saved = (sys.stdin, sys.stdout, sys.stderr, os.umask(0o077))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    out, err = io.BytesIO(), io.BytesIO()
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin or b""))
    sys.stdout, sys.stderr = io.TextIOWrapper(out, write_through=True), io.TextIOWrapper(err, write_through=True)
    try:
        code = common.run_command(name, cli, argv)
        sys.stdout.flush()
        sys.stderr.flush()
        result = Outcome(code, out.getvalue(), err.getvalue())
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved[:3]
        os.umask(saved[3])
        for s, handler in handlers.items():
            signal.signal(s, handler)
    return result


def misbehaviour(outcome: Outcome) -> str | None:
    """What is wrong with a refusal: anything but a documented non-zero code, exactly one JSON error object on
    stderr naming that code, nothing on stdout, no traceback. None when the refusal is well formed."""
    from taulib.errors import EXIT_CODES

    if outcome.code == 70:
        return f"internal error: {outcome.err[:300]!r}"
    if outcome.code not in EXIT_CODES:
        return f"undocumented exit code {outcome.code}"
    if b"Traceback" in outcome.err:
        return "a traceback on stderr"
    lines = [line for line in outcome.err.splitlines() if line.strip()]
    if len(lines) != 1:
        return f"{len(lines)} lines on stderr, not one JSON error object: {outcome.err[:300]!r}"
    try:
        error = json.loads(lines[0])
    except ValueError:
        return f"stderr is not JSON: {lines[0][:300]!r}"
    if not isinstance(error, dict) or error.get("code") != outcome.code or error.get("error") != \
            EXIT_CODES[outcome.code][0] or not isinstance(error.get("message"), str):
        return f"a malformed error object: {error!r}"
    if outcome.out:
        return f"output on stdout with a refusal: {outcome.out[:200]!r}"
    return None


class Tally:
    """Cases of one generated test: every misbehaviour is kept (with its input), the test fails at the end."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cases = 0
        self.accepted = 0
        self.bad: list[str] = []

    def case(self, label: str, problem: str | None, accepted: bool = False) -> None:
        self.cases += 1
        self.accepted += accepted
        REPORT["cases"] += 1
        if problem is not None:
            REPORT["misbehaved"] += 1
            self.bad.append(f"{label}: {problem}")

    def check(self, at_least: int) -> None:
        assert self.cases >= at_least, f"{self.name}: only {self.cases} cases ran"
        assert not self.bad, f"{self.name}: {len(self.bad)} of {self.cases} misbehaved:\n" + "\n".join(self.bad[:10])
