"""Where the rows of a text input end, read a chunk at a time: a JSON line at every newline; a CSV row at every
newline outside a quoted field (RFC 4180: a field that holds a newline, a comma or a quote is quoted, and a quote
inside it doubled, so the quotes before a newline are even exactly when it ends a row). Pure: bytes in, counts and
positions out (tests/test_inputs_rows.py).

A `Rows` keeps one bit between chunks (inside a quoted field or not), so chunks may cut a row or a field anywhere.
Counting is done by the C loops of `bytes.count` and `bytes.split`, never a Python loop per byte.
"""

from __future__ import annotations

import operator
import re
from itertools import accumulate, repeat

_EVENTS = re.compile(rb'["\n]')
_OTHERS = bytes(b for b in range(256) if b not in b'"\n')  # every byte but a quote and a newline


def _ends(data: bytes, quoted: bool, inside: bool) -> tuple[int, bool]:
    """(how many rows end in `data`, whether it ends inside a quoted field), from `inside` at its start. Every byte
    but quotes and newlines is dropped (one C pass); what is left, split at its newlines, is runs of quotes, whose
    lengths summed give the quotes before each newline: a newline after an even number ends a row. One step per
    row, by C loops (map, accumulate), none per quote."""
    if not quoted or (not inside and b'"' not in data):
        return data.count(b"\n"), inside
    before = list(accumulate(map(len, data.translate(None, _OTHERS).split(b"\n")), initial=int(inside)))
    newlines = before[1:-1]  # the quotes before each newline (and the state at the start)
    return len(newlines) - sum(map(operator.and_, newlines, repeat(1))), bool(before[-1] & 1)


class Rows:
    """The row ends of one text file, fed its bytes in order."""

    __slots__ = ("quoted", "inside")

    def __init__(self, quoted: bool) -> None:
        self.quoted = quoted  # CSV: quotes matter
        self.inside = False  # inside a quoted field at the end of what was fed

    def count(self, chunk: bytes | memoryview, start: int = 0, stop: int | None = None) -> int:
        """How many rows end in chunk[start:stop] (fed: the state moves to its end)."""
        data = bytes(chunk[start:stop]) if isinstance(chunk, memoryview) or start or stop is not None else chunk
        ends, self.inside = _ends(data, self.quoted, self.inside)
        return ends

    def advance(self, chunk: bytes, start: int, wanted: int) -> tuple[int, int]:
        """Feed chunk[start:] up to the end of the `wanted`-th row ending in it: (the position just after that
        row's newline, or len(chunk) when fewer end in it; how many ended)."""
        if wanted <= 0:
            return start, 0
        ends, inside = _ends(chunk[start:] if start else chunk, self.quoted, self.inside)
        if ends < wanted:  # the usual case of a long cut: the whole read, counted by C loops
            self.inside = inside
            return len(chunk), ends
        if not self.quoted or (not self.inside and chunk.find(b'"', start) < 0):
            at = start
            for _ in range(wanted):
                at = chunk.index(b"\n", at) + 1
            return at, wanted
        ended = 0
        for match in _EVENTS.finditer(chunk, start):  # the read the wanted row ends in: event by event
            if match.group() == b'"':
                self.inside = not self.inside
            elif not self.inside:
                ended += 1
                if ended == wanted:
                    return match.end(), ended
        raise AssertionError("counted row ends that were not found")  # pragma: no cover - _ends says they are

    def end_from(self, chunk: bytes, start: int, at: int) -> int | None:
        """The position just after the first row end at or after position `at` of chunk, the state being at
        `start` (its quotes up to `at` counted), or None when none ends there. Nothing is fed."""
        inside = self.inside
        if self.quoted and chunk.count(b'"', start, at) % 2:
            inside = not inside
        if not self.quoted or (not inside and chunk.find(b'"', at) < 0):
            found = chunk.find(b"\n", at)
            return None if found < 0 else found + 1
        for match in _EVENTS.finditer(chunk, at):
            if match.group() == b'"':
                inside = not inside
            elif not inside:
                return match.end()
        return None
