"""rules.inputs: a dataset's format by suffix, the pieces a shard reads, their fingerprint, when two runs' shards
read the same input, the type of a kept JSON column, and a plan's records over an input."""

from __future__ import annotations

import pytest

from taulib.rules import inputs


def piece(offset, length, row_start, rows, sha="a"):
    return {"offset": offset, "length": length, "sha256": sha * 64, "row_start": row_start, "rows": rows}


def index(**changes):
    doc = {"format": "jsonl", "keep": [], "files": [
        {"name": "a.jsonl", "row_start": 0, "rows": 30, "shared": None,
         "pieces": [piece(0, 100, 0, 10), piece(100, 100, 10, 10), piece(200, 100, 20, 10)]},
        {"name": "b.jsonl", "row_start": 30, "rows": 0, "shared": None, "pieces": []},
        {"name": "c.jsonl", "row_start": 30, "rows": 15, "shared": {"offset": 0, "length": 4, "sha256": "h" * 64},
         "pieces": [piece(4, 50, 30, 0), piece(54, 100, 30, 15)]}]}
    doc.update(changes)
    return doc


@pytest.mark.parametrize("name, fmt", [("x.parquet", "parquet"), ("X.PARQUET", "parquet"), ("a.jsonl", "jsonl"),
                                       ("a.ndjson", "jsonl"), ("a.csv", "csv"), ("a.json", None), ("a.csv.gz", None),
                                       ("parquet", None)])
def test_a_file_s_format_is_its_suffix_s(name, fmt):
    assert inputs.format_of(name) == fmt


@pytest.mark.parametrize("name, skip", [(".hidden", True), ("_SUCCESS", True), ("_metadata", True),
                                        ("part-0.parquet", False), ("a_b.csv", False)])
def test_hidden_files_and_markers_are_passed_over(name, skip):
    assert inputs.skipped(name) is skip


def test_a_shard_needs_the_pieces_whose_rows_meet_its_range_and_never_an_empty_one():
    assert inputs.needed(index(), 0, 10) == [(0, [0])]
    assert inputs.needed(index(), 9, 11) == [(0, [0, 1])]
    assert inputs.needed(index(), 10, 20) == [(0, [1])]  # a piece that ends where the shard starts is not read
    assert inputs.needed(index(), 25, 35) == [(0, [2]), (2, [1])]  # b has no rows; c's first piece none
    assert inputs.needed(index(), 30, 45) == [(2, [1])]
    assert inputs.needed(index(), 45, 50) == []


def test_slices_take_exactly_the_shard_s_rows_from_its_pieces():
    assert inputs.slices(index(), 5, 25) == [(0, 5, [(0, 5, 5), (1, 0, 10), (2, 0, 5)])]
    assert inputs.slices(index(), 29, 31) == [(0, 29, [(2, 9, 1)]), (2, 0, [(1, 0, 1)])]
    for start in range(45):
        for end in range(start + 1, 46):
            taken = sum(t for _, _, pieces in inputs.slices(index(), start, end) for _, _, t in pieces)
            assert taken == end - start


def test_a_fingerprint_names_each_file_its_shared_range_and_its_pieces():
    assert inputs.fingerprint(index(), 29, 31) == [
        {"name": "a.jsonl", "shared": None, "pieces": [[200, 100, "a" * 64, 20, 10]]},
        {"name": "c.jsonl", "shared": "h" * 64, "pieces": [[54, 100, "a" * 64, 30, 15]]}]


def test_a_shard_reads_the_same_input_only_when_its_pieces_format_and_kept_columns_are_the_same():
    old = index()
    assert inputs.same_input(old, index(), 0, 45) is None
    assert inputs.same_input(None, None, 0, 45) is None
    assert inputs.same_input(old, None, 0, 10) == "one run reads an input dataset and the other does not"
    assert inputs.same_input(old, index(format="csv"), 0, 10) == "the input was jsonl and is now csv"
    kept = index(keep=[{"name": "id", "type": "int64"}])
    assert inputs.same_input(old, kept, 0, 10) == "the input columns the output keeps (output.keep_input) differ"
    changed = index()
    changed["files"][0]["pieces"][1]["sha256"] = "b" * 64
    assert inputs.same_input(old, changed, 0, 10) is None  # not a piece it reads
    assert inputs.same_input(old, changed, 0, 11) == ("its input pieces changed (a file's bytes or rows differ from "
                                                     "those its winner read)")
    moved = index()
    moved["files"][2]["shared"]["sha256"] = "z" * 64  # a CSV header rewritten
    assert inputs.same_input(old, moved, 40, 41) is not None and inputs.same_input(old, moved, 0, 30) is None


@pytest.mark.parametrize("seen, value, kind", [(None, None, None), (None, 1, "int64"), ("int64", 2.5, "double"),
                                               ("double", 3, "double"), (None, "x", "string"), ("bool", True, "bool"),
                                               ("string", None, "string")])
def test_a_kept_json_column_s_type_follows_its_values(seen, value, kind):
    assert inputs.json_type(seen, value) == kind


@pytest.mark.parametrize("seen, value, message", [
    (None, {"a": 1}, "holds a JSON object; keep_input keeps scalar columns only"),
    (None, [1], "holds a JSON array; keep_input keeps scalar columns only"),
    ("int64", "x", "holds string where earlier rows hold int64"),
    ("bool", 1, "holds int64 where earlier rows hold bool")])
def test_a_kept_json_column_of_mixed_or_nested_values_is_refused(seen, value, message):
    with pytest.raises(ValueError) as err:
        inputs.json_type(seen, value)
    assert str(err.value) == message


def test_a_plan_s_records_are_its_input_s_rows_and_a_given_count_must_be_them():
    assert inputs.records({"records": 7}, None) == 7
    assert inputs.records({"input": {"path": "x"}}, {"rows": 45}) == 45
    assert inputs.records({"input": {"path": "x"}, "records": 45}, {"rows": 45}) == 45
    with pytest.raises(ValueError) as err:
        inputs.records({"input": {"path": "x"}, "records": 44}, {"rows": 45})
    assert str(err.value) == ("asks for 44 records, but its input has 45 rows; leave records out (it is the input's "
                              "rows) or give that")
    with pytest.raises(ValueError) as err:
        inputs.records({"records": 3, "output": {"keep_input": ["id"]}}, None)
    assert str(err.value) == "keeps input columns (output.keep_input) but names no input"
    with pytest.raises(ValueError) as err:
        inputs.records({"input": {"path": "x"}}, None)
    assert str(err.value) == "names an input that was not indexed"
    with pytest.raises(ValueError) as err:
        inputs.records({"input": {"path": "x"}, "output": {"keep_input": ["id"], "schema": [
            {"name": "id", "type": "int64"}]}}, {"rows": 2})
    assert str(err.value) == ("keeps input column 'id' (output.keep_input) and declares it in output.schema too: the "
                              "schema declares the client's columns, and tau places the kept ones before them")
