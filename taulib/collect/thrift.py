"""Thrift's compact protocol, read and written generically: the encoding of a Parquet file's footer (FileMetaData).

Pure: bytes in, values out, and back. A struct is a list of `Field`s in the order they were read; a value is an
int (i8, i16, i32, i64), bytes (binary, and a double's eight raw bytes), a bool (a boolean field's type holds it),
a list `Seq` (element type, values), a `Map` or a nested struct. Nothing of the Parquet schema is known here: the
caller (`collect.parquet`) names the fields it reads or changes by their ids.
Promises: `encode(decode(data))` is `data` for every struct that a Thrift compact writer wrote with ascending field
ids (as Apache Thrift's and pyarrow's writers do), so a footer that is read and written back unchanged keeps its
bytes; input that is not a well-formed struct raises `Malformed` (never reads past the end, never recurses deeper
than DEPTH).
"""

from __future__ import annotations

from typing import Any, NamedTuple

STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)
INTEGERS = (I16, I32, I64)
DEPTH = 32  # nested structs and lists: FileMetaData needs 6


class Malformed(ValueError):
    """The bytes are not a well-formed compact-protocol struct."""


class Field(NamedTuple):
    id: int
    type: int  # TRUE or FALSE for a boolean field: its value is in its type
    value: Any


class Seq(NamedTuple):
    type: int  # of the elements (a list's or a set's: the kind is the field's type)
    values: list[Any]


class Map(NamedTuple):
    key: int
    value: int
    pairs: list[tuple[Any, Any]]


def decode(data: bytes | memoryview) -> list[Field]:
    """The struct that `data` holds, exactly (Malformed when bytes are left over or missing)."""
    reader = _Reader(memoryview(data))
    out = reader.struct(0)
    if reader.pos != len(reader.data):
        raise Malformed(f"{len(reader.data) - reader.pos} bytes after the struct")
    return out


def encode(struct: list[Field]) -> bytes:
    out = bytearray()
    _struct(out, struct)
    return bytes(out)


def get(struct: list[Field], fid: int, default: Any = None) -> Any:
    """The value of field `fid` (True or False for a boolean), or `default` when it is absent."""
    for field in struct:
        if field.id == fid:
            return field.type == TRUE if field.type in (TRUE, FALSE) else field.value
    return default


def put(struct: list[Field], fid: int, kind: int, value: Any) -> list[Field]:
    """A copy of `struct` with field `fid` set (replaced where it is, or inserted in field-id order)."""
    out = [f for f in struct if f.id != fid]
    at = next((n for n, f in enumerate(out) if f.id > fid), len(out))
    return out[:at] + [Field(fid, kind, value)] + out[at:]


def drop(struct: list[Field], *fids: int) -> list[Field]:
    """A copy of `struct` without the fields `fids`."""
    return [f for f in struct if f.id not in fids]


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise Malformed("ends inside a value")
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise Malformed("a varint longer than 10 bytes")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def raw(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise Malformed("ends inside a binary value")
        self.pos += size
        return bytes(self.data[self.pos - size:self.pos])

    def value(self, kind: int, depth: int) -> Any:
        if depth > DEPTH:
            raise Malformed(f"nested deeper than {DEPTH}")
        if kind in INTEGERS:
            return self.zigzag()
        if kind == BYTE:
            return self.byte()
        if kind in (TRUE, FALSE):  # a boolean element of a list: one byte, 1 true and 2 false
            return self.byte()
        if kind == DOUBLE:
            return self.raw(8)
        if kind == BINARY:
            return self.raw(self.varint())
        if kind in (LIST, SET):
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            return Seq(head & 0x0F, [self.value(head & 0x0F, depth + 1) for _ in range(size)])
        if kind == MAP:
            size = self.varint()
            head = self.byte() if size else 0
            return Map(head >> 4, head & 0x0F, [(self.value(head >> 4, depth + 1), self.value(head & 0x0F, depth + 1))
                                                for _ in range(size)])
        if kind == STRUCT:
            return self.struct(depth + 1)
        raise Malformed(f"unknown type {kind}")

    def struct(self, depth: int) -> list[Field]:
        fields: list[Field] = []
        last = 0
        while True:
            head = self.byte()
            kind = head & 0x0F
            if kind == STOP:
                return fields
            last = last + (head >> 4) if head >> 4 else self.zigzag()
            fields.append(Field(last, kind, None if kind in (TRUE, FALSE) else self.value(kind, depth)))


def _varint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(out: bytearray, n: int) -> None:
    _varint(out, (n << 1) ^ (n >> 63))


def _value(out: bytearray, kind: int, value: Any) -> None:
    if kind in INTEGERS:
        _zigzag(out, value)
    elif kind in (BYTE, TRUE, FALSE):
        out.append(value & 0xFF)
    elif kind == DOUBLE:
        out += value
    elif kind == BINARY:
        _varint(out, len(value))
        out += value
    elif kind in (LIST, SET):
        size = len(value.values)
        if size < 15:
            out.append(size << 4 | value.type)
        else:
            out.append(0xF0 | value.type)
            _varint(out, size)
        for item in value.values:
            _value(out, value.type, item)
    elif kind == MAP:
        _varint(out, len(value.pairs))
        if value.pairs:
            out.append(value.key << 4 | value.value)
        for key, item in value.pairs:
            _value(out, value.key, key)
            _value(out, value.value, item)
    elif kind == STRUCT:
        _struct(out, value)
    else:
        raise Malformed(f"unknown type {kind}")


def _struct(out: bytearray, struct: list[Field]) -> None:
    last = 0
    for field in struct:
        delta = field.id - last
        if 0 < delta <= 15:
            out.append(delta << 4 | field.type)
        else:
            out.append(field.type)
            _zigzag(out, field.id)
        last = field.id
        if field.type not in (TRUE, FALSE):
            _value(out, field.type, field.value)
    out.append(STOP)
