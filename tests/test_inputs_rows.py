"""inputs.rows: the row ends of JSON lines and CSV, fed in chunks cut anywhere, agree with Python's csv module and
with the lines themselves (property tests over fields holding quotes, commas and newlines)."""

from __future__ import annotations

import csv
import io

from hypothesis import given, settings
from hypothesis import strategies as st

from taulib.inputs.rows import Rows

FIELD = st.text(alphabet=st.sampled_from(list('ab ,"\n\r\u00e9')), max_size=8)


def csv_bytes(rows):
    """Rows as Python's csv module writes them (RFC 4180: quoted when a field holds a quote, comma, CR or LF)."""
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows(rows)
    return buf.getvalue().encode()


def ends_of(data: bytes) -> list[int]:
    """The true row ends (the position after each newline outside quotes), one byte at a time."""
    ends, inside = [], False
    for at, byte in enumerate(data):
        if byte == 0x22:
            inside = not inside
        elif byte == 0x0A and not inside:
            ends.append(at + 1)
    return ends


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(FIELD, min_size=1, max_size=4), min_size=1, max_size=12), st.data())
def test_csv_rows_are_counted_and_found_wherever_the_chunks_are_cut(rows, data):
    raw = csv_bytes(rows)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=5)))
    chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    scanner = Rows(quoted=True)
    assert sum(scanner.count(chunk) for chunk in chunks) == len(rows)
    assert not scanner.inside
    ends = ends_of(raw)
    assert len(ends) == len(rows) == len(list(csv.reader(io.StringIO(raw.decode(), newline="")))) and \
        ends[-1] == len(raw)
    for at in range(len(raw)):  # the first row end at or after each position
        assert Rows(True).end_from(raw, 0, at) == next(e for e in ends if e - 1 >= at)
    for wanted in range(1, len(rows) + 1):  # advancing row by row lands on the true ends
        assert Rows(True).advance(raw, 0, wanted) == (ends[wanted - 1], wanted)


def test_advance_across_chunks_keeps_the_quote_state():
    raw = b'a,"x\ny"\nb,c\n'
    first, second = raw[:5], raw[5:]
    scanner = Rows(True)
    assert scanner.advance(first, 0, 1) == (5, 0) and scanner.inside
    assert scanner.advance(second, 0, 2) == (len(second), 2)


def test_json_lines_end_at_every_newline():
    raw = b'{"a": "x\\ny"}\n{"b": 1}\n{"c": "\\""}\n'
    scanner = Rows(False)
    assert scanner.count(raw[:7]) + scanner.count(raw[7:]) == 3
    assert Rows(False).advance(raw, 0, 2) == (raw.index(b"\n", 14) + 1, 2)
    assert Rows(False).end_from(raw, 0, 3) == raw.index(b"\n") + 1
    assert Rows(False).end_from(raw, 0, len(raw)) is None
