"""tau-init over an input dataset: the index it records (every file's size and sha256, pieces a shard reads alone),
records from the input's rows, and every bad dataset refused (65, or 66 when it is not there) naming the file and
the row, with nothing written."""

from __future__ import annotations

import gzip
import hashlib
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import error_of, tau
from input_fixtures import request, rows, write


def init(run_dir, doc):
    return tau("tau-init", str(run_dir), input=json.dumps(doc))


def refused(workspace, doc, code=65):
    """tau-init's refusal: (its message), after checking the exit code, the one error and that nothing exists."""
    run_dir = workspace / "run"
    proc = init(run_dir, doc)
    assert proc.returncode == code, proc.stderr
    err = error_of(proc)
    assert err["error"] == ("bad_input" if code == 65 else "not_found")
    assert not run_dir.exists()
    return err["message"]


def test_the_index_records_every_file_s_size_and_sha256_and_pieces_that_cover_its_rows(workspace):
    source = write(workspace / "input", "jsonl", rows(1000), files=2)
    (source / "_SUCCESS").write_text("")  # a marker tools leave: passed over
    (source / ".part-000.jsonl.crc").write_text("x")
    proc = init(workspace / "run", request(source, input={"piece_bytes": 4096}))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["records"] == 1000
    index = json.loads((workspace / "run" / "input.json").read_text())
    assert index["path"] == str(source) and index["format"] == "jsonl" and index["rows"] == 1000
    assert index["keep"] == [{"name": "id", "type": "int64"}] and index["columns"] is None
    row = 0
    for entry, name in zip(index["files"], ["part-000.jsonl", "part-001.jsonl"], strict=True):
        data = (source / name).read_bytes()
        assert entry["name"] == name and entry["size"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["row_start"] == row and entry["rows"] == data.count(b"\n")
        offset = 0
        for piece in entry["pieces"]:  # contiguous, at row boundaries, each hashed alone
            assert piece["offset"] == offset and piece["row_start"] == row
            chunk = data[offset:offset + piece["length"]]
            assert piece["sha256"] == hashlib.sha256(chunk).hexdigest()
            assert chunk.endswith(b"\n") and chunk.count(b"\n") == piece["rows"]
            assert piece["length"] >= 4096 or offset + piece["length"] == len(data)
            offset += piece["length"]
            row += piece["rows"]
        assert offset == len(data)
    run = json.loads((workspace / "run" / "run.json").read_text())
    assert run["input"] == {"path": "input.json",
                            "sha256": hashlib.sha256((workspace / "run" / "input.json").read_bytes()).hexdigest()}
    assert oct(os.stat(workspace / "run" / "input.json").st_mode & 0o777) == "0o600"


def test_a_single_csv_file_given_through_a_symlink_is_indexed_at_its_real_path_with_its_header_shared(workspace):
    source = write(workspace / "input", "csv", rows(50), files=1)
    link = workspace / "prompts.csv"
    link.symlink_to(source / "part-000.csv")
    proc = init(workspace / "run", request(link, keep=False))
    assert proc.returncode == 0, proc.stderr
    index = json.loads((workspace / "run" / "input.json").read_text())
    assert index["path"] == str(source / "part-000.csv") and index["files"][0]["name"] == ""
    header = (source / "part-000.csv").read_bytes().split(b"\n")[0] + b"\n"
    assert index["files"][0]["shared"] == {"offset": 0, "length": len(header),
                                           "sha256": hashlib.sha256(header).hexdigest()}
    assert index["columns"] == [{"name": "id", "type": "string"}, {"name": "prompt", "type": "string"}]
    assert json.loads((workspace / "run" / "plan.json").read_text())["records"] == 50


def test_records_given_must_be_the_input_s_rows(workspace):
    source = write(workspace / "input", "jsonl", rows(10), files=1)
    assert refused(workspace, request(source, records=11)) == (
        "tau-init: plan on standard input asks for 11 records, but its input has 10 rows; leave records out (it is "
        "the input's rows) or give that")


def test_a_missing_input_is_not_found(workspace):
    assert refused(workspace, request(workspace / "nowhere"), code=66) == (
        f"tau-init: plan on standard input: input '{workspace / 'nowhere'}' does not exist")


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_an_empty_dataset_is_refused(workspace, fmt):
    folder = workspace / "input"
    folder.mkdir()
    path = folder / f"empty.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.table({"id": pa.array([], pa.int64())}), path)
    else:
        path.write_text("id,prompt\n" if fmt == "csv" else "")
    assert refused(workspace, request(folder, keep=False)) == (
        f"tau-init: plan on standard input: input '{folder}' has no rows")


def test_an_empty_folder_is_refused(workspace):
    (workspace / "input").mkdir()
    assert refused(workspace, request(workspace / "input")) == (
        f"tau-init: plan on standard input: input '{workspace / 'input'}' is an empty folder")


def test_a_folder_of_mixed_formats_is_refused_naming_a_file_of_the_other_format(workspace):
    source = write(workspace / "input", "jsonl", rows(10), files=1)
    (source / "zz.csv").write_text("id,prompt\n1,a\n")
    assert refused(workspace, request(source)) == (
        f"tau-init: plan on standard input: input '{source}' mixes formats (csv, jsonl: 'zz.csv' is csv); a dataset "
        "is of one format")


def test_parquet_files_of_different_schemas_are_refused_naming_the_field(workspace):
    source = write(workspace / "input", "parquet", rows(10), files=1)
    pq.write_table(pa.table({"id": pa.array([1], pa.int32()), "prompt": ["x"]}), source / "part-001.parquet")
    assert refused(workspace, request(source)) == (
        f"tau-init: plan on standard input: input {source / 'part-001.parquet'} has another schema than "
        f"{source / 'part-000.parquet'}: field 'id' is int32 where {source / 'part-000.parquet'}'s is int64")


def test_csv_files_of_different_headers_are_refused(workspace):
    source = write(workspace / "input", "csv", rows(10), files=1)
    (source / "part-001.csv").write_text("id,text\n1,a\n")
    assert refused(workspace, request(source)) == (
        f"tau-init: plan on standard input: input {source / 'part-001.csv'}'s header (id, text) is not "
        f"{source / 'part-000.csv'}'s (id, prompt)")


@pytest.mark.parametrize("line, why", [
    (b"{not json}\n", "is not JSON (unexpected character"),
    (b"\n", "is blank"),
    (b"[1, 2]\n", "is a JSON list, not an object")])
def test_an_unreadable_json_line_is_refused_naming_its_file_and_line(workspace, line, why):
    source = write(workspace / "input", "jsonl", rows(10), files=1)
    path = source / "part-000.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:6] + [line] + lines[6:]))
    message = refused(workspace, request(source))
    assert message.startswith(f"tau-init: plan on standard input: input {path} line 7 {why}"), message


def test_a_csv_row_with_too_few_fields_is_refused_naming_its_file_and_row(workspace):
    source = write(workspace / "input", "csv", rows(10), files=1)
    path = source / "part-000.csv"
    before = path.read_bytes()
    path.write_bytes(before + b"lonely\n")
    line = before.count(b"\n") + 1  # prompts hold quoted newlines: the row's line is further down than 12
    message = refused(workspace, request(source))
    assert message == (f"tau-init: plan on standard input: input {path} has an unreadable row 11 (line {line}, 1 "
                       "fields where the header has 2): CSV parse error: Expected 2 columns, got 1: lonely")


def test_a_csv_quote_never_closed_is_refused(workspace):
    source = write(workspace / "input", "csv", rows(10), files=1)
    path = source / "part-000.csv"
    path.write_bytes(path.read_bytes() + b'10,"open\n')
    assert refused(workspace, request(source)) == (
        f"tau-init: plan on standard input: input {path} ends inside a quoted field (a quote never closed)")


def test_a_compressed_file_a_subfolder_and_a_symlink_are_refused(workspace, tmp_path):
    source = write(workspace / "input", "jsonl", rows(10), files=1)
    with gzip.open(source / "more.jsonl.gz", "wb") as fh:
        fh.write(b'{"id": 1}\n')
    assert "input file 'more.jsonl.gz' is compressed" in refused(workspace, request(source))
    (source / "more.jsonl.gz").unlink()
    (source / "nested").mkdir()
    assert refused(workspace, request(source)) == (
        f"tau-init: plan on standard input: input {source}/nested is a folder; an input folder holds its files "
        "directly (no subfolders)")
    (source / "nested").rmdir()
    (tmp_path / "elsewhere.jsonl").write_text('{"id": 1, "prompt": "x"}\n')
    (source / "zz.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    assert refused(workspace, request(source)) == (
        f"tau-init: plan on standard input: input {source}/zz.jsonl is a symbolic link; tau reads only the folder's "
        "own regular files")


def test_a_kept_column_the_input_lacks_is_refused(workspace):
    source = write(workspace / "input", "parquet", rows(10), files=1)
    doc = request(source)
    doc["output"] = {"keep_input": ["uid"]}
    assert refused(workspace, doc) == (
        f"tau-init: plan on standard input keeps input column 'uid' (output.keep_input), which input '{source}' does "
        "not have (it has id, prompt)")


def test_keep_input_without_an_input_is_refused(workspace):
    doc = {"records": 4, "shards": 2, "command": ["/bin/true"], "output": {"keep_input": ["id"]}}
    assert refused(workspace, doc) == ("tau-init: plan on standard input keeps input columns (output.keep_input) "
                                       "but names no input")


def test_a_kept_json_column_of_two_types_is_refused_naming_the_line(workspace):
    source = workspace / "input"
    source.mkdir()
    (source / "a.jsonl").write_text('{"id": 1}\n{"id": 2}\n{"id": "three"}\n')
    message = refused(workspace, request(source))
    assert message == (f"tau-init: plan on standard input: input {source / 'a.jsonl'} line 3: column 'id' "
                       "(output.keep_input) holds string where earlier rows hold int64")


def test_a_run_over_an_input_names_neither_records_nor_needs_them(workspace):
    source = write(workspace / "input", "parquet", rows(30), files=1, row_group=7)
    doc = request(source, shards=4)
    assert "records" not in doc
    proc = init(workspace / "run", doc)
    assert proc.returncode == 0, proc.stderr
    index = json.loads((workspace / "run" / "input.json").read_text())
    entry = index["files"][0]
    assert [p["rows"] for p in entry["pieces"]] == [7, 7, 7, 7, 2]
    size = (source / "part-000.parquet").stat().st_size
    shared = entry["shared"]
    assert shared["offset"] + shared["length"] == size  # the footer and what follows the row groups
    data = (source / "part-000.parquet").read_bytes()
    assert shared["sha256"] == hashlib.sha256(data[shared["offset"]:]).hexdigest()
    assert all(p["sha256"] == hashlib.sha256(data[p["offset"]:p["offset"] + p["length"]]).hexdigest()
               for p in entry["pieces"])


def _jsonl(workspace, lines: list[bytes]):
    source = workspace / "input"
    source.mkdir()
    (source / "a.jsonl").write_bytes(b"".join(lines))
    return source


@pytest.mark.parametrize("late, kind", [(b'{"id": 2.5}\n', "double"), (b'{"id": 7}\n', "int64")])
def test_a_kept_json_column_is_typed_by_every_row_not_by_the_first_ones(workspace, late, kind):
    # the first MiB holds ints (or nulls only): Arrow reads the rest at the type they show, and where a later row
    # says more (a float among ints, the first value after nulls), the file is read again line by line
    first = b'{"id": 1, "pad": "' + b"x" * 100 + b'"}\n' if kind == "double" else b'{"id": null, "p": 0}\n'
    source = _jsonl(workspace, [first] * 20_000 + [late])
    proc = init(workspace / "run", request(source))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((workspace / "run" / "input.json").read_text())["keep"] == [{"name": "id", "type": kind}]


@pytest.mark.parametrize("bad, why", [(b'{"id": 1} {"id": 2}\n', "is not JSON (unexpected content after document"),
                                      (b"\n", "is blank")])
def test_a_bad_json_line_past_the_first_mib_is_named_though_arrow_would_have_read_it(workspace, bad, why):
    row = b'{"id": 1, "pad": "' + b"x" * 100 + b'"}\n'
    source = _jsonl(workspace, [row] * 20_000 + [bad, row])
    message = refused(workspace, request(source))
    assert message.startswith(f"tau-init: plan on standard input: input {source / 'a.jsonl'} line 20001 {why}"), \
        message


def test_on_a_terminal_tau_init_shows_its_indexing_and_prints_only_its_json(workspace):
    from helpers import tau_on_terminal

    source = write(workspace / "input", "parquet", rows(2000), files=2)
    code, out, terminal = tau_on_terminal("tau-init", str(workspace / "run"), input=json.dumps(request(source)))
    assert code == 0, terminal
    assert json.loads(out)["records"] == 2000
    assert "indexing the input" in terminal and "2/2 files" in terminal, terminal
