"""A run's input dataset: its format, the pieces a shard reads, and when two runs' shards read the same input. Pure
(tests/test_rules_inputs.py).

An input index (input.json, `inputs.index`) lists the input's files in order, each with its size, sha256, first
row (`row_start`, counted over the whole input) and rows, and its pieces: byte ranges a reader can verify alone,
each with its sha256, first row and rows (a Parquet row group; a text file's rows in about PIECE_BYTES bytes). A
file may also have a `shared` range every reader of it needs (a CSV file's header, a Parquet file's footer and
indexes), verified as a piece is. A shard holding records [start, end) reads the pieces whose rows meet that range,
and the shared range of each file they lie in (`needed`); what it reads is its `fingerprint`, which two runs
compare to know whether a shard of one read exactly the input of the other's (tau-init --from).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

FORMATS = ("parquet", "csv", "jsonl")
SUFFIXES = {".parquet": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".zip", ".lz4", ".snappy")  # refused: no byte range of one is a row
PIECE_BYTES = 64 << 20  # a text file's piece ends at the first row boundary this many bytes after its start
# the Arrow types a kept column of a JSON lines input takes, by the JSON values found in it (`json_type`)
JSON_TYPES = {bool: "bool", int: "int64", float: "double", str: "string"}


def format_of(name: str) -> str | None:
    """The format a file name's suffix says (None when it says none tau reads)."""
    lowered = name.lower()
    for suffix, fmt in SUFFIXES.items():
        if lowered.endswith(suffix):
            return fmt
    return None


def skipped(name: str) -> bool:
    """A folder's entry that is not part of its dataset: hidden files and the markers tools leave (`_SUCCESS`,
    `_metadata`, `.crc` files), as Spark, Hive and Arrow's dataset readers skip them."""
    return name.startswith((".", "_"))


def json_type(seen: str | None, value: object) -> str | None:
    """The type of a kept JSON lines column after `value`, having been `seen` so far (None: only nulls yet): ints
    and floats make a double; any other mix, or an object or array, raises ValueError saying what was found."""
    if value is None:
        return seen
    kind = JSON_TYPES.get(type(value))
    if kind is None:
        raise ValueError(f"holds a JSON {'object' if isinstance(value, dict) else 'array'}; keep_input keeps "
                         "scalar columns only")
    if seen is None or seen == kind:
        return kind
    if {seen, kind} <= {"int64", "double"}:
        return "double"
    raise ValueError(f"holds {kind} where earlier rows hold {seen}")


def needed(index: Mapping[str, Any], start: int, end: int) -> list[tuple[int, list[int]]]:
    """The pieces holding records [start, end): (file number, its piece numbers), in input order; pieces without
    rows are never needed."""
    out: list[tuple[int, list[int]]] = []
    for number, entry in enumerate(index["files"]):
        if entry["row_start"] >= end or entry["row_start"] + entry["rows"] <= start:  # pragma: no mutate
            continue  # a shortcut past a file's pieces: the test of each piece below decides alone
        pieces = [k for k, piece in enumerate(entry["pieces"])
                  if piece["rows"] and piece["row_start"] < end and start < piece["row_start"] + piece["rows"]]
        if pieces:
            out.append((number, pieces))
    return out


def fingerprint(index: Mapping[str, Any], start: int, end: int) -> list[dict[str, Any]]:
    """What a shard of records [start, end) reads: by file (its name in the input), the shared range's digest and
    every needed piece's range, digest and rows. Two shards with equal fingerprints read the same bytes as the
    same rows."""
    out = []
    for number, pieces in needed(index, start, end):
        entry = index["files"][number]
        shared = entry.get("shared")
        out.append({"name": entry["name"], "shared": None if shared is None else shared["sha256"],
                    "pieces": [[p["offset"], p["length"], p["sha256"], p["row_start"], p["rows"]]
                               for p in (entry["pieces"][k] for k in pieces)]})
    return out


def same_input(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None, start: int, end: int) -> str | None:
    """Why a shard of records [start, end) of a run over `new` cannot adopt the winner of the same records of a
    run over `old` (input indexes, None for a run without an input), or None when it read exactly the same input."""
    if old is None and new is None:
        return None
    if old is None or new is None:
        return "one run reads an input dataset and the other does not"
    if old["format"] != new["format"]:
        return f"the input was {old['format']} and is now {new['format']}"
    if old.get("keep") != new.get("keep"):
        return "the input columns the output keeps (output.keep_input) differ"
    if fingerprint(old, start, end) != fingerprint(new, start, end):
        return "its input pieces changed (a file's bytes or rows differ from those its winner read)"
    return None


def slices(index: Mapping[str, Any], start: int, end: int) -> list[tuple[int, int, list[tuple[int, int, int]]]]:
    """For each needed file: (file number, rows of it before the shard's first, and for each needed piece (piece
    number, rows of it to pass over, rows of it to take)), so that the pieces' taken rows are exactly [start, end)
    in order."""
    out = []
    for number, pieces in needed(index, start, end):
        entry = index["files"][number]
        taken = []
        for k in pieces:
            piece = entry["pieces"][k]
            skip = max(0, start - piece["row_start"])
            take = min(end, piece["row_start"] + piece["rows"]) - piece["row_start"] - skip
            taken.append((k, skip, take))
        out.append((number, max(0, start - entry["row_start"]), taken))
    return out


def records(request: Mapping[str, Any], index: Mapping[str, Any] | None) -> int:
    """A plan's records: the request's, or its input's rows (`index`, None without an input); ValueError saying
    why the request cannot be resolved so (keep_input without an input, a count that is not the input's rows, a
    kept column also declared in output.schema)."""
    output = request.get("output", {})
    keep = output.get("keep_input") or []
    if "input" not in request:
        if keep:
            raise ValueError("keeps input columns (output.keep_input) but names no input")
        return int(request["records"])
    if index is None:
        raise ValueError("names an input that was not indexed")
    rows = int(index["rows"])
    if "records" in request and request["records"] != rows:
        raise ValueError(f"asks for {request['records']} records, but its input has {rows} rows; leave records out "
                         "(it is the input's rows) or give that")
    declared = {f["name"] for f in output.get("schema") or []}
    both = [name for name in keep if name in declared]
    if both:
        raise ValueError(f"keeps input column {both[0]!r} (output.keep_input) and declares it in output.schema too: "
                         "the schema declares the client's columns, and tau places the kept ones before them")
    return rows
