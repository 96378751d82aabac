"""The output formats of a collection, in one table: each one's name, file suffix, rows held before a write, writer,
reader, and the contract that fixes its bytes (tau-run(5) "DEST/_tau_collection.json" says the same).

Everything that lists the formats is derived from `FORMATS`: tau-collect's `--format` choices, the check of a
`--format` value, the stage's file names and `collect.outputs`' encoders; tests prove that the schemas' `format`
enums and the man pages name exactly these.

Pure: it reads and writes nothing itself; a writer writes the rows it is given into the file object it was opened on (a
`collect.outputs.Sink`, which hashes and fsyncs), and a reader reads one written file back (for checks and tests).
Imports nothing heavy: pyarrow is imported when a writer or reader is made, so listing the formats costs nothing.
Promises: a text format's bytes are a function of its rows only and do not depend on how the rows are grouped into
writes; Parquet's are a function of the winners' bytes and the partition plan (`collect.parquet`: a winner's row
groups copied where they fit, the other rows in row groups of exactly `parquet.ROWS` rows but the last).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol

from taulib.collect import parquet

TEXT_ROWS = 16_384  # rows held before they are written as CSV or JSON lines (any grouping gives the same bytes)
JSON_ROWS = 8192  # rows converted to JSON lines at a time: small enough to stay in the processor's caches


class Writer(Protocol):
    """An open partition file of one format: tables of rows written in order, then closed (which writes any
    footer; the file object itself is closed by its owner)."""

    def write(self, table: Any) -> None: ...

    def close(self) -> None: ...


class Format(NamedTuple):
    name: str  # as --format, the plan's output.format and the schemas' enums spell it
    suffix: str  # of its files: part-NNNNN.<suffix>
    rows_held: int  # rows buffered before a write
    open: Callable[[Any, Any], Writer]  # (file object, Arrow schema) -> Writer
    read: Callable[[str], Any]  # path -> pyarrow.Table of the file's rows
    contract: str  # what fixes the bytes, in words
    cannot_hold: tuple[str, ...] = ()  # Arrow types (as they are spelt, up to their '<') it has no way to write
    copies: bool = False  # its writer takes a winner's row groups whole where they fit (`collect.parquet.Span`)


class _Csv:
    def __init__(self, sink: Any, schema: Any) -> None:
        import pyarrow.csv as pacsv

        self.writer = pacsv.CSVWriter(sink, schema)

    def write(self, table: Any) -> None:
        self.writer.write_table(table)

    def close(self) -> None:
        self.writer.close()


class _JsonLines:
    def __init__(self, sink: Any, schema: Any) -> None:
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
    Format("parquet", "parquet", parquet.ROWS, parquet.Writer, _read_parquet,
           "Parquet: a winner's row group of at least 16,384 rows that lies wholly in one partition, from a winner "
           "whose Parquet schema is the one pyarrow writes for its Arrow schema, is copied unchanged; the rows in "
           "between are encoded by pyarrow with snappy compression in row groups of 65,536 rows (the last of a run "
           "of them takes the rest), dictionary encoding only for the string and binary columns whose values, in "
           "the run's first group, repeat (at most half of them distinct), every other column plain; the footer is "
           "pyarrow's for the partition's Arrow schema, with the row groups in order", copies=True),
    Format("csv", "csv", TEXT_ROWS, _Csv, _read_csv,
           "CSV by pyarrow's CSV writer, with a header line; how rows are grouped into writes does not change the "
           "bytes",
           ("list", "large_list", "fixed_size_list", "list_view", "large_list_view", "struct", "map", "dense_union",
            "sparse_union")),
    Format("jsonl", "jsonl", TEXT_ROWS, _JsonLines, _read_json_lines,
           "JSON lines: one JSON object per row, keys in schema order, by orjson, each line ending in a newline; "
           "how rows are grouped into writes does not change the bytes"),
)}
NAMES: tuple[str, ...] = tuple(FORMATS)


def unwritable(name: str, fields: list[dict[str, str]]) -> dict[str, str] | None:
    """The first of `fields` (name and Arrow type, as a winner's manifest records them) that format `name` cannot
    write (a nested value in CSV, say), or None."""
    refused = FORMATS[name].cannot_hold
    return next((f for f in fields if f["type"].split("<", 1)[0] in refused), None)


def get(name: str) -> Format:
    """The format of this name (KeyError for a name that is not in the table: callers check `NAMES` first)."""
    return FORMATS[name]
