"""Validation of records and inputs against the JSON Schemas in `share/schemas`.

The schemas are ordinary JSON Schema (draft 2020-12) and the test suite checks them and this validator against the
reference `jsonschema` implementation. At run time tau uses this small validator instead: it supports exactly the
keywords our schemas use, refuses a schema that uses any other keyword (so nothing is silently unchecked), and
imports nothing heavy, which keeps fast commands fast. Each schema node is compiled once, on first use, into a
function of the value (`_compiled`), so that validating the thousands of records a collection or a status reads
costs no keyword lookup per value (4,110 records of 1,024 winners: 3.0 s interpreted, measured).

The schemas are package data, `taulib/schemas`, found beside the package's own files (the folder of
`taulib.__file__`), so that one way finds them in the checkout (bin/tau-* put it on PYTHONPATH), an editable install
and an installed wheel alike. That is what importlib.resources' file reader does for a package installed on disk
(pip never installs one zipped), without the ~10 ms of imports (pathlib, tempfile, zipfile) it would add to every
command that validates a record (measured). In the repository `taulib/schemas` is a symbolic link to
`share/schemas`, where the sources are kept; a wheel or an sdist holds the files themselves (pyproject.toml's
package-data).

The executors' names where a schema names them (the enums of `executor` and `profile`) are the table's
(`taulib.executors.table`; a test keeps the files' lists equal to it), and a plan's `scheduler` takes the section
of an executor the files do not describe from its row (`Row.section`): adding an executor edits no schema file.

Reads: `taulib/schemas/<name>.schema.json`. Writes: nothing.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable
from functools import lru_cache

import orjson

import taulib
from taulib.errors import BadInput, Internal

_META = {"$schema", "$id", "title", "description", "$comment", "default", "examples", "$defs"}
_KEYWORDS = {
    "type", "properties", "required", "additionalProperties", "items", "enum", "const", "pattern",
    "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "$ref", "oneOf", "anyOf",
    "uniqueItems", "minProperties", "patternProperties",
}

_TYPES: dict[str, Callable[[object], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class SchemaViolation(BadInput):
    """An instance does not satisfy its schema; `details` carry the JSON pointer and the schema name."""


def folder() -> str:
    """The schemas' folder, `taulib/schemas` beside the package's own modules."""
    return os.path.join(os.path.dirname(os.path.abspath(taulib.__file__)), "schemas")


@lru_cache(maxsize=None)
def load(name: str) -> dict[str, Any]:
    try:
        with open(os.path.join(folder(), f"{name}.schema.json"), "rb") as fh:
            schema: dict[str, Any] = orjson.loads(fh.read())
    except FileNotFoundError:
        raise Internal(f"schema {name!r} is missing from {folder()!r}") from None
    _check_keywords(schema, name)
    _executors(schema)
    return schema


def _executors(node: object) -> None:
    """Name the table's executors wherever the schema names executors (module docstring)."""
    if isinstance(node, list):
        for item in node:
            _executors(item)
        return
    if not isinstance(node, dict):
        return
    properties = node.get("properties")
    if isinstance(properties, dict):
        from taulib.executors.table import EXECUTORS

        for key in ("executor", "profile"):
            if isinstance(properties.get(key), dict) and "enum" in properties[key]:
                properties[key]["enum"] = list(EXECUTORS)
        if "profile" in properties:  # a plan's scheduler: one section per executor
            for name, row in EXECUTORS.items():
                properties.setdefault(name, row.section)
    for value in node.values():
        _executors(value)


@lru_cache(maxsize=None)
def _regex(pattern: str) -> re.Pattern[str]:
    # ECMA-262 (JSON Schema's dialect) `$` matches only at the very end; Python's also before a final newline.
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


def _check_keywords(node: object, name: str) -> None:
    if isinstance(node, dict):
        unknown = set(node) - _KEYWORDS - _META
        if unknown:
            raise Internal(f"schema {name!r} uses unsupported keywords {sorted(unknown)}")
        for key in ("properties", "$defs", "patternProperties"):
            for sub in node.get(key, {}).values():
                _check_keywords(sub, name)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                _check_keywords(node[key], name)
        for key in ("oneOf", "anyOf"):
            for sub in node.get(key, []):
                _check_keywords(sub, name)


def validate(instance: object, name: str, what: str | None = None) -> None:
    """Raise SchemaViolation naming the first failing location, or return None."""
    root = load(name)
    try:
        error = _compiled(root, root)(instance)
    except RecursionError:  # JSON nested deeper than any tau document is: refused, never a crash
        error = ("/", "nested too deeply")
    if error is not None:
        pointer, message = error
        label = what or name
        where = pointer or "/"
        raise SchemaViolation(f"{label} does not match schema {name!r} at {where}: {message}",
                              schema=name, pointer=where)


def is_valid(instance: object, name: str) -> bool:
    root = load(name)
    try:
        return _compiled(root, root)(instance) is None
    except RecursionError:
        return False


_RESOLVED: dict[tuple[int, str], dict[str, Any]] = {}


def _resolve(root: dict[str, Any], ref: str) -> dict[str, Any]:
    key = (id(root), ref)
    node = _RESOLVED.get(key)
    if node is None:
        node = _RESOLVED[key] = _resolve_uncached(root, ref)
    return node


def _resolve_uncached(root: dict[str, Any], ref: str) -> dict[str, Any]:
    if not ref.startswith("#/"):
        if "#" in ref:
            other, frag = ref.split("#", 1)
        else:
            other, frag = ref, ""
        target = load(other.removesuffix(".schema.json"))
        return _resolve(target, "#" + frag) if frag else target
    node: object = root
    for part in ref[2:].split("/"):
        node = node[part]  # type: ignore[index]
    return node  # type: ignore[return-value]


def _root_of(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    if ref.startswith("#"):
        return root
    return load(ref.split("#", 1)[0].removesuffix(".schema.json"))


Error = tuple[str, str]  # (JSON pointer relative to the value checked, message)
Check = Callable[[object], "Error | None"]


def _validate(value: object, schema: dict[str, Any], root: dict[str, Any], path: str) -> Error | None:
    """The first error of `value` against `schema` (a node of `root`), its pointer prefixed with `path`."""
    error = _compiled(schema, root)(value)
    return None if error is None else (path + error[0], error[1])


# Every schema node is compiled once into a function of the value (which is what makes validating thousands of
# records cheap: no keyword is looked up per value), kept with the node it was made from so that its id stays its.
_COMPILED: dict[tuple[int, int], tuple[dict[str, Any], dict[str, Any], Check]] = {}


def _compiled(schema: dict[str, Any], root: dict[str, Any]) -> Check:
    key = (id(schema), id(root))
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit[2]
    made: list[Check] = []  # a node that refers to itself, through $ref, calls the function being made
    _COMPILED[key] = (schema, root, lambda value: made[0](value))
    check = _build(schema, root)
    made.append(check)
    _COMPILED[key] = (schema, root, check)
    return check


def _build(schema: dict[str, Any], root: dict[str, Any]) -> Check:
    """The checks of one node, in the order their errors are reported: $ref, type, const, enum, the keywords of
    the value's own type, then anyOf and oneOf."""
    checks: list[Check] = []
    if "$ref" in schema:
        ref = schema["$ref"]
        checks.append(_compiled(_resolve(root, ref), _root_of(ref, root)))
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
    strings, numbers, lists, objects = _strings(schema), _numbers(schema), _lists(schema, root), \
        _objects(schema, root)
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
    if "anyOf" in schema:
        any_of = schema["anyOf"]
        alternatives = [_compiled(sub, root) for sub in any_of]

        def check_any(value: object) -> Error | None:
            errors = [alternative(value) for alternative in alternatives]
            if all(e is not None for e in errors):
                return _most_telling(_discriminated(value, any_of, errors, root), "")
            return None
        checks.append(check_any)
    if "oneOf" in schema:
        one_of = schema["oneOf"]
        choices = [_compiled(sub, root) for sub in one_of]

        def check_one(value: object) -> Error | None:
            errors = [choice(value) for choice in choices]
            passing = sum(e is None for e in errors)
            if passing == 0:
                return _most_telling(_discriminated(value, one_of, errors, root), "")
            if passing > 1:
                return "", "matches more than one alternative"
            return None
        checks.append(check_one)
    if len(checks) == 1:
        return checks[0]

    def check_all(value: object) -> Error | None:
        for check in checks:
            error = check(value)
            if error is not None:
                return error
        return None
    return check_all


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


def _lists(schema: dict[str, Any], root: dict[str, Any]) -> Callable[[list[Any]], Error | None] | None:
    least, most, unique = schema.get("minItems"), schema.get("maxItems"), schema.get("uniqueItems")
    items = _compiled(schema["items"], root) if isinstance(schema.get("items"), dict) else None
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


def _objects(schema: dict[str, Any], root: dict[str, Any]) -> Callable[[dict[str, Any]], Error | None] | None:
    """An object's keys first (a misspelt key, here or deeper, explains a missing required one better than the
    reverse: the first value that fails its property's schema, or an unknown key), then its required keys."""
    known = schema.get("properties", {})
    props = {key: _compiled(sub, root) for key, sub in known.items()}
    patterns = [(_regex(pattern), _compiled(sub, root)) for pattern, sub in schema.get("patternProperties", {}).items()]
    extra = schema.get("additionalProperties", True)
    otherwise = _compiled(extra, root) if isinstance(extra, dict) else None
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
                   root: dict[str, Any]) -> list[tuple[str, str]]:
    """The errors of the alternatives an object means to be: those whose `const` properties it matches (the
    version of a record whose `schema_version` it has), so that its own mistake is named, not the other version's
    constant; every alternative's when it matches none of them, or all."""
    if isinstance(value, dict):
        kept = []
        for sub, error in zip(alternatives, errors, strict=True):
            node = _resolve(root, sub["$ref"]) if "$ref" in sub else sub
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
