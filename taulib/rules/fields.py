"""The run's output schema: what a candidate's columns must be, and how to say what differs. Pure
(tests/test_rules_fields.py).

A schema is the list of its fields in order, each {"name", "type"} with the type as Arrow prints it ("int64",
"string", "double", "timestamp[us]", ...). The run's schema is fixed by the plan (`output.schema`) or else by its
first complete candidate, and recorded once (`schema.json`); every later candidate must have exactly it, so that
the winners can be collected into one dataset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


def differences(expected: Sequence[Mapping[str, str]], actual: Sequence[Mapping[str, str]],
                theirs: str = "the run's") -> list[str]:
    """What `actual` does differently from `expected` (`theirs` names it in the phrases), one phrase each, in field
    order; [] when they are equal."""
    if actual == expected:
        return []
    want = {f["name"]: f["type"] for f in expected}
    got = {f["name"]: f["type"] for f in actual}
    out = []
    for field in actual:
        name = field["name"]
        if name not in want:
            out.append(f"field {name!r} ({field['type']}) is not in {theirs} schema")
        elif want[name] != field["type"]:
            out.append(f"field {name!r} is {field['type']} where {theirs} is {want[name]}")
    out.extend(f"field {f['name']!r} ({f['type']}) of {theirs} schema is missing" for f in expected
               if f["name"] not in got)
    if not out:
        out.append("the fields are in another order: " + ", ".join(f["name"] for f in actual) + f" where {theirs} "
                   "are " + ", ".join(f["name"] for f in expected))
    return out


def describe(problems: list[str], limit: int = 5) -> str:
    """The phrases as one sentence, the first `limit` of them."""
    shown = problems[:limit]
    more = f" and {len(problems) - limit} more" if len(problems) > limit else ""
    return "; ".join(shown) + more
