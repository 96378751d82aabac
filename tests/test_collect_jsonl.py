"""taulib.collect.jsonl: JSON lines built column by column are byte for byte the per-row definition (one orjson
object per row), for every column type and every text, including quotes, backslashes, control characters, non-ASCII
and nulls; text that is not UTF-8 is refused with the column's name."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taulib.collect import jsonl
from taulib.errors import Conflict

TEXT = st.text(st.characters(codec="utf-8", categories=None), max_size=12)  # every code point but surrogates
TRICKY = st.sampled_from(['","', '",', ",", '\\', '\\"', '"', '\\\\","', "\x00", "\x1f", "\x7f", "\u2028", "é", "😀",
                          "", "null", "\n\r\t\b\f", '{"a":1}', "},{"])
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.1, -0.0, 1.0, 1e20, 5e-324]))

COLUMNS = {
    "int64": (st.integers(-2**63, 2**63 - 1), pa.int64()),
    "uint8": (st.integers(0, 255), pa.uint8()),
    "uint64": (st.integers(0, 2**64 - 1), pa.uint64()),
    "float64": (FLOATS, pa.float64()),
    "float32": (st.floats(width=32), pa.float32()),
    "bool": (st.booleans(), pa.bool_()),
    "string": (st.one_of(TEXT, TRICKY, st.lists(TRICKY, max_size=4).map("".join)), pa.string()),
    "large_string": (st.one_of(TEXT, TRICKY), pa.large_string()),
    "timestamp": (st.integers(0, 2**50), pa.timestamp("us")),
    "list": (st.lists(st.integers(-5, 5), max_size=3), pa.list_(pa.int64())),
    "struct": (st.fixed_dictionaries({"k": TEXT}), pa.struct([("k", pa.string())])),
    "binary": (st.binary(max_size=5), pa.binary()),
}


@st.composite
def batches(draw):
    n = draw(st.integers(1, 40))
    kinds = draw(st.lists(st.sampled_from(sorted(COLUMNS) + ["null", "dictionary"]), min_size=1, max_size=6))
    arrays, names = [], []
    for position, kind in enumerate(kinds):
        names.append(draw(st.one_of(st.just(f"c{position}"), TRICKY.map(lambda t, p=position: f"{t}{p}"))))
        if kind == "null":
            arrays.append(pa.nulls(n))
            continue
        values, kind_type = COLUMNS["string" if kind == "dictionary" else kind]
        column = draw(st.lists(st.one_of(st.none(), values) if draw(st.booleans()) else values,
                               min_size=n, max_size=n))
        array = pa.array(column, kind_type)
        arrays.append(array.dictionary_encode() if kind == "dictionary" else array)
    return pa.record_batch(arrays, names=names)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_lines_are_the_per_row_definition_byte_for_byte(batch):
    got = bytes(jsonl.lines(batch))
    assert got == jsonl.reference(batch)
    assert [orjson.loads(line) for line in got.splitlines()] == [
        orjson.loads(orjson.dumps(row, default=str)) for row in batch.to_pylist()]


def test_a_text_that_ends_in_a_quote_and_a_comma_is_one_value_not_two():
    # an earlier tau split one orjson dump of a column at '","', which such a text holds inside its own string
    batch = pa.record_batch([pa.array(['say "hi",', "x", '","', '",",', None, 'a\\",'])], names=["s"])
    assert bytes(jsonl.lines(batch)) == jsonl.reference(batch) == (
        b'{"s":"say \\"hi\\","}\n{"s":"x"}\n{"s":"\\",\\""}\n{"s":"\\",\\","}\n{"s":null}\n'
        b'{"s":"a\\\\\\","}\n')


@pytest.mark.parametrize("offset", [0, 3])
def test_a_slice_of_a_batch_gives_the_lines_of_its_own_rows(offset):
    batch = pa.record_batch({"t": ['a","b', "c\\", None, "d\n", "e", "f"], "n": [1, None, 3, 4, 5, 6],
                             "x": [0.5, None, 1.0, -0.0, 2.0, 3.0]}).slice(offset, 3)
    assert bytes(jsonl.lines(batch)) == jsonl.reference(batch)


def test_repeated_names_and_no_columns_are_the_definition_too():
    batch = pa.record_batch([pa.array([1, 2]), pa.array(["a", "b"]), pa.array([3, 4])], names=["k", "v", "k"])
    assert bytes(jsonl.lines(batch)) == jsonl.reference(batch) == b'{"k":3,"v":"a"}\n{"k":4,"v":"b"}\n'
    empty = pa.RecordBatch.from_pydict({}).slice(0, 0)
    assert bytes(jsonl.lines(empty)) == b""
    assert jsonl.reference(pa.record_batch([pa.nulls(2)], names=["n"])) == b'{"n":null}\n{"n":null}\n'


def test_text_that_is_not_utf8_is_refused_with_the_columns_name():
    bad = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(b"\x00\x00\x00\x00\x02\x00\x00\x00"),
                                                 pa.py_buffer(b"\xff\xfe")])
    with pytest.raises(Conflict) as caught:
        jsonl.lines(pa.record_batch([bad], names=["text"]))
    assert caught.value.message == ("column 'text' holds text that is not UTF-8, which a JSON line cannot carry; "
                                    "collect this run as parquet or csv")
