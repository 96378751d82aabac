"""An attempt's output (tau-logs): the client's stdout and stderr and the allocation's own output file, or one
service backend's output.

Reads: the attempt's client.log and, beside its submission, the allocation's output (Slurm's
`slurm-JOB_TASK.out`, the local executor's `local/task-NNNNN.log`), or a backend's `services/NAME-K.log`, never
through a symlink; for an attempt without output, its observation.json and stop.json; for `follow`, the attempt
record and the executor's view of the attempt (the local executor's records, or squeue). Writes: nothing.
Promises: the newest attempt of the shard unless one is named; `follow` streams what is appended while the attempt
is live and returns once it has ended (its record says so, or the executor no longer has it), after the last bytes;
every file's text but the first's is headed by its path (`Headings`). What tau-logs prints and the Python API's
`Run.logs` returns is rendered here once (`render` for the text and the JSON document, `stream` for --follow), so
the two are the same bytes. An attempt none of whose output files holds a byte (not started yet, or silent so far)
is said to have no output, with its state as the records say it (`chosen`; the scheduler is not asked); `chosen` can
show the newest attempt with output instead.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from taulib import executors
from taulib.errors import NotFound, UsageError
from taulib.rules.attempt import effective_attempt
from taulib.rundir import layout, state

if TYPE_CHECKING:
    from collections.abc import Callable

    from taulib.jsonio import Record
    from taulib.rundir.run import Run

POLL = 0.5  # seconds between reads of the files while following
LIVE_EVERY = 2.0  # seconds between looks at the executor while following


def attempt_of(run: Run, sid: str, aid: str | None) -> Record:
    run.check_shard(sid)
    if aid is None:
        attempt = state.latest_attempt(run, sid)
        if attempt is None:
            raise NotFound(f"{sid} has no attempt yet; tau-submit gives it one", shard_id=sid)
        return attempt
    attempt = state.attempt_record(run, sid, aid)
    if attempt is None:
        raise NotFound(f"{sid} has no attempt {aid!r}", shard_id=sid, attempt_id=aid)
    return attempt


def chosen(run: Run, sid: str, aid: str | None, service: str | None = None,
           latest_with_output: bool = False) -> tuple[Record, str | None]:
    """(the attempt tau-logs shows, what it says of it on stderr or None). The attempt is `attempt_of`'s; when none
    of its output files (or the backend's) holds a byte, the note says so with its state, and with
    `latest_with_output` the newest earlier attempt that has output is shown instead (the note names it), or,
    when there is none, the one asked for."""
    attempt = attempt_of(run, sid, aid)
    if has_output(run, attempt, service):
        return attempt, None
    note = no_output(run, attempt, service)
    if not latest_with_output:
        return attempt, note
    for earlier in reversed(state.attempt_ids(run, sid)[:attempt["ordinal"] - 1]):
        record = state.attempt_record(run, sid, earlier)
        if record is not None and has_output(run, record, service):
            return record, f"{note}; showing {earlier}, the newest attempt with output"
    return attempt, note if attempt["ordinal"] == 1 else f"{note}; no earlier attempt of {sid} has output"


def has_output(run: Run, attempt: Record, service: str | None = None) -> bool:
    """Whether one of the attempt's output files (or the backend's) holds a byte."""
    for _, rel in sources(run, attempt, service):
        try:
            if run.dir.read_tail(rel, 1):
                return True
        except NotFound:
            continue
    return False


SAYS = {"pending": "it is pending", "running": "it is running", "accounting_lag": "it is in accounting lag",
        "unknown": "its state is unknown", "succeeded": "it succeeded", "failed": "it failed"}


def no_output(run: Run, attempt: Record, service: str | None = None) -> str:
    """That the attempt has no output (of `service`), and its state and why: the verdict on its record and the
    evidence tau-reconcile last recorded (`rules.attempt`), such as `it is pending (queued)`."""
    sid, aid = attempt["shard_id"], attempt["attempt_id"]
    stopped = state.attempt_stop(run, sid, aid) if attempt["state"] != "succeeded" else None
    verdict = effective_attempt(attempt, state.read_evidence(run, sid, aid), stopped)
    live = verdict.state not in ("succeeded", "failed")
    of = f" of {service}" if service is not None else ""
    return f"{sid} {aid} has no output{of}{' yet' if live else ''}: {SAYS[verdict.state]} ({verdict.reason})"


def sources(run: Run, attempt: Record, service: str | None = None) -> list[tuple[str, str]]:
    """(name, path relative to the run) of the attempt's output files: the client's, then the allocation's; or,
    with `service` (NAME-K, or NAME for a service of one backend), that backend's."""
    if service is not None:
        name, backend = backend_of(run, service)
        return [(f"{name}-{backend}", layout.service_log(attempt["shard_id"], attempt["attempt_id"], name, backend))]
    return [("client", layout.attempt_file(attempt["shard_id"], attempt["attempt_id"], "client.log")),
            ("allocation", executors.of_attempt(attempt).output_path(attempt))]


def backend_of(run: Run, given: str) -> tuple[str, int]:
    """The service and backend (1, 2, ...) a person named: NAME-K, or NAME alone for a service of one backend.
    NotFound for a service or a backend the plan does not have; UsageError for NAME alone when it has several."""
    services = {s["name"]: s["backends"] for s in run.plan.get("services") or []}
    if not services:
        raise NotFound(f"run {run.run_id!r} has no services; tau-logs without --service shows the client's output")
    if given in services:
        if services[given] > 1:
            raise UsageError(f"service {given!r} has {services[given]} backends: name one, from {given}-1 to "
                             f"{given}-{services[given]}")
        return given, 1
    name, _, number = given.rpartition("-")
    if name in services and number.isascii() and number.isdigit() and 1 <= int(number) <= services[name]:
        return name, int(number)
    choices = ", ".join(f"{n}-1..{n}-{k}" if k > 1 else n for n, k in services.items())
    raise NotFound(f"run {run.run_id!r} has no service backend {given!r}; its services: {choices}", service=given)


def read(run: Run, rel: str, offset: int = 0) -> bytes:
    """The bytes of an output file from `offset` on (nothing when it does not exist yet)."""
    try:
        fd = run.dir.open_read(rel)
    except NotFound:
        return b""
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def snapshot(run: Run, attempt: Record, service: str | None = None) -> list[Record]:
    """Every output file of the attempt (or of one service backend) with what it holds now."""
    return [{"source": name, "path": os.path.join(run.path, rel), "text": read(run, rel)}
            for name, rel in sources(run, attempt, service)]


class Headings:
    """The text of output files one after another, as tau-logs prints it: each file's bytes, headed by
    `==> PATH <==` when they follow another file's, or when the first bytes are not the first file's (the client's,
    or the one backend's)."""

    def __init__(self, first: str) -> None:
        self.first = first
        self.last: str | None = None

    def __call__(self, source: str, path: str, data: bytes) -> bytes:
        head = b""
        if source != self.last and (self.last is not None or source != self.first):
            head = f"{chr(10) if self.last else ''}==> {path} <==\n".encode()
        self.last = source
        return head + data


@dataclass(frozen=True)
class Shown:
    """The output of one attempt as tau-logs shows it: the attempt, what is said of it on standard error (None, or
    that it has no output yet, and which attempt is shown instead), and its output files with what they hold."""

    run_id: str
    shard_id: str
    attempt: Record
    note: str | None
    entries: list[Record]

    def text(self) -> bytes:
        """The files' bytes one after another, headed as `Headings` says (tau-logs, -o text)."""
        headed = Headings(self.entries[0]["source"])
        return b"".join(headed(e["source"], e["path"], e["text"]) for e in self.entries if e["text"])

    def document(self) -> Record:
        """The `tau.logs` document (tau-logs -o json): the paths and what they hold, as text."""
        return {"kind": "tau.logs", "schema_version": 1, "run_id": self.run_id, "shard_id": self.shard_id,
                "attempt_id": self.attempt["attempt_id"], "state": self.attempt["state"],
                "logs": [dict(entry, text=entry["text"].decode("utf-8", "replace")) for entry in self.entries]}


def render(run: Run, sid: str, aid: str | None = None, service: str | None = None,
           latest_with_output: bool = False) -> Shown:
    """What tau-logs shows of shard `sid` now: the attempt `chosen` says (its note), and its output files (or one
    service backend's) with what they hold. NotFound for a shard, an attempt or a backend the run does not have."""
    attempt, note = chosen(run, sid, aid, service, latest_with_output)
    return Shown(run.run_id, sid, attempt, note, snapshot(run, attempt, service))


def stream(run: Run, sid: str, aid: str | None, service: str | None, write: Callable[[bytes], None],
           stop: Callable[[], bool] = lambda: False) -> None:
    """tau-logs --follow: `write` gets the attempt's output as `text` renders it, and then what is appended, headed
    the same way, until the attempt has ended (or `stop()` says so)."""
    attempt = attempt_of(run, sid, aid)
    headed = Headings(sources(run, attempt, service)[0][0])
    follow(run, attempt, lambda source, path, data: write(headed(source, path, data)), stop, service)


def follow(run: Run, attempt: Record, write: Callable[[str, str, bytes], None],
           stop: Callable[[], bool] = lambda: False, service: str | None = None) -> None:
    """Call write(source, path, bytes) with what the files hold and then with what is appended to them, until the
    attempt has ended (or `stop()` says so), and then with the rest."""
    files = sources(run, attempt, service)
    offsets = {rel: 0 for _, rel in files}
    next_look = time.monotonic() + LIVE_EVERY
    while True:
        ended = _ended(run, attempt) if time.monotonic() >= next_look else False
        if ended is not False or stop():
            _drain(run, files, offsets, write)
            return
        _drain(run, files, offsets, write)
        if time.monotonic() >= next_look:
            next_look = time.monotonic() + LIVE_EVERY
        time.sleep(POLL)


def _drain(run: Run, files: list[tuple[str, str]], offsets: dict[str, int],
           write: Callable[[str, str, bytes], None]) -> None:
    for name, rel in files:
        data = read(run, rel, offsets[rel])
        if data:
            offsets[rel] += len(data)
            write(name, os.path.join(run.path, rel), data)


def _ended(run: Run, attempt: Record) -> bool:
    """Whether the attempt has ended: its record says so, or its executor no longer has it queued or running."""
    record = state.attempt_record(run, attempt["shard_id"], attempt["attempt_id"])
    if record is None or record["state"] in ("succeeded", "failed"):
        return True
    running = executors.of_attempt(record).running(run, record)
    return running is False  # None: the executor cannot be asked now, so keep following
