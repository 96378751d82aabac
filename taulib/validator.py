"""A JSON Schema node compiled into a function of the value (`compiled`): the checks of exactly the keywords
`taulib.schema` accepts, in the order their errors are reported, each keyword looked up once per node rather than
once per value. A check returns None, or the first error: (JSON pointer relative to the value, message). Pure;
reads a schema file only through the `load` it is given, to follow a `$ref` into it (`taulib.schema.load`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Callable

import orjson

Load = Callable[[str], dict[str, Any]]  # a schema file by name (`taulib.schema.load`)
Error = tuple[str, str]  # (JSON pointer relative to the value checked, message)
Check = Callable[[object], "Error | None"]

_TYPES: dict[str, Callable[[object], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


@lru_cache(maxsize=None)
def _regex(pattern: str) -> re.Pattern[str]:
    # ECMA-262 (JSON Schema's dialect) `$` matches only at the very end; Python's also before a final newline.
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


_RESOLVED: dict[tuple[int, str], dict[str, Any]] = {}


def _resolve(root: dict[str, Any], ref: str, load: Load) -> dict[str, Any]:
    key = (id(root), ref)
    node = _RESOLVED.get(key)
    if node is None:
        node = _RESOLVED[key] = _resolve_uncached(root, ref, load)
    return node


def _resolve_uncached(root: dict[str, Any], ref: str, load: Load) -> dict[str, Any]:
    if not ref.startswith("#/"):
        if "#" in ref:
            other, frag = ref.split("#", 1)
        else:
            other, frag = ref, ""
        target = load(other.removesuffix(".schema.json"))
        return _resolve(target, "#" + frag, load) if frag else target
    node: object = root
    for part in ref[2:].split("/"):
        node = node[part]  # type: ignore[index]
    return node  # type: ignore[return-value]


def _root_of(ref: str, root: dict[str, Any], load: Load) -> dict[str, Any]:
    if ref.startswith("#"):
        return root
    return load(ref.split("#", 1)[0].removesuffix(".schema.json"))


# Every schema node is compiled once into a function of the value (which is what makes validating thousands of
# records cheap: no keyword is looked up per value), kept with the node it was made from so that its id stays its.
_COMPILED: dict[tuple[int, int], tuple[dict[str, Any], dict[str, Any], Check]] = {}


def compiled(schema: dict[str, Any], root: dict[str, Any], load: Load) -> Check:
    """The check of `schema`, a node of the schema file `root`; `load(name)` gives another schema file, for a
    `$ref` into it."""
    key = (id(schema), id(root))
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit[2]
    made: list[Check] = []  # a node that refers to itself, through $ref, calls the function being made
    _COMPILED[key] = (schema, root, lambda value: made[0](value))
    check = _build(schema, root, load)
    made.append(check)
    _COMPILED[key] = (schema, root, check)
    return check


def _build(schema: dict[str, Any], root: dict[str, Any], load: Load) -> Check:
    """The checks of one node, in the order their errors are reported: $ref, type, const, enum, the keywords of
    the value's own type, then anyOf and oneOf."""
    checks: list[Check] = []
    if "$ref" in schema:
        ref = schema["$ref"]
        checks.append(compiled(_resolve(root, ref, load), _root_of(ref, root, load), load))
    expected = schema.get("type")
    if expected is not None:
        types = expected if isinstance(expected, list) else [expected]
        tests = [_TYPES[t] for t in types]
        wrong = f"expected {' or '.join(types)}, got "

        def check_type(value: object) -> Error | None:
            for test in tests:
                if test(value):
                    return None
            return "", wrong + _describe(value)
        checks.append(check_type)
    if "const" in schema:
        const, said = schema["const"], f"expected {schema['const']!r}"
        checks.append(lambda value: None if _equal(value, const) else ("", said))
    if "enum" in schema:
        enum = schema["enum"]
        checks.append(lambda value: None if any(_equal(value, e) for e in enum) else
                      ("", f"{_short(value)} is not one of {enum}"))
    strings, numbers, lists, objects = _strings(schema), _numbers(schema), _lists(schema, root, load), \
        _objects(schema, root, load)
    if strings or numbers or lists or objects:
        def check_kind(value: object) -> Error | None:
            if isinstance(value, str):
                return strings(value) if strings else None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return numbers(value) if numbers else None
            if isinstance(value, list):
                return lists(value) if lists else None
            if isinstance(value, dict):
                return objects(value) if objects else None
            return None
        checks.append(check_kind)
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            checks.append(_alternatives(schema[keyword], keyword == "oneOf", root, load))
    if len(checks) == 1:
        return checks[0]

    def check_all(value: object) -> Error | None:
        for check in checks:
            error = check(value)
            if error is not None:
                return error
        return None
    return check_all


def _alternatives(subs: list[dict[str, Any]], one: bool, root: dict[str, Any], load: Load) -> Check:
    """anyOf (`one` False: at least one alternative holds) or oneOf (exactly one does); when none does, the error of
    the alternative the value means to be (`_discriminated`, `_most_telling`)."""
    choices = [compiled(sub, root, load) for sub in subs]

    def check(value: object) -> Error | None:
        errors = [choice(value) for choice in choices]
        passing = sum(e is None for e in errors)
        if passing == 0:
            return _most_telling(_discriminated(value, subs, errors, root, load), "")
        if one and passing > 1:
            return "", "matches more than one alternative"
        return None
    return check


def _strings(schema: dict[str, Any]) -> Callable[[str], Error | None] | None:
    least, most, pattern = schema.get("minLength"), schema.get("maxLength"), schema.get("pattern")
    if least is None and most is None and pattern is None:
        return None
    regex = _regex(pattern) if pattern is not None else None

    def check(value: str) -> Error | None:
        if least is not None and len(value) < least:
            return "", f"string shorter than {least}"
        if most is not None and len(value) > most:
            return "", f"string longer than {most}"
        if regex is not None and not regex.search(value):
            return "", f"{_short(value)} does not match {pattern!r}"
        return None
    return check


def _numbers(schema: dict[str, Any]) -> Callable[[float], Error | None] | None:
    least, most = schema.get("minimum"), schema.get("maximum")
    if least is None and most is None:
        return None

    def check(value: float) -> Error | None:
        if least is not None and value < least:
            return "", f"{value} is less than {least}"
        if most is not None and value > most:
            return "", f"{value} is greater than {most}"
        return None
    return check


def _lists(schema: dict[str, Any], root: dict[str, Any], load: Load) -> Callable[[list[Any]], Error | None] | None:
    least, most, unique = schema.get("minItems"), schema.get("maxItems"), schema.get("uniqueItems")
    items = compiled(schema["items"], root, load) if isinstance(schema.get("items"), dict) else None
    if least is None and most is None and items is None and not unique:
        return None

    def check(value: list[Any]) -> Error | None:
        if least is not None and len(value) < least:
            return "", f"fewer than {least} items"
        if most is not None and len(value) > most:
            return "", f"more than {most} items"
        if items is not None:
            for index, item in enumerate(value):
                error = items(item)
                if error is not None:
                    return f"/{index}{error[0]}", error[1]
        if unique:
            seen = [orjson.dumps(v, option=orjson.OPT_SORT_KEYS) for v in value]
            if len(set(seen)) != len(seen):
                return "", "items are not unique"
        return None
    return check


def _objects(schema: dict[str, Any], root: dict[str, Any],
             load: Load) -> Callable[[dict[str, Any]], Error | None] | None:
    """An object's keys first (a misspelt key, here or deeper, explains a missing required one better than the
    reverse: the first value that fails its property's schema, or an unknown key), then its required keys."""
    known = schema.get("properties", {})
    props = {key: compiled(sub, root, load) for key, sub in known.items()}
    patterns = [(_regex(pattern), compiled(sub, root, load))
                for pattern, sub in schema.get("patternProperties", {}).items()]
    extra = schema.get("additionalProperties", True)
    otherwise = compiled(extra, root, load) if isinstance(extra, dict) else None
    required, least = tuple(schema.get("required", ())), schema.get("minProperties")
    if not props and not patterns and extra is True and not required and least is None:
        return None

    def check(value: dict[str, Any]) -> Error | None:
        for key, item in value.items():
            sub = props.get(key)
            matched = sub is not None
            if sub is not None:
                error = sub(item)
                if error is not None:
                    return f"/{_escape(key)}{error[0]}", error[1]
            for regex, psub in patterns:
                if regex.search(key):
                    matched = True
                    error = psub(item)
                    if error is not None:
                        return f"/{_escape(key)}{error[0]}", error[1]
            if not matched:
                if extra is False:
                    return "", f"unexpected property {key!r}" + _did_you_mean(key, known)
                if otherwise is not None:
                    error = otherwise(item)
                    if error is not None:
                        return f"/{_escape(key)}{error[0]}", error[1]
        for key in required:
            if key not in value:
                return "", f"missing required property {key!r}"
        if least is not None and len(value) < least:
            return "", f"fewer than {least} properties"
        return None
    return check


def _discriminated(value: object, alternatives: list[dict[str, Any]], errors: list[tuple[str, str] | None],
                   root: dict[str, Any], load: Load) -> list[tuple[str, str]]:
    """The errors of the alternatives an object means to be: those whose `const` properties it matches (the
    version of a record whose `schema_version` it has), so that its own mistake is named, not the other version's
    constant; every alternative's when it matches none of them, or all."""
    if isinstance(value, dict):
        kept = []
        for sub, error in zip(alternatives, errors, strict=True):
            node = _resolve(root, sub["$ref"], load) if "$ref" in sub else sub
            consts = [(k, p["const"]) for k, p in node.get("properties", {}).items() if "const" in p]
            if error is not None and all(k in value and _equal(value[k], c) for k, c in consts):
                kept.append(error)
        if kept:
            return kept
    return [error for error in errors if error is not None]  # every alternative failed: none is None


def _most_telling(errors: list[tuple[str, str]], path: str) -> tuple[str, str]:
    """Of the errors of alternatives that all failed, the deepest, and at one depth one that is not just the
    alternative's own type (so an unknown key inside the alternative of the right type is named)."""
    return max(errors, key=lambda e: (len(e[0]), not (e[0] == path and e[1].startswith("expected "))))


def _did_you_mean(key: str, known: dict[str, Any]) -> str:
    import difflib

    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.8)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _equal(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _describe(value: object) -> str:
    for name, check in _TYPES.items():
        if name != "number" and check(value):
            return name
    return "number"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
