"""An attempt's input (the allocation's side, tau-attempt(1) "The order of work"): the shard's rows cut from the
run's input dataset into the attempt's folder before its client starts, every byte verified against the run's
index as it is read.

Reads: the run's input index (input.json) and the pieces of the input the shard needs (`rules.inputs.needed`).
Writes, in the attempt's folder (through the run's writer): `input.<format>`, exactly the shard's rows [start, end)
in input order, in the input's format (Parquet for Parquet, the same text for JSON lines and CSV, one header first);
`input-pieces.json`, the source files, byte ranges and rows they came from, for a client that reads the source
itself; and, while a Parquet shard is cut, private sparse copies of the row groups it reads, removed once read.
Promises: a piece whose bytes differ from the index, a file resized, moved, deleted or replaced by a symlink fail
the attempt "input changed: FILE ..." (code input_changed, not retried) before its client starts, and leave no
input file behind; memory stays bounded whatever the input's size (`inputs.parquet`, `inputs.text`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

from taulib import failpoints, jsonio
from taulib.inputs import source
from taulib.rules import inputs as rules
from taulib.rundir import layout

if TYPE_CHECKING:
    from collections.abc import Callable

    from taulib.collect.outputs import Sink
    from taulib.jsonio import Record
    from taulib.rundir.run import Run

PIECES = "input-pieces.json"


class Cut(NamedTuple):
    """What the cut gave the client (its variables) and how to check the file later (its sha256), or why it failed
    (`code`, `error`)."""

    variables: dict[str, str]
    sha256: str | None
    code: str | None = None
    error: str | None = None


def file_name(fmt: str) -> str:
    return f"input.{fmt}"


def prepare(run: Run, attempt: Record, stopping: Callable[[], None]) -> Cut:
    """Cut the attempt's rows (see the module docstring); `stopping` is called between reads and raises to stop
    the cut (whatever it raises is passed on, the partial file removed)."""
    index = run.input_index()
    assert index is not None, "only a run over a dataset has an input to cut"
    sid, aid = attempt["shard_id"], attempt["attempt_id"]
    shard = run.shard(sid)
    start, end = shard["record_start"], shard["record_end"]
    slices = rules.slices(index, start, end)
    fmt = index["format"]
    rel = layout.attempt_file(sid, aid, file_name(fmt))
    pieces_rel = layout.attempt_file(sid, aid, PIECES)
    folder = layout.attempt_file(sid, aid, "")
    for name in (rel, pieces_rel):  # a requeued allocation cuts again
        run.dir.remove_file(name)
    from taulib.collect.outputs import Sink

    sink = Sink(run.dir.create(rel))
    try:
        if fmt == "parquet":
            from taulib.inputs import parquet

            def scratch(name: str) -> int:
                run.dir.remove_file(folder + name)
                return run.dir.create(folder + name, readable=True)

            parquet.cut(index, index["path"], slices, scratch, lambda name: run.dir.remove_file(folder + name),
                        sink, stopping)
        else:
            from taulib.inputs import text

            text.cut(index, index["path"], slices, sink.write, stopping)
        sink.finish()
    except (source.Changed, source.Unreadable) as exc:
        _abandon(run, sink, rel)
        code = "input_changed" if isinstance(exc, source.Changed) else "input_unreadable"
        return Cut({}, None, code, f"{exc.message}; the client was not started")
    except BaseException:
        _abandon(run, sink, rel)
        raise
    run.dir.replace_bytes(pieces_rel, jsonio.canonical(_pieces(index, slices, start, end)))
    failpoints.hit("attempt.input_cut")
    path = os.path.join(run.path, rel)
    return Cut({"TAU_INPUT_FILE": path, "TAU_INPUT_FORMAT": fmt, "TAU_INPUT_PIECES": os.path.join(run.path,
                                                                                                  pieces_rel)},
               sink.sha.hexdigest())


def _abandon(run: Run, sink: Sink, rel: str) -> None:
    """The partial input file closed and removed."""
    if not sink.closed:
        try:
            sink.fh.close()
        except OSError:
            pass
    run.dir.remove_file(rel)


def _pieces(index: Record, slices: list[tuple[int, int, list[tuple[int, int, int]]]], start: int,
            end: int) -> Record:
    """input-pieces.json: the source files and byte ranges of the shard's rows (tau-run(5) "Input")."""
    files = []
    for number, _, pieces in slices:
        entry = index["files"][number]
        files.append({"path": os.path.join(index["path"], entry["name"]) if entry["name"] else index["path"],
                      "size": entry["size"], "sha256": entry["sha256"], "shared": entry["shared"],
                      "pieces": [dict(entry["pieces"][k], skip=skip, take=take) for k, skip, take in pieces]})
    return {"kind": "tau.input-pieces", "schema_version": 1, "run_id": index["run_id"], "format": index["format"],
            "record_start": start, "record_end": end, "columns": index["columns"], "files": files}
