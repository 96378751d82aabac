"""The Arrow type names a plan's `output.schema` may give: exactly how pyarrow prints a type (`str(pa_type)`), which
is what a candidate's columns are compared with (`rules.fields`), so that a misspelt type is refused at tau-init
instead of failing every attempt after all its work. Pure (tests/test_rules_typenames.py checks every form against
pyarrow itself, both ways).

The grammar (tau-run(5) "The plan", output.schema):
  primitive      null bool int8 .. int64 uint8 .. uint64 halffloat float double string large_string string_view
                 binary large_binary binary_view month_day_nano_interval
  temporal       date32[day] date64[ms] time32[s|ms] time64[us|ns] timestamp[UNIT] timestamp[UNIT, tz=ZONE]
                 duration[UNIT]          (UNIT: s ms us ns)
  parameterised  decimal32(P, S) decimal64(P, S) decimal128(P, S) decimal256(P, S) fixed_size_binary[N]
  nested         list<NAME: TYPE> large_list<..> list_view<..> large_list_view<..> fixed_size_list<NAME: TYPE>[N]
                 struct<NAME: TYPE, ...> map<KEY, TYPE> map<KEY, TYPE, keys_sorted>
                 dictionary<values=TYPE, indices=INT, ordered=0|1>
  a nested field's TYPE may be followed by " not null".
"""

from __future__ import annotations

import re

PRIMITIVES = ("null", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "halffloat",
              "float", "double", "string", "large_string", "string_view", "binary", "large_binary", "binary_view",
              "month_day_nano_interval")
INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
UNITS = ("s", "ms", "us", "ns")
TIME_UNITS = {"time32": ("s", "ms"), "time64": ("us", "ns")}
DECIMAL_PRECISION = {"decimal32": 9, "decimal64": 18, "decimal128": 38, "decimal256": 76}
LISTS = ("list", "large_list", "list_view", "large_list_view")

# names people write for a type, and Arrow's spelling of it (pyarrow.type_for_alias agrees wherever it knows one)
ALIASES = {
    "int": "int64", "integer": "int64", "long": "int64", "i8": "int64", "i4": "int32", "i2": "int16", "i1": "int8",
    "u8": "uint64", "u4": "uint32", "u2": "uint16", "u1": "uint8", "short": "int16", "byte": "int8",
    "str": "string", "utf8": "string", "text": "string", "varchar": "string", "large_str": "large_string",
    "large_utf8": "large_string", "bytes": "binary", "large_bytes": "large_binary", "blob": "binary",
    "float64": "double", "f8": "double", "float32": "float", "f4": "float", "float16": "halffloat", "f2": "halffloat",
    "half": "halffloat", "real": "float", "boolean": "bool",
    "date": "date32[day]", "date32": "date32[day]", "date64": "date64[ms]", "time32": "time32[ms]",
    "time64": "time64[us]", "time": "time64[us]", "timestamp": "timestamp[us]", "datetime": "timestamp[us]",
    "duration": "duration[us]", "decimal": "decimal128(38, 9)", "decimal128": "decimal128(38, 9)",
    "list": "list<item: int64>", "array": "list<item: int64>",
}

NEAR = 0.75  # how alike (difflib's ratio) a misspelt name must be to a type's for a suggestion
Tree = tuple[object, ...]  # what `parse` makes of a name
_NAME = re.compile(r"[^:,<>\s][^:,<>]*?(?=: )")
_INT = re.compile(r"-?[0-9]+")
_WORD = re.compile(r"[a-z0-9_]+")
_ZONE = re.compile(r"[A-Za-z0-9_+\-/:]+")


class _Bad(Exception):
    pass


def parse(text: str) -> Tree:
    """The type `text` names, as a tree: (primitive,), ("timestamp", unit, zone or None), ("decimal128", p, s),
    ("list", field), ("fixed_size_list", field, n), ("struct", [field, ...]), ("map", key, value, sorted),
    ("dictionary", values, indices, ordered), ...; a field is (name, type, nullable). ValueError when `text` is not
    a type name as Arrow prints one."""
    try:
        tree, end = _type(text, 0)
    except _Bad as exc:
        raise ValueError(str(exc)) from None
    if end != len(text):
        raise ValueError(f"unexpected {text[end:]!r}")
    return tree


def problem(text: str) -> str | None:
    """None when `text` is a type name as Arrow prints it, else a phrase saying what to write instead (`did you mean
    'int64'?`)."""
    try:
        parse(text)
        return None
    except ValueError:
        pass
    better = suggestion(text)
    if better is not None:
        return f"did you mean {better!r}?"
    return ("write a type as Arrow prints it, for example 'int64', 'double', 'string', 'timestamp[us]' or "
            "'list<item: int64>' (tau-run(5) \"The plan\")")


def suggestion(text: str) -> str | None:
    """Arrow's spelling of a type `text` misspells (an alias, another case, a near miss), or None."""
    key = text.strip().lower().replace(" ", "")
    if key in ALIASES:
        return ALIASES[key]
    for candidate in (text.strip().lower(), key):
        if candidate != text and _valid(candidate):
            return candidate
    import difflib  # only for a name that is wrong: tau-init's start-up stays lean

    # n=1 only saves work (the best match comes first): a mutant without it is the same function
    close = difflib.get_close_matches(key, [*PRIMITIVES, *ALIASES], n=1, cutoff=NEAR)  # pragma: no mutate
    if close:
        return ALIASES.get(close[0], close[0])
    return None


def _valid(text: str) -> bool:
    try:
        parse(text)
        return True
    except ValueError:
        return False


def _expect(text: str, pos: int, literal: str) -> int:
    if not text.startswith(literal, pos):
        raise _Bad(f"expected {literal!r} at {pos}")
    return pos + len(literal)


def _int(text: str, pos: int) -> tuple[int, int]:
    found = _INT.match(text, pos)
    if found is None:
        raise _Bad(f"expected a number at {pos}")
    return int(found.group()), found.end()


def _word(text: str, pos: int) -> tuple[str, int]:
    found = _WORD.match(text, pos)
    if found is None:
        raise _Bad(f"expected a type at {pos}")
    return found.group(), found.end()


def _type(text: str, pos: int) -> tuple[Tree, int]:
    word, pos = _word(text, pos)
    nxt = text[pos:pos + 1]
    if word in PRIMITIVES and nxt not in ("[", "(", "<"):
        return (word,), pos
    if word == "date32" and text.startswith("[day]", pos):
        return (word,), pos + 5
    if word == "date64" and text.startswith("[ms]", pos):
        return (word,), pos + 4
    if word in TIME_UNITS or word in ("timestamp", "duration"):
        pos = _expect(text, pos, "[")
        unit, pos = _word(text, pos)
        if unit not in TIME_UNITS.get(word, UNITS):
            raise _Bad(f"{word} has no unit {unit!r}")
        zone = None
        if word == "timestamp" and text.startswith(", tz=", pos):
            found = _ZONE.match(text, pos + 5)
            if found is None:
                raise _Bad("expected a time zone")
            zone, pos = found.group(), found.end()
        return ((word, unit, zone) if word == "timestamp" else (word, unit)), _expect(text, pos, "]")
    if word in DECIMAL_PRECISION:
        precision, pos = _int(text, _expect(text, pos, "("))
        scale, pos = _int(text, _expect(text, pos, ", "))
        if not 1 <= precision <= DECIMAL_PRECISION[word]:
            raise _Bad(f"{word} precision must be 1 to {DECIMAL_PRECISION[word]}")
        return (word, precision, scale), _expect(text, pos, ")")
    if word == "fixed_size_binary":
        width, pos = _int(text, _expect(text, pos, "["))
        if width < 0:
            raise _Bad("a width is not negative")
        return (word, width), _expect(text, pos, "]")
    if word in LISTS or word == "fixed_size_list":
        field, pos = _field(text, _expect(text, pos, "<"))
        pos = _expect(text, pos, ">")
        if word in LISTS:
            return (word, field), pos
        size, pos = _int(text, _expect(text, pos, "["))
        if size < 0:
            raise _Bad("a list size is not negative")
        return (word, field, size), _expect(text, pos, "]")
    if word == "struct":
        pos = _expect(text, pos, "<")
        fields: list[Tree] = []
        while not text.startswith(">", pos):
            if fields:
                pos = _expect(text, pos, ", ")
            field, pos = _field(text, pos)
            fields.append(field)
        return (word, fields), pos + 1
    if word == "map":
        key, pos = _type(text, _expect(text, pos, "<"))
        value, pos = _type(text, _expect(text, pos, ", "))
        ordered = text.startswith(", keys_sorted", pos)
        return (word, key, value, ordered), _expect(text, pos + (13 if ordered else 0), ">")
    if word == "dictionary":
        values, pos = _type(text, _expect(text, pos, "<values="))
        indices, pos = _word(text, _expect(text, pos, ", indices="))
        if indices not in INTEGERS:
            raise _Bad("dictionary indices are an integer type")
        pos = _expect(text, pos, ", ordered=")
        if text[pos:pos + 1] not in ("0", "1"):
            raise _Bad("ordered is 0 or 1")
        return (word, values, (indices,), text[pos] == "1"), _expect(text, pos + 1, ">")
    raise _Bad(f"{word!r} is not an Arrow type")


def _field(text: str, pos: int) -> tuple[Tree, int]:
    found = _NAME.match(text, pos)
    if found is None or found.group() != found.group().rstrip():
        raise _Bad(f"expected a field name at {pos}")
    kind, pos = _type(text, found.end() + 2)
    nullable = not text.startswith(" not null", pos)
    return (found.group(), kind, nullable), pos + (0 if nullable else 9)
