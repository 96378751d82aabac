"""An attempt's output (tau-logs): the client's stdout and stderr, and the allocation's own output file.

Reads: the attempt's client.log and, beside its submission, the allocation's output (Slurm's
`slurm-JOB_TASK.out`, the local executor's `local/task-NNNNN.log`), never through a symlink; for `follow`, the
attempt record and the executor's view of the attempt (the local executor's records, or squeue). Writes: nothing.
Promises: the newest attempt of the shard unless one is named; `follow` streams what is appended while the attempt
is live and returns once it has ended (its record says so, or the executor no longer has it), after the last bytes.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from taulib import executor
from taulib.errors import NotFound
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


def sources(run: Run, attempt: Record) -> list[tuple[str, str]]:
    """(name, path relative to the run) of the attempt's output files: the client's, then the allocation's."""
    return [("client", layout.attempt_file(attempt["shard_id"], attempt["attempt_id"], "client.log")),
            ("allocation", executor.of_attempt(attempt).output_path(attempt))]


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


def snapshot(run: Run, attempt: Record) -> list[Record]:
    """Every output file of the attempt with what it holds now."""
    return [{"source": name, "path": os.path.join(run.path, rel), "text": read(run, rel)}
            for name, rel in sources(run, attempt)]


def follow(run: Run, attempt: Record, write: Callable[[str, str, bytes], None],
           stop: Callable[[], bool] = lambda: False) -> None:
    """Call write(source, path, bytes) with what the files hold and then with what is appended to them, until the
    attempt has ended (or `stop()` says so), and then with the rest."""
    offsets = {rel: 0 for _, rel in sources(run, attempt)}
    next_look = time.monotonic() + LIVE_EVERY
    while True:
        ended = _ended(run, attempt) if time.monotonic() >= next_look else False
        if ended is not False or stop():
            _drain(run, attempt, offsets, write)
            return
        _drain(run, attempt, offsets, write)
        if time.monotonic() >= next_look:
            next_look = time.monotonic() + LIVE_EVERY
        time.sleep(POLL)


def _drain(run: Run, attempt: Record, offsets: dict[str, int], write: Callable[[str, str, bytes], None]) -> None:
    for name, rel in sources(run, attempt):
        data = read(run, rel, offsets[rel])
        if data:
            offsets[rel] += len(data)
            write(name, os.path.join(run.path, rel), data)


def _ended(run: Run, attempt: Record) -> bool:
    """Whether the attempt has ended: its record says so, or its executor no longer has it queued or running."""
    record = state.attempt_record(run, attempt["shard_id"], attempt["attempt_id"])
    if record is None or record["state"] in ("succeeded", "failed"):
        return True
    running = executor.of_attempt(record).running(run, record)
    return running is False  # None: the executor cannot be asked now, so keep following
