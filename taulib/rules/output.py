"""A failed attempt's last words: the last lines of its client's output, fit to stand in a shard's reason. Pure
(tests/test_rules_output.py).

A client's output is data, never trusted: it is decoded as UTF-8 (what is not, replaced), every character that is
not printable (a control character, an escape sequence's ESC, a carriage return) becomes a space, blank lines are
dropped, and what is kept is bounded: the last LINES lines, each cut to WIDTH characters, so no client can make a
reason long, multi-line or able to move a terminal's cursor.
"""

from __future__ import annotations

LINES = 3  # lines of a client's output kept
WIDTH = 160  # characters of each line kept
TAIL = 4096  # bytes read from the end of the output, enough for LINES lines of WIDTH


def last_words(tail: bytes, lines: int = LINES, width: int = WIDTH) -> list[str]:
    """The last `lines` non-blank lines of `tail` (the end of a client's output), each printable and at most `width`
    characters (a longer one ends with "...")."""
    text = tail.decode("utf-8", errors="replace")  # pragma: no mutate (UTF-8 is decode's default, in any spelling)
    kept = []
    for line in text.split("\n"):  # a carriage return or another separator is a space, not a new line
        shown = " ".join("".join(c if c.isprintable() else " " for c in line).split())
        if shown:
            kept.append(shown if len(shown) <= width else shown[:width - 3] + "...")
    return kept[-lines:] if lines > 0 else []
