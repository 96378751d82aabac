"""A Parquet partition file assembled from row groups: a winner's row groups copied unchanged where they fit, the
other rows encoded by pyarrow; tau writes the file's footer itself (tau-run(5) "DEST/_tau_collection.json").

Reads: a winner file's footer (`Footer`), from its descriptor. Writes: only into the partition file's `Sink`
(`collect.outputs`), which hashes every byte as it is written.
How: the file is the magic, then segments in row order, then one footer. A *copied* segment is one row group of a
winner, its column chunks' bytes copied as they are in the winner (never decoded), their offsets moved to where
they now lie; it is taken when the winner fits (its Parquet schema is the one pyarrow writes for its Arrow schema,
it is not encrypted, its chunks lie inside it), the row group has at least COPY_ROWS rows and it lies wholly inside
one piece of the partition (`rules.partition`); the reader (`collect.inputs`) decides, row group by row group. An
*encoded* segment holds the rows in between, encoded by pyarrow's ParquetWriter (snappy, the dictionary rule of
`dictionary_columns` on the segment's first group) in row groups of exactly ROWS rows but its last; pyarrow's bytes
pass through to the file but its magic and its footer, whose row groups are kept. The footer is the one pyarrow
writes for the partition's Arrow schema with no rows, with the file's row count and every segment's row groups in
order. Page indexes and bloom filters of copied chunks are left out (optional in Parquet).
Promises: the bytes are a function of the winners' bytes and the partition plan only: the same winners give the
same files on every executor and however many tasks or lanes write them. A copied row group's pages are checked by
its winner file's sha256, not by decoding them. The winners of a collection share one Arrow schema, field metadata
included (`collect.winners`), so every segment of a file has the file's Parquet schema.
Memory: a copied row group is written from the winner's buffer, or read COPY_CHUNK bytes at a time; an encoded
segment holds at most one row group and pyarrow's last column chunk at its close. Imports pyarrow when a writer or a
footer's template is made.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, Iterator, NamedTuple

from taulib.collect import thrift
from taulib.collect.thrift import I64, LIST, STRUCT, Field, Seq
from taulib.errors import Conflict

MAGIC = b"PAR1"
ROWS = 65_536  # rows of an encoded row group (the last of a segment takes the rest)
DICTIONARY_SHARE = 0.5  # a string column whose first row group has at most this share distinct is dictionary-encoded
DISTINCT_PIECE = 4096  # values of such a column counted at a time (the count stops once too many are distinct)
COPY_ROWS = 16_384  # a winner's row group is copied only with at least this many rows (else it is re-encoded)
COPY_CHUNK = 4 << 20  # bytes of a copied row group read at a time from a winner not held in memory (by default)

# field ids of parquet.thrift that this module reads or changes
FILE_SCHEMA, FILE_ROWS, FILE_GROUPS, FILE_ENCRYPTION, FILE_SIGNING_KEY = 2, 3, 4, 8, 9
GROUP_COLUMNS, GROUP_FILE_OFFSET, GROUP_ORDINAL = 1, 5, 7
GROUP_ROWS = 3
GROUP_BYTES = 2  # RowGroup.total_byte_size: its columns' bytes, uncompressed
CHUNK_PATH, CHUNK_FILE_OFFSET, CHUNK_META = 1, 2, 3
CHUNK_INDEXES = (4, 5, 6, 7)  # offset and column index: offsets and lengths
CHUNK_CRYPTO = (8, 9)
META_SIZE, META_DATA_PAGE, META_INDEX_PAGE, META_DICTIONARY_PAGE = 7, 9, 10, 11
META_BLOOM = (14, 15)
ELEMENT_CHILDREN = 5  # SchemaElement.num_children: absent on a leaf, a column of its own


class Footer(NamedTuple):
    """A winner file's footer as tau reads it: its row groups (rows, RowGroup struct, each chunk's (start, length)),
    and whether they can be copied."""
    rows: int
    groups: list[tuple[int, list[Field], list[tuple[int, int]]]]
    schema: bytes  # the Parquet schema's encoding (FileMetaData field 2)
    copyable: bool  # not encrypted, every chunk inside the file's data
    meta: list[Field]  # the whole FileMetaData


class Source:
    """Where a copied row group's bytes are: the winner's bytes held in memory, or a descriptor of the winner of its
    own. Held by the reader while it reads the file and by each row group it hands over to copy (`hold`); let go of
    (`release`) by each when done, and the last lets go of the bytes (so the reader's buffer is free for its next
    file as soon as the last row group is copied) or closes the descriptor."""

    def __init__(self, data: memoryview | None, fd: int | None = None, scratch: memoryview | None = None) -> None:
        self.data, self.fd = data, fd
        self.scratch = scratch  # where bytes read from `fd` go, a piece of its size at a time (made when first needed)
        self.holders = 1  # the reader
        self.lock = threading.Lock()  # the reader's thread and the writer's both hold and release

    def hold(self) -> Source:
        with self.lock:
            self.holders += 1
        return self

    def release(self) -> None:
        with self.lock:
            self.holders -= 1
            if self.holders:
                return
            data, fd, self.data, self.fd = self.data, self.fd, None, None
        del data
        if fd is not None:
            os.close(fd)

    def pieces(self, start: int, length: int) -> Iterator[memoryview]:
        """The bytes `start` .. `start + length`, in pieces each valid until the next is asked for."""
        if self.data is not None:
            yield self.data[start:start + length]
            return
        assert self.fd is not None, "a row group is copied only while its source is held"
        if self.scratch is None:
            self.scratch = memoryview(bytearray(COPY_CHUNK))
        end = start + length
        while start < end:
            piece = self.scratch[:os.preadv(self.fd, [self.scratch[:end - start]], start)]
            if not piece:
                raise Conflict("a winner file shrank while it was copied")
            yield piece
            start += len(piece)

    def __del__(self) -> None:
        if self.fd is not None:  # a collection that stopped before every row group was copied
            os.close(self.fd)
            self.fd = None


class Span(NamedTuple):
    """A winner's row group to copy, wholly inside one piece of the partition it goes to."""
    num_rows: int
    group: list[Field]
    ranges: list[tuple[int, int]]
    schema: Any  # the winner's Arrow schema (no metadata)
    found: Footer  # the winner's
    source: Source


def footer(fd: int, size: int, name: str) -> Footer:
    """The footer of the Parquet file `name` of `size` bytes open on `fd` (Conflict when it is not one)."""
    tail = os.pread(fd, 8, size - 8) if size >= 12 else b""
    length = int.from_bytes(tail[:4], "little") if len(tail) == 8 else 0
    if len(tail) != 8 or tail[4:] != MAGIC or length + 12 > size or os.pread(fd, 4, 0) != MAGIC:
        raise Conflict(f"{name} is not a Parquet file", path=name)
    end = size - 8 - length
    try:
        meta = thrift.decode(os.pread(fd, length, end))
        schema = thrift.get(meta, FILE_SCHEMA)
        columns = sum(thrift.get(element, ELEMENT_CHILDREN) is None for element in schema.values)
        groups, copyable = [], thrift.get(meta, FILE_ENCRYPTION) is None and thrift.get(meta, FILE_SIGNING_KEY) is None
        for group in thrift.get(meta, FILE_GROUPS, Seq(STRUCT, [])).values:
            ranges = []
            for chunk in thrift.get(group, GROUP_COLUMNS, Seq(STRUCT, [])).values:
                start, length = _range(chunk)
                inside = 4 <= start and length > 0 and start + length <= end
                copyable = copyable and inside and thrift.get(chunk, CHUNK_PATH) is None \
                    and all(thrift.get(chunk, f) is None for f in CHUNK_CRYPTO)
                ranges.append((start, length))
            copyable = copyable and len(ranges) == columns
            groups.append((int(thrift.get(group, GROUP_ROWS)), group, ranges))
        rows = int(thrift.get(meta, FILE_ROWS))
    except (thrift.Malformed, TypeError, AttributeError, ValueError) as exc:
        raise Conflict(f"{name} has a footer tau cannot read ({exc})", path=name) from None
    if sum(g[0] for g in groups) != rows or any(g[0] < 0 for g in groups):
        raise Conflict(f"{name} has a footer whose row groups do not add up to its rows", path=name)
    return Footer(rows, groups, _schema_bytes(meta), copyable, meta)


def decoded_size(group: list[Field]) -> int:
    """A row group's bytes once decompressed, as its footer says (0 when it does not)."""
    value = thrift.get(group, GROUP_BYTES)
    return int(value) if isinstance(value, int) and value > 0 else 0


def fits(found: Footer, schema: Any) -> bool:
    """Whether the row groups of a file with this footer and Arrow `schema` can be copied: it is copyable and its
    Parquet schema is the one pyarrow writes for `schema`."""
    return found.copyable and found.schema == _schema_bytes(template(schema))


@functools.lru_cache(maxsize=16)
def _template(serialized: bytes) -> tuple[Field, ...]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.ipc.read_schema(pa.py_buffer(serialized))
    out = pa.BufferOutputStream()
    pq.ParquetWriter(out, schema, compression="snappy").close()
    data = out.getvalue().to_pybytes()
    length = int.from_bytes(data[-8:-4], "little")
    return tuple(thrift.decode(data[-8 - length:-8]))


def template(schema: Any) -> list[Field]:
    """The footer pyarrow writes for a file of Arrow `schema` without rows (cached)."""
    return list(_template(schema.serialize().to_pybytes()))


def _schema_bytes(meta: list[Field]) -> bytes:
    return thrift.encode([Field(1, LIST, thrift.get(meta, FILE_SCHEMA))])


def _range(chunk: list[Field]) -> tuple[int, int]:
    """(first byte, length) of a column chunk: from its dictionary page when it has one."""
    meta = thrift.get(chunk, CHUNK_META)
    data, dictionary = thrift.get(meta, META_DATA_PAGE), thrift.get(meta, META_DICTIONARY_PAGE)
    start = dictionary if dictionary is not None and 0 < dictionary < data else data
    return int(start), int(thrift.get(meta, META_SIZE))


def _moved(group: list[Field], deltas: list[int]) -> list[Field]:
    """`group` with its chunks moved by `deltas` bytes each; page indexes, bloom filters and its ordinal (which only
    encryption uses) left out."""
    columns = []
    for chunk, delta in zip(thrift.get(group, GROUP_COLUMNS).values, deltas, strict=True):
        meta = thrift.drop(thrift.get(chunk, CHUNK_META), *META_BLOOM)
        for fid in (META_DATA_PAGE, META_INDEX_PAGE, META_DICTIONARY_PAGE):
            value = thrift.get(meta, fid)
            if value:
                meta = thrift.put(meta, fid, I64, value + delta)
        chunk = thrift.put(thrift.drop(chunk, *CHUNK_INDEXES), CHUNK_META, STRUCT, meta)
        if thrift.get(chunk, CHUNK_FILE_OFFSET):
            chunk = thrift.put(chunk, CHUNK_FILE_OFFSET, I64, thrift.get(chunk, CHUNK_FILE_OFFSET) + delta)
        columns.append(chunk)
    group = thrift.put(group, GROUP_COLUMNS, LIST, Seq(STRUCT, columns))
    if thrift.get(group, GROUP_FILE_OFFSET) is not None and deltas:
        group = thrift.put(group, GROUP_FILE_OFFSET, I64, thrift.get(group, GROUP_FILE_OFFSET) + deltas[0])
    return thrift.drop(group, GROUP_ORDINAL)


class Writer:
    """A partition file in Parquet (`collect.formats`): rows to encode (`write`) and winners' row groups to copy
    (`copy`), in row order; `close` writes the footer."""

    def __init__(self, sink: Any, schema: Any) -> None:
        self.sink, self.arrow, self.meta = sink, schema, template(schema)
        self.schema = _schema_bytes(self.meta)
        self.groups: list[list[Field]] = []
        self.rows = 0
        self.segment: _Segment | None = None
        sink.write(MAGIC)

    def write(self, table: Any) -> None:
        if self.segment is None:
            self.segment = _Segment(self.sink, self.arrow)
        self.segment.add(table)

    def copy(self, span: Span) -> None:
        # the winners of a collection share one Arrow schema, field metadata included (`collect.winners`), and a
        # winner's row groups are copied only when its Parquet schema is the one pyarrow writes for it: the file's
        assert span.found.schema == self.schema, "a row group is copied only into a file of its own Parquet schema"
        self._end_segment()
        deltas = []
        for start, length in span.ranges:
            deltas.append(self.sink.tell() - start)
            for piece in span.source.pieces(start, length):
                self.sink.write(piece)
        span.source.release()
        self.groups.append(_moved(span.group, deltas))
        self.rows += span.num_rows

    def close(self) -> None:
        self._end_segment()
        meta = thrift.put(self.meta, FILE_ROWS, I64, self.rows)
        data = thrift.encode(thrift.put(meta, FILE_GROUPS, LIST, Seq(STRUCT, self.groups)))
        self.sink.write(data + len(data).to_bytes(4, "little") + MAGIC)

    def _end_segment(self) -> None:
        if self.segment is None:
            return
        groups, schema = self.segment.finish()
        self.segment = None
        assert not groups or schema == self.schema, "pyarrow wrote the segment in the file's Parquet schema"
        self.groups += groups
        self.rows += sum(int(thrift.get(group, GROUP_ROWS)) for group in groups)


class _Segment:
    """Rows encoded by pyarrow's ParquetWriter in row groups of exactly ROWS rows (the last takes the rest),
    its bytes passed through to the partition file but its magic and its footer (held back from its close on, then
    read for its row groups). Given to pyarrow as its file object."""

    def __init__(self, sink: Any, schema: Any) -> None:
        self.sink, self.schema = sink, schema  # the file's Arrow schema: its field metadata fixes the Parquet one
        self.start = sink.tell()  # where the segment's byte 4 (after pyarrow's magic) lands
        self.position = 0  # bytes pyarrow wrote
        self.held: bytearray | None = None  # what pyarrow writes from its close on
        self.writer: Any = None
        self.rest: Any = None  # rows short of a whole row group, written with the next ones

    def add(self, table: Any) -> None:
        if self.rest is not None:
            import pyarrow as pa

            table = pa.concat_tables([self.rest, table])
            self.rest = None
        whole = table.num_rows - table.num_rows % ROWS
        if whole < table.num_rows:
            self.rest = table.slice(whole)
        if whole:
            self._encode(table.slice(0, whole))

    def _encode(self, table: Any) -> None:
        if self.writer is None:
            import pyarrow.parquet as pq

            first = table.slice(0, ROWS)
            self.writer = pq.ParquetWriter(self, self.schema, compression="snappy",
                                           use_dictionary=dictionary_columns(first))
        self.writer.write_table(table, row_group_size=ROWS)

    def finish(self) -> tuple[list[list[Field]], bytes]:
        """Write the last rows and pyarrow's last bytes; the segment's row groups, moved to where they lie, and
        its Parquet schema's encoding."""
        if self.rest is not None:
            rest, self.rest = self.rest, None
            self._encode(rest)
        if self.writer is None:
            return [], b""
        self.held = bytearray()
        self.writer.close()
        held, self.held = self.held, None
        length = int.from_bytes(held[-8:-4], "little")
        if held[-4:] != MAGIC or length + 8 > len(held):
            raise Conflict("pyarrow wrote a Parquet footer tau cannot read")
        self.sink.write(memoryview(held)[:len(held) - length - 8])
        meta = thrift.decode(memoryview(held)[len(held) - length - 8:-8])
        delta = self.start - len(MAGIC)
        groups = [_moved(group, [delta] * len(thrift.get(group, GROUP_COLUMNS).values))
                  for group in thrift.get(meta, FILE_GROUPS).values]
        return groups, _schema_bytes(meta)

    # -- pyarrow's file object ------------------------------------------------------------------------------------

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if self.held is not None:
            self.held += view
        elif self.position + view.nbytes > len(MAGIC):
            self.sink.write(view[max(0, len(MAGIC) - self.position):])
        self.position += view.nbytes
        return view.nbytes

    closed = False  # pyarrow asks a file object whether it is closed

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        return None

    def writable(self) -> bool:
        return True


def dictionary_columns(batch: Any) -> list[str]:
    """The string and binary columns dictionary-encoded: those whose values in this first batch repeat (at most
    DICTIONARY_SHARE of them distinct). A function of the rows only, so the same winners give the same bytes."""
    import pyarrow as pa

    chosen = []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        kind = field.type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
                or pa.types.is_large_binary(kind) or pa.types.is_dictionary(kind)):
            continue
        if pa.types.is_dictionary(kind) or len(column) == 0 or _repeat(column):
            chosen.append(field.name)
    return chosen


def _repeat(column: Any) -> bool:
    """Whether at most DICTIONARY_SHARE of the column's values are distinct (a null counts as one value). The
    values' hashes are counted first, DISTINCT_PIECE values at a time, and the count stops as soon as too many are
    distinct: values are at least as many as their hashes, so that answers no exactly, for a column of distinct
    texts (the usual one) at the cost of a set of hashes, not of a hash table of its values (count_distinct held
    43 MiB at its peak for 65,536 texts of 200 characters, measured). Otherwise (few distinct hashes, so few
    distinct values, or a collision) the values are counted exactly."""
    import pyarrow.compute as pc

    most = DICTIONARY_SHARE * len(column)
    hashes: set[int] = set()
    for start in range(0, len(column), DISTINCT_PIECE):
        hashes.update(map(hash, column.slice(start, DISTINCT_PIECE).to_pylist()))
        if len(hashes) > most:
            return False
    counted: int = pc.count_distinct(column, mode="all").as_py()
    return counted <= most
