"""taulib.collect.formats: the one table of output formats, and everything that lists formats agrees with it (the
CLI's choices, the schemas' enums, the man pages); each format's writer gives bytes that are a function of the rows
only, and its reader gives the rows back."""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from taulib.collect import formats, parquet

ROOT = Path(__file__).resolve().parent.parent


def test_the_table_is_keyed_by_each_formats_own_name_and_no_two_share_a_suffix():
    assert list(formats.FORMATS) == [f.name for f in formats.FORMATS.values()] == list(formats.NAMES)
    assert formats.NAMES == ("parquet", "csv", "jsonl")
    suffixes = [f.suffix for f in formats.FORMATS.values()]
    assert len(set(suffixes)) == len(suffixes)
    assert all(re.fullmatch(r"[a-z0-9]+", s) for s in suffixes)
    with pytest.raises(KeyError):
        formats.get("orc")


def test_tau_collects_format_option_offers_exactly_the_tables_formats():
    from taulib.cli.collect import cli

    option = next(p for p in cli.params if p.name == "fmt")
    assert tuple(option.type.choices) == formats.NAMES


def test_a_format_outside_the_table_is_refused_before_anything_is_read():
    from taulib.collect import shape
    from taulib.errors import UsageError

    with pytest.raises(UsageError) as err:
        shape.asked(None, "orc")
    assert err.value.code == 2 and err.value.message == "--format 'orc' is not one of parquet, csv, jsonl"


def _format_enums(node: object) -> list[list]:
    found = []
    if isinstance(node, dict):
        for key, sub in node.items():
            if key == "format" and isinstance(sub, dict) and "enum" in sub:
                found.append(sub["enum"])
            found.extend(_format_enums(sub))
    elif isinstance(node, list):
        for sub in node:
            found.extend(_format_enums(sub))
    return found


def test_the_schemas_output_format_enum_is_the_table():
    common = json.loads((ROOT / "share" / "schemas" / "common.schema.json").read_text(encoding="utf-8"))
    assert common["$defs"]["format"]["enum"] == list(formats.NAMES)
    for path in (ROOT / "share" / "schemas").glob("*.schema.json"):
        for enum in _format_enums(json.loads(path.read_text(encoding="utf-8"))):
            assert enum == list(formats.NAMES), f"{path.name} lists the formats {enum}"
        text = path.read_text(encoding="utf-8")
        if '"format"' in text and path.name not in ("common.schema.json", "manifest.schema.json"):
            assert "common.schema.json#/$defs/format" in text, f"{path.name} spells the formats itself"


def test_the_man_pages_name_every_format_and_only_those():
    collect = (ROOT / "man" / "tau-collect.1").read_text(encoding="utf-8")
    tag = " | ".join(rf"\fI{name}\fR" for name in formats.NAMES)
    assert f".BR \\-\\-format \" \" {tag}" in collect, "tau-collect(1) --format does not list the table's formats"
    synopsis = " | ".join(formats.NAMES)
    assert f".IR {synopsis} ]" in collect
    run5 = (ROOT / "man" / "tau-run.5").read_text(encoding="utf-8")
    section = run5.split(".SS DEST/_tau_collection.json", 1)[1].split(".SS ", 1)[0]
    for name in formats.NAMES:
        assert f".B {name}\n" in section, f"tau-run(5) does not say what fixes the bytes of {name}"


SCHEMA = pa.schema([("id", pa.int64()), ("label", pa.string()), ("score", pa.float64())])


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "label": [f"l{i % 3}" for i in range(start, start + n)],
                     "score": [i / 4 for i in range(start, start + n)]}, schema=SCHEMA)


def _write(fmt: formats.Format, tables: list[pa.Table]) -> bytes:
    sink = io.BytesIO()
    writer = fmt.open(sink, SCHEMA)
    for table in tables:
        writer.write(table)
    writer.close()
    return sink.getvalue()


@pytest.mark.parametrize("name", formats.NAMES)
def test_each_formats_bytes_are_a_function_of_its_rows_and_its_reader_gives_them_back(name, tmp_path):
    fmt = formats.get(name)
    rows = _rows(1000)
    first, second = _write(fmt, [rows]), _write(fmt, [rows])
    assert hashlib.sha256(first).digest() == hashlib.sha256(second).digest()
    path = tmp_path / f"part-00000.{fmt.suffix}"
    path.write_bytes(first)
    back = fmt.read(str(path))
    assert back.num_rows == 1000
    assert back.column("id").to_pylist() == list(range(1000))
    assert back.column("label").to_pylist() == rows.column("label").to_pylist()


@pytest.mark.parametrize("name", [n for n in formats.NAMES if formats.get(n).rows_held == formats.TEXT_ROWS])
def test_a_text_formats_bytes_do_not_depend_on_how_its_rows_are_grouped_into_writes(name):
    fmt = formats.get(name)
    whole = _write(fmt, [_rows(1000)])
    assert _write(fmt, [_rows(300), _rows(700, start=300)]) == whole
    assert _write(fmt, [_rows(1, start=i) for i in range(1000)]) == whole


def test_parquet_row_groups_are_exactly_the_tables_group_size(tmp_path):
    import pyarrow.parquet as pq

    fmt = formats.get("parquet")
    path = tmp_path / "part-00000.parquet"
    path.write_bytes(_write(fmt, [_rows(parquet.ROWS + 5)]))
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [parquet.ROWS, 5]


def test_only_repeating_string_columns_are_dictionary_encoded():
    batch = pa.record_batch({"same": ["a"] * 10, "unique": [str(i) for i in range(10)], "n": list(range(10))})
    assert parquet.dictionary_columns(batch) == ["same"]
