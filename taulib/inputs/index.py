"""The input index of a run over a dataset (input.json, tau-run(5) "Input"), made by tau-init before the run exists.

Reads: the plan request's `input` ({path, format}) and `output.keep_input`; the input's files (a file, or a folder's
files in sorted name order, hidden files and `_` markers passed over). Writes: nothing (tau-init publishes the
record).
Promises: every file is read once (`inputs.parquet`, `inputs.text`); the index records the real path of the input
(a symlink named is resolved once, here), every file's name, size, sha256 and rows, and its pieces; a dataset tau
cannot cut exactly is refused (BadInput, 65) naming the file, and the row where there is one: an empty dataset,
files of several formats, Parquet files of different schemas, CSV files of different headers, a compressed file, a
subfolder or a symlink in the folder, an unreadable row of a text file, a kept column the input lacks.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from taulib.errors import BadInput, NotFound
from taulib.rules import fields as rules_fields
from taulib.rules import inputs as rules

if TYPE_CHECKING:
    from taulib.jsonio import Record

def files(path: str, asked: str | None) -> tuple[str, list[str], str]:
    """(the input's real path, its files' names in reading order ([""] for a single file), its format)."""
    if asked is not None and asked not in rules.FORMATS:  # the schema names the formats tau writes; these it reads
        raise BadInput(f"plan on standard input: input.format {asked!r} is not one tau reads "
                       f"({', '.join(rules.FORMATS)})")
    if not os.path.exists(path):
        raise NotFound(f"plan on standard input: input {path!r} does not exist", path=path)
    real = os.path.realpath(path)
    if os.path.isfile(real):
        fmt = asked or rules.format_of(real)
        _refuse_compressed(os.path.basename(real))
        if fmt is None:
            raise BadInput(f"plan on standard input: input {path!r} has no suffix tau knows (.parquet, .jsonl, "
                           ".ndjson, .csv); give input.format", path=path)
        return real, [""], fmt
    if not os.path.isdir(real):
        raise BadInput(f"plan on standard input: input {path!r} is neither a file nor a folder", path=path)
    names: list[str] = []
    formats: dict[str, str] = {}
    for entry in sorted(os.scandir(real), key=lambda e: e.name):
        if rules.skipped(entry.name):
            continue
        shown = f"{path.rstrip('/')}/{entry.name}"
        if entry.is_symlink():
            raise BadInput(f"plan on standard input: input {shown} is a symbolic link; tau reads only the folder's "
                           "own regular files", path=shown)
        if entry.is_dir():
            raise BadInput(f"plan on standard input: input {shown} is a folder; an input folder holds its files "
                           "directly (no subfolders)", path=shown)
        if not entry.is_file():
            raise BadInput(f"plan on standard input: input {shown} is not a regular file", path=shown)
        _refuse_compressed(entry.name)
        found = rules.format_of(entry.name)
        if found is None and asked is None:
            raise BadInput(f"plan on standard input: input {shown} has no suffix tau knows (.parquet, .jsonl, "
                           ".ndjson, .csv); give input.format, or move it out of the folder", path=shown)
        formats[entry.name] = found or asked or ""
        names.append(entry.name)
    if not names:
        raise BadInput(f"plan on standard input: input {path!r} is an empty folder", path=path)
    kinds = sorted(set(formats.values()) | ({asked} if asked else set()))
    if len(kinds) > 1:
        other = next(n for n in names if formats[n] != (asked or formats[names[0]]))
        raise BadInput(f"plan on standard input: input {path!r} mixes formats ({', '.join(kinds)}: {other!r} is "
                       f"{formats[other]}); a dataset is of one format", path=path)
    return real, names, kinds[0]


def _refuse_compressed(name: str) -> None:
    if name.lower().endswith(rules.COMPRESSED):
        raise BadInput(f"plan on standard input: input file {name!r} is compressed; tau cuts a shard's rows from "
                       "byte ranges, which a compressed stream does not have: decompress it (a Parquet file's own "
                       "compression is fine)", path=name)


def build(asked: Record, keep: list[str], run_id: str, piece_bytes: int = rules.PIECE_BYTES) -> Record:
    """The input index of `asked` ({path, format}) for run `run_id`, keeping the columns `keep`."""
    from taulib import progress

    path = os.path.abspath(asked["path"])
    real, names, fmt = files(path, asked.get("format"))
    total = sum(os.path.getsize(os.path.join(real, name) if name else real) for name in names)
    with progress.Meter("indexing the input", unit="files", total_count=len(names), total_bytes=total) as meter:
        return _build(path, real, names, fmt, keep, run_id, piece_bytes, meter)


def _build(path: str, real: str, names: list[str], fmt: str, keep: list[str], run_id: str, piece_bytes: int,
           meter: Any) -> Record:
    from taulib.inputs import parquet, text
    from taulib.lifecycle.candidate import fields_of

    entries: list[Record] = []
    first_schema, first_names, first_shown = None, None, ""
    columns: list[dict[str, str]] | None = None
    json_keep: dict[str, str | None] = {name: None for name in keep}
    row = 0
    for name in names:
        where = os.path.join(real, name) if name else real
        shown = os.path.join(path, name) if name else path
        if fmt == "parquet":
            entry, schema = parquet.index_file(where, shown, row, meter)
            if first_schema is None:
                first_schema, first_shown, columns = schema, shown, fields_of(schema)
            elif not schema.equals(first_schema):
                differ = rules_fields.differences(fields_of(first_schema), fields_of(schema), f"{first_shown}'s")
                raise BadInput(f"plan on standard input: input {shown} has another schema than {first_shown}: "
                               f"{rules_fields.describe(differ)}", path=shown)
        else:
            entry, header = text.index_file(where, shown, fmt, row, json_keep, piece_bytes, meter)
            if header is not None:
                if first_names is None:
                    first_names, first_shown = header, shown
                    columns = [{"name": n, "type": "string"} for n in header]
                elif header != first_names:
                    raise BadInput(f"plan on standard input: input {shown}'s header ({', '.join(header)}) is not "
                                   f"{first_shown}'s ({', '.join(first_names)})", path=shown)
        entry["name"] = name
        entries.append(entry)
        meter.add(count=1)
        row += entry["rows"]
    if row == 0:
        raise BadInput(f"plan on standard input: input {path!r} has no rows", path=path)
    return {"kind": "tau.input-index", "schema_version": 1, "run_id": run_id, "path": real, "format": fmt,
            "rows": row, "piece_bytes": piece_bytes, "columns": columns,
            "keep": _kept(keep, columns, json_keep, path), "files": entries}


def _kept(keep: list[str], columns: list[dict[str, str]] | None, json_keep: dict[str, str | None],
          path: str) -> list[dict[str, str]]:
    """The kept columns' fields: as the input's schema has them (Parquet; CSV: text), or as found (JSON lines)."""
    out = []
    for name in keep:
        if columns is not None:
            found = [c for c in columns if c["name"] == name]
            if not found:
                raise BadInput(f"plan on standard input keeps input column {name!r} (output.keep_input), which input "
                               f"{path!r} does not have (it has {', '.join(c['name'] for c in columns)})",
                               column=name)
            out.append(found[0])
        else:
            kind = json_keep[name]
            if kind is None:
                raise BadInput(f"plan on standard input keeps input column {name!r} (output.keep_input), which no "
                               f"row of input {path!r} holds a value of", column=name)
            out.append({"name": name, "type": kind})
    return out
