"""JSON lines and CSV inputs: a file's index made in one pass, and a shard's rows cut from its pieces as bytes.

Index (tau-init): one read of each file, its sha256 and its pieces' (a piece ends at the first row end PIECE_BYTES
bytes or more after its start) computed on a second thread (`source.Beside`) while this one finds the row ends
(`inputs.rows`); then the rows are checked: every JSON line an object (a blank line is not one), every kept column
of scalars of one type (by Arrow's JSON reader, or line by line where it cannot say); a CSV file's header row is its
`shared` range, every file's names the same, and its rows are counted again by Arrow's CSV reader (every row with
the header's number of fields, a quoted field closed), which must find the rows tau found.
Cut (the allocation): the needed pieces read in order, each hashed whole as it is read, the bytes of the shard's
rows written as they are (one header first, for CSV); a file whose last row has no newline gets one, so the rows of
the next file start on their own line.
Reads: the input files. Writes: through the `out` callable only (the attempt's input file, in the run).
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from taulib.errors import BadInput
from taulib.inputs import source
from taulib.inputs.rows import Rows
from taulib.rules import inputs as rules

if TYPE_CHECKING:
    from collections.abc import Callable

    from taulib.jsonio import Record

_SAMPLES: dict[type, object] = {type(None): None, bool: True, int: 0, float: 0.0, str: "", dict: {}, list: []}


class _Lines:
    """The JSON lines of a file checked as their bytes arrive: each an object, each kept column's type found."""

    def __init__(self, shown: str, keep: dict[str, str | None]) -> None:
        import orjson

        self.loads, self.error = orjson.loads, orjson.JSONDecodeError
        self.shown, self.keep = shown, keep
        self.carry = b""
        self.line = 0

    def feed(self, data: bytes) -> None:
        lines = data.split(b"\n")  # no copy of the whole read: the line it ends inside waits for the next
        if self.carry:
            lines[0] = self.carry + lines[0]
        self.carry = lines.pop()
        self._check(lines)

    def finish(self) -> None:
        if self.carry:
            self._check([self.carry])

    def _check(self, lines: list[bytes]) -> None:
        """Every line of a block parsed, nothing kept but the types of the kept columns (a loop this tight costs
        about what orjson does); a block with a problem is gone through again, to name the first line that has it."""
        first = self.line
        self.line += len(lines)
        loads, names = self.loads, list(self.keep)
        kinds: list[set[type]] = [set() for _ in names]
        try:
            if not names:
                for line in lines:
                    if type(loads(line)) is not dict:
                        raise TypeError
            else:
                pairs = list(zip(names, [k.add for k in kinds], strict=True))
                for line in lines:
                    value = loads(line)
                    if type(value) is not dict:
                        raise TypeError
                    for name, add in pairs:
                        add(type(value.get(name)))
            found = dict(self.keep)
            for name, seen in zip(names, kinds, strict=True):
                for kind in seen:
                    found[name] = rules.json_type(found[name], _SAMPLES[kind])
            self.keep.update(found)
        except (self.error, TypeError, ValueError):
            self._slowly(lines, first)

    def _slowly(self, lines: list[bytes], first: int) -> None:
        """The block again, a line at a time: BadInput naming the first line that is not a JSON object, or whose
        kept column is not of the kept type."""
        loads, keep = self.loads, dict.fromkeys(self.keep, None)
        types = dict(self.keep)
        for number, line in enumerate(lines, first + 1):
            try:
                value = loads(line)
            except self.error as exc:
                what = "is blank" if not line.strip() else f"is not JSON ({exc})"
                raise BadInput(f"plan on standard input: input {self.shown} line {number} {what}; every line of "
                               "a JSON lines input is one JSON object", path=self.shown, line=number) from None
            if not isinstance(value, dict):
                raise BadInput(f"plan on standard input: input {self.shown} line {number} is a JSON "
                               f"{type(value).__name__}, not an object; every line of a JSON lines input is one "
                               "JSON object", path=self.shown, line=number)
            for name in keep:
                try:
                    types[name] = rules.json_type(types[name], value.get(name))
                except ValueError as exc:
                    raise BadInput(f"plan on standard input: input {self.shown} line {number}: column {name!r} "
                                   f"(output.keep_input) {exc}", path=self.shown, line=number) from None
        self.keep.update(types)


def header_names(header: bytes, shown: str) -> list[str]:
    """The column names of a CSV header row (BadInput when it is not UTF-8, holds no name, or repeats one)."""
    try:
        text = header.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BadInput(f"plan on standard input: input {shown}'s header row is not UTF-8", path=shown) from None
    names = next(csv.reader(io.StringIO(text)), [])
    if not names or any(not n for n in names):
        raise BadInput(f"plan on standard input: input {shown}'s header row names no column, or an empty one; a CSV "
                       "input's files start with a header row", path=shown)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BadInput(f"plan on standard input: input {shown}'s header names column {twice[0]!r} twice",
                       path=shown)
    return names


def index_file(path: str, shown: str, fmt: str, row_start: int, keep: dict[str, str | None],
               piece_bytes: int = rules.PIECE_BYTES, read: Callable[[int], object] | None = None
               ) -> tuple[Record, list[str] | None]:
    """(the file's index entry, its CSV header's names or None) of one JSON lines or CSV file whose first row is
    the input's `row_start`; `keep`'s types are found as the rows are read (JSON lines); `read` is told the bytes of
    each read (a progress meter)."""
    try:
        fd = source.open_file(path)
    except (OSError, ValueError) as exc:
        raise BadInput(f"plan on standard input: input {shown} cannot be read: "
                       f"{exc.strerror if isinstance(exc, OSError) else exc}", path=shown) from None
    whole = source.Beside()
    rows = Rows(quoted=fmt == "csv")
    pieces: list[Record] = []
    shared, names = None, None
    arrow: Future[int | Exception] | None = None
    size, count = 0, 0  # bytes read, rows ended
    piece = _Piece(0)
    try:
        while data := os.read(fd, source.READ):
            view, parts = memoryview(data), []  # the pieces' bytes of this read, hashed with it on the second thread
            if read is not None:
                read(len(data))
            pos = 0
            if fmt == "csv" and names is None:
                end = rows.end_from(data, 0, 0)
                if end is None:
                    if len(data) == source.READ:
                        raise BadInput(f"plan on standard input: input {shown} has no header row (or one longer "
                                       f"than {source.READ} bytes)", path=shown)
                    end = len(data)  # a header and nothing else, without a newline
                names = header_names(data[:end], shown)
                arrow = whole.run(_arrow_rows, fd, names)  # its own pass, on the cores the hashes leave
                rows.count(data, 0, end)
                shared = {"offset": 0, "length": end, "sha256": hashlib.sha256(data[:end]).hexdigest()}
                pos = piece.offset = end
            while True:
                target = piece.offset + piece_bytes - size  # where the piece may end, in this read
                end = rows.end_from(data, pos, max(pos, target)) if target < len(data) else None
                stop = len(data) if end is None else end
                parts.append((piece.sha, view[pos:stop]))
                piece.rows += rows.count(data, pos, stop)
                if end is None:
                    break
                pieces.append(piece.closed(size + end, row_start + count))
                count += piece.rows
                piece = _Piece(size + end)
                pos = end
            whole.update(data, parts)
            size += len(data)
        if rows.inside:
            raise BadInput(f"plan on standard input: input {shown} ends inside a quoted field (a quote never "
                           "closed)", path=shown)
        if size > piece.offset:
            last = os.pread(fd, 1, size - 1)
            if last != b"\n":
                piece.rows += 1  # its last row, without a newline
            pieces.append(piece.closed(size, row_start + count))
            count += piece.rows
        digest = whole.hexdigest()
        for entry in pieces:
            entry["sha256"] = entry["sha256"].hexdigest()  # every piece's bytes are hashed now
        if fmt == "jsonl":
            _check_jsonl(fd, shown, count, keep)
        else:
            if names is None:
                raise BadInput(f"plan on standard input: input {shown} is empty; a CSV input's files start with a "
                               "header row", path=shown)
            assert arrow is not None
            _check_csv(fd, shown, names, count, arrow.result())
    finally:
        whole.close()
        os.close(fd)
    entry = {"name": "", "size": size, "sha256": digest, "row_start": row_start, "rows": count, "shared": shared,
             "pieces": pieces}
    return entry, names


class _Piece:
    """A piece being read: where it starts, its sha256 so far, its rows so far."""

    __slots__ = ("offset", "sha", "rows")

    def __init__(self, offset: int) -> None:
        self.offset, self.sha, self.rows = offset, hashlib.sha256(), 0

    def closed(self, end: int, row_start: int) -> Record:
        """Its entry, whose sha256 is its hash object until the second thread has hashed all its bytes."""
        return {"offset": self.offset, "length": end - self.offset, "sha256": self.sha, "row_start": row_start,
                "rows": self.rows}


def _check_jsonl(fd: int, shown: str, count: int, keep: dict[str, str | None]) -> None:
    """Every JSON line an object, and the kept columns' types: read by Arrow's JSON reader (C++, on every core),
    each kept column at the type its first rows show; Arrow's word is taken only when it found the rows tau found
    and converted every kept value, else the file is read again line by line (`_Lines`), which names the line that
    is wrong, or finds the types (ints and floats mixed make a double) where Arrow was only stricter."""
    import pyarrow as pa
    import pyarrow.json as pajson

    sample = _Lines(shown, dict.fromkeys(keep))
    head, newline, _ = os.pread(fd, 1 << 20, 0).rpartition(b"\n")
    if newline:
        sample.feed(head + newline)  # the first rows (a wrong one among them is named now)
    guessed = {name: kind or "string" for name, kind in sample.keep.items()}
    schema = pa.schema([(name, arrow_type(kind)) for name, kind in guessed.items()])
    found, valued = 0, set[str]()
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        with os.fdopen(os.dup(fd), "rb") as fh:
            reader = pajson.open_json(fh, read_options=pajson.ReadOptions(block_size=16 << 20),
                                      parse_options=pajson.ParseOptions(explicit_schema=schema,
                                                                        unexpected_field_behavior="ignore"))
            for batch in reader:
                found += batch.num_rows
                valued.update(name for name in guessed if batch.column(name).null_count < batch.num_rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        found = -1
    if found == count:
        keep.update({name: guessed[name] if name in valued else None for name in keep})
        return
    lines = _Lines(shown, keep)  # the authority: names the line, or finds the types Arrow would not guess
    os.lseek(fd, 0, os.SEEK_SET)
    while data := os.read(fd, source.READ):
        lines.feed(data)
    lines.finish()


def _arrow_rows(fd: int, names: list[str]) -> int | Exception:
    """The rows Arrow's CSV reader reads in the file open as `fd` (every field as text), or why it could not: run
    on a thread of its own beside the index's pass (Arrow lets go of the interpreter lock), through an open file of
    its own (its own offset, the same file)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        with open(f"/proc/self/fd/{fd}", "rb") as fh:
            reader = pacsv.open_csv(fh, read_options=pacsv.ReadOptions(block_size=1 << 22),
                                    parse_options=csv_parse_options(),
                                    convert_options=csv_convert_options(names, names))
            rows: int = sum(batch.num_rows for batch in reader)
            return rows
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError) as exc:
        return exc


def arrow_type(name: str) -> Any:
    """The Arrow type of a kept text column, by the name `rules.inputs.json_type` gives it (CSV's are all string)."""
    import pyarrow as pa

    return {"string": pa.string(), "int64": pa.int64(), "double": pa.float64(), "bool": pa.bool_()}[name]


def _check_csv(fd: int, shown: str, names: list[str], count: int, found: int | Exception) -> None:
    """Arrow's CSV reader read every row (all as text) and found the rows tau found (BadInput naming the row
    else)."""
    if isinstance(found, Exception):
        where = _bad_row(fd, len(names))
        raise BadInput(f"plan on standard input: input {shown} has an unreadable row{where}: {str(found)[:300]}",
                       path=shown)
    if found != count:
        raise BadInput(f"plan on standard input: input {shown}: tau found {count} rows and Arrow's CSV reader "
                       f"{found}; tau cuts CSV rows by RFC 4180 quoting (a quote opens a field only as its first "
                       "character), which this file does not keep", path=shown)


def _bad_row(fd: int, fields: int) -> str:
    """Where the first row of a CSV file whose fields are not the header's count is (" N (line L)"), by Python's
    own reader: the error's path only, so its speed does not matter."""
    import sys

    os.lseek(fd, 0, os.SEEK_SET)
    csv.field_size_limit(sys.maxsize)
    with os.fdopen(os.dup(fd), "r", encoding="utf-8-sig", errors="replace", newline="") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        try:
            for number, row in enumerate(reader, 1):
                if len(row) != fields:
                    return f" {number} (line {reader.line_num}, {len(row)} fields where the header has {fields})"
        except csv.Error as exc:
            return f" near line {reader.line_num} ({exc})"
    return ""


def csv_parse_options() -> Any:
    import pyarrow.csv as pacsv

    return pacsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False)


def csv_convert_options(names: list[str], include: list[str]) -> Any:
    """Every column read as the text it is (never a type guessed from the first rows), `include` only."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    return pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, include_columns=include,
                                strings_can_be_null=False, quoted_strings_can_be_null=False)


def cut(index: Record, root: str, slices: list[tuple[int, int, list[tuple[int, int, int]]]],
        out: Callable[[bytes], object], stopping: Callable[[], None]) -> None:
    """Write the rows `slices` names (`rules.inputs.slices`) to `out`, verifying every piece read (and each file's
    header, one written first for CSV); `stopping` is called between reads (it raises to stop). Raises
    source.Changed."""
    fmt = index["format"]
    header_written = False
    for number, _, pieces in slices:
        entry = index["files"][number]
        path = os.path.join(root, entry["name"]) if entry["name"] else root
        shown = entry["name"] or os.path.basename(root)
        try:
            fd = source.open_file(path)
        except (OSError, ValueError) as exc:
            raise source.gone(path, exc, shown) from None
        try:
            if os.fstat(fd).st_size != entry["size"]:
                raise source.Changed(f"input changed: {shown} ({path}) is {os.fstat(fd).st_size} bytes; the run's "
                                     f"index recorded {entry['size']}")
            shared = entry["shared"]
            if shared is not None:
                data = os.pread(fd, shared["length"], shared["offset"])
                if hashlib.sha256(data).hexdigest() != shared["sha256"]:
                    raise source.Changed(f"input changed: {shown} ({path}): its header row differs from the one the "
                                         "run's index recorded")
                if not header_written:
                    out(data if data.endswith(b"\n") else data + b"\n")
                    header_written = True
            for k, skip, take in pieces:
                _cut_piece(fd, entry, k, skip, take, fmt, out, stopping, shown, path)
        finally:
            os.close(fd)


def _cut_piece(fd: int, entry: Record, k: int, skip: int, take: int, fmt: str, out: Callable[[bytes], object],
               stopping: Callable[[], None], shown: str, path: str) -> None:
    piece = entry["pieces"][k]
    rows = Rows(quoted=fmt == "csv")
    sha = hashlib.sha256()
    seen, done, tail = 0, 0, b"\n"  # rows ended so far in the piece; bytes read; the last byte written
    while done < piece["length"]:
        stopping()
        data = os.pread(fd, min(source.READ, piece["length"] - done), piece["offset"] + done)
        if not data:
            break
        sha.update(data)
        done += len(data)
        pos = 0
        if seen < skip:
            pos, ended = rows.advance(data, 0, skip - seen)
            seen += ended
        if skip <= seen < skip + take and pos < len(data):
            end, ended = rows.advance(data, pos, skip + take - seen)
            out(data[pos:end])
            tail = data[end - 1:end] if end > pos else tail
            seen += ended
    if done != piece["length"] or sha.hexdigest() != piece["sha256"]:
        ends, last = piece["offset"] + piece["length"], piece["row_start"] + piece["rows"]
        raise source.Changed(f"input changed: {shown} ({path}) bytes {piece['offset']}..{ends} (rows "
                             f"{piece['row_start']}..{last}) differ from the run's index")
    if tail != b"\n":  # the file's last row, without a newline: one, so the next rows start on their own line
        out(b"\n")
