"""The output formats of a collection, in one table: each one's name, file suffix, rows held before a write, writer,
reader, and the contract that fixes its bytes (tau-run(5) "DEST/_tau_collection.json" says the same).

Everything that lists the formats is derived from `FORMATS`: tau-collect's `--format` choices, the check of a
`--format` value, the stage's file names and `collect.outputs`' encoders; tests prove that the schemas' `format`
enums and the man pages name exactly these.

Pure: it reads and writes nothing itself; a writer writes the rows it is given into the file object it was opened on (a
`collect.outputs.Sink`, which hashes and fsyncs), and a reader reads one written file back (for checks and tests).
Imports nothing heavy: pyarrow is imported when a writer or reader is made, so listing the formats costs nothing.
Promises: a format's bytes are a function of its rows only; the text formats' bytes do not depend on how the rows
are grouped into writes, and Parquet's row groups are exactly PARQUET_ROWS rows (a partition's last takes the
rest).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol

PARQUET_ROWS = 65_536  # rows of a Parquet row group
TEXT_ROWS = 16_384  # rows held before they are written as CSV or JSON lines (any grouping gives the same bytes)
JSON_ROWS = 8192  # rows converted to JSON lines at a time: small enough to stay in the processor's caches
DICTIONARY_SHARE = 0.5  # a string column whose first row group has at most this share distinct is dictionary-encoded


class Writer(Protocol):
    """An open partition file of one format: tables of rows written in order, then closed (which writes any
    footer; the file object itself is closed by its owner)."""

    def write(self, table: Any) -> None: ...

    def close(self) -> None: ...


class Format(NamedTuple):
    name: str  # as --format, the plan's output.format and the schemas' enums spell it
    suffix: str  # of its files: part-NNNNN.<suffix>
    rows_held: int  # rows buffered before a write
    open: Callable[[Any, Any, Any], Writer]  # (file object, Arrow schema, first batch) -> Writer
    read: Callable[[str], Any]  # path -> pyarrow.Table of the file's rows
    contract: str  # what fixes the bytes, in words


class _Parquet:
    def __init__(self, sink: Any, schema: Any, first: Any) -> None:
        import pyarrow.parquet as pq

        self.writer = pq.ParquetWriter(sink, schema, compression="snappy", use_dictionary=dictionary_columns(first))

    def write(self, table: Any) -> None:
        self.writer.write_table(table, row_group_size=PARQUET_ROWS)

    def close(self) -> None:
        self.writer.close()


class _Csv:
    def __init__(self, sink: Any, schema: Any, first: Any) -> None:
        import pyarrow.csv as pacsv

        self.writer = pacsv.CSVWriter(sink, schema)

    def write(self, table: Any) -> None:
        self.writer.write_table(table)

    def close(self) -> None:
        self.writer.close()


class _JsonLines:
    def __init__(self, sink: Any, schema: Any, first: Any) -> None:
        self.sink = sink

    def write(self, table: Any) -> None:
        from taulib.collect import jsonl

        for batch in table.to_batches(max_chunksize=JSON_ROWS):
            self.sink.write(jsonl.lines(batch))

    def close(self) -> None:
        return None  # JSON lines have no footer


def _read_parquet(path: str) -> Any:
    import pyarrow.parquet as pq

    return pq.read_table(path)


def _read_csv(path: str) -> Any:
    import pyarrow.csv as pacsv

    return pacsv.read_csv(path)


def _read_json_lines(path: str) -> Any:
    import pyarrow.json as pajson

    return pajson.read_json(path)


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("parquet", "parquet", PARQUET_ROWS, _Parquet, _read_parquet,
           "Parquet by pyarrow with snappy compression, in row groups of 65,536 rows (a partition's last group takes "
           "the rest), dictionary encoding only for the string and binary columns whose values, in the partition's "
           "first group, repeat (at most half of them distinct), every other column plain"),
    Format("csv", "csv", TEXT_ROWS, _Csv, _read_csv,
           "CSV by pyarrow's CSV writer, with a header line; how rows are grouped into writes does not change the "
           "bytes"),
    Format("jsonl", "jsonl", TEXT_ROWS, _JsonLines, _read_json_lines,
           "JSON lines: one JSON object per row, keys in schema order, by orjson, each line ending in a newline; "
           "how rows are grouped into writes does not change the bytes"),
)}
NAMES: tuple[str, ...] = tuple(FORMATS)


def get(name: str) -> Format:
    """The format of this name (KeyError for a name that is not in the table: callers check `NAMES` first)."""
    return FORMATS[name]


def dictionary_columns(batch: Any) -> list[str]:
    """The string and binary columns dictionary-encoded: those whose values in this first batch repeat (at most
    DICTIONARY_SHARE of them distinct). A function of the rows only, so the same winners give the same bytes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chosen = []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        kind = field.type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
                or pa.types.is_large_binary(kind) or pa.types.is_dictionary(kind)):
            continue
        if pa.types.is_dictionary(kind) or len(column) == 0 \
                or pc.count_distinct(column, mode="all").as_py() <= DICTIONARY_SHARE * len(column):
            chosen.append(field.name)
    return chosen
