"""taulib.rules.output: a failed client's last lines, bounded and printable whatever it wrote."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from taulib.rules.output import LINES, WIDTH, last_words


def test_the_last_non_blank_lines_are_kept_in_order():
    tail = b"loading\n\nTraceback (most recent call last):\n  File \"x.py\", line 3\nValueError: bad row 17\n\n"
    assert last_words(tail) == ["Traceback (most recent call last):", 'File "x.py", line 3', "ValueError: bad row 17"]
    assert last_words(b"one line without an end") == ["one line without an end"]
    assert last_words(b"") == [] and last_words(b"\n \n\t\n") == []
    assert last_words(b"a\nb\nc", lines=2) == ["b", "c"] and last_words(b"a\nb", lines=0) == []
    assert last_words(b"a\nb", lines=1) == ["b"]


def test_control_characters_escapes_and_bad_bytes_never_reach_a_reason():
    assert last_words(b"\x1b[31mred\x1b[0m and \x07bell\r\n") == ["[31mred [0m and bell"]
    assert last_words(b"progress 10%\rprogress 100%\n") == ["progress 10% progress 100%"]
    assert last_words(b"caf\xc3\xa9 \xff\xfe") == ["caf\u00e9 \ufffd\ufffd"]


def test_a_long_line_is_cut_to_the_width():
    (line,) = last_words(b"x" * 500)
    assert len(line) == WIDTH and line.endswith("...")
    assert last_words(b"y" * WIDTH) == ["y" * WIDTH]


@given(st.binary(max_size=2000))
def test_whatever_a_client_wrote_the_words_are_few_short_and_printable(tail):
    words = last_words(tail)
    assert len(words) <= LINES
    assert all(0 < len(w) <= WIDTH and w.isprintable() and w == w.strip() for w in words)
