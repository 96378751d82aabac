"""JSON lines of a record batch, built column by column with pyarrow compute instead of a Python object per row.

Pure: it reads and writes nothing. Promises: `lines(batch)` is byte for byte what the per-row definition gives
(`reference(batch)`: each row as a dict of its schema's names to its values, `orjson.dumps(row, default=str)` and a
newline), which is what tau-run(5) documents; only faster. How: every column becomes one array of JSON texts
(integers cast to decimal text, booleans and nulls as words, floats as orjson writes them, strings their own bytes
in quotes when no byte of the column's needs an escape, else value by value through orjson, as any other type),
then each row's line is their element-wise join with the keys, and the batch's lines are the joined array's one
data buffer. A batch that the vectorised path cannot keep identical (repeated column names, which a dict
collapses) takes the per-row one.
Text that is not UTF-8 cannot be a JSON string: it is refused with a Conflict naming the column. Imports pyarrow:
only the collection worker loads this module.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from taulib.errors import Conflict

_NULL, _QUOTE, _EMPTY = (pa.scalar(text, pa.large_binary()) for text in (b"null", b'"', b""))



def reference(batch: Any) -> bytes:
    """The definition: one orjson object per row, keys in schema order (a repeated name keeps its first place and
    its last value, as a dict does)."""
    names = batch.schema.names
    columns = [column.to_pylist() for column in batch.columns]
    dumps, option = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    if not columns:
        rows: int = batch.num_rows
        return b"{}\n" * rows
    return b"".join([dumps(dict(zip(names, values, strict=True)), default=str, option=option)
                     for values in zip(*columns, strict=True)])


def lines(batch: Any) -> Any:
    """The JSON lines of `batch`, as bytes or a pyarrow Buffer (either can be written as it is)."""
    names = batch.schema.names
    if batch.num_rows == 0:
        return b""
    if not names or len(set(names)) != len(names):
        return reference(batch)
    parts = []
    for position, (name, column) in enumerate(zip(names, batch.columns, strict=True)):
        parts.append(pa.scalar((b"{" if position == 0 else b",") + orjson.dumps(name) + b":", pa.large_binary()))
        parts.append(_texts(name, column))
    parts.append(pa.scalar(b"}\n", pa.large_binary()))
    joined = pc.binary_join_element_wise(*parts, _EMPTY)
    offsets = pa.Array.from_buffers(pa.int64(), len(joined) + 1, [None, joined.buffers()[1]], offset=joined.offset)
    start, stop = offsets[0].as_py(), offsets[len(joined)].as_py()
    return joined.buffers()[2].slice(start, stop - start)  # no row is null: the lines, back to back


def _texts(name: str, column: Any) -> Any:
    """The column's values as JSON texts (large_binary, no nulls)."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.dictionary_decode(), kind.value_type
    if pa.types.is_null(kind) or column.null_count == len(column):
        return pa.array([b"null"] * len(column), pa.large_binary())
    if pa.types.is_integer(kind):
        texts = pc.cast(pc.cast(column, pa.large_string()), pa.large_binary())
        return pc.fill_null(texts, _NULL) if column.null_count else texts
    if pa.types.is_boolean(kind):
        texts = pc.if_else(column, pa.scalar(b"true", pa.large_binary()), pa.scalar(b"false", pa.large_binary()))
        return pc.fill_null(texts, _NULL) if column.null_count else texts
    valid = pc.drop_null(column) if column.null_count else column
    if pa.types.is_float32(kind) or pa.types.is_float64(kind):
        # orjson's own digits (it writes 1.0 and -0.0 where Arrow's cast writes 1 and -0; NaN and infinities as
        # null): one dumps of the column, whose values hold no comma, split at its commas
        texts = pa.array(orjson.dumps(valid.to_pylist())[1:-1].split(b","), pa.large_binary())
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        texts = _strings(name, valid)
    else:  # value by value, exactly as the per-row definition dumps it
        dumps = orjson.dumps
        texts = pa.array([dumps(value, default=str) for value in valid.to_pylist()], pa.large_binary())
    if not column.null_count:
        return texts
    placed = pc.replace_with_mask(pa.nulls(len(column), pa.large_binary()), pc.is_valid(column), texts)
    return pc.fill_null(placed, _NULL)


def _strings(name: str, valid: Any) -> Any:
    """JSON strings, exactly as orjson writes them, of string values without nulls. When the values' bytes, all
    of them at once, need no escape (`_plain`), each value is its own bytes in quotes; otherwise each value is
    dumped by orjson on its own. (No split of one dumps of the whole list is safe: a value that ends in `",` puts
    `","` inside a string, an escaped quote, a comma and the closing quote, which an earlier tau split at.)"""
    raw = pc.cast(valid, pa.large_binary())
    if _plain(raw):
        return pc.binary_join_element_wise(_QUOTE, raw, _QUOTE, _EMPTY)
    try:
        values = valid.to_pylist()
    except UnicodeDecodeError:
        raise Conflict(f"column {name!r} holds text that is not UTF-8, which a JSON line cannot carry; collect this "
                       "run as parquet or csv", column=name) from None
    dumps = orjson.dumps
    return pa.array([dumps(value) for value in values], pa.large_binary())


def _plain(raw: Any) -> bool:
    """Whether the bytes of these large_binary values (no nulls), taken as one text, are UTF-8 that orjson writes
    unescaped: one decode and one dumps of them all, at memory speed, instead of a Python string per value (the
    values' bytes are back to back in their data buffer; a text that needs no escape has no value that does)."""
    if len(raw) == 0:
        return True
    offsets = raw.buffers()[1]
    first, last = (int.from_bytes(offsets[8 * i:8 * i + 8], "little", signed=True)
                   for i in (raw.offset, raw.offset + len(raw)))
    data = memoryview(raw.buffers()[2])[first:last] if last > first else memoryview(b"")
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError:
        return False
    return len(orjson.dumps(text)) == len(data) + 2
