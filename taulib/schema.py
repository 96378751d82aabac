"""Validation of records and inputs against the JSON Schemas in `share/schemas`.

The schemas are ordinary JSON Schema (draft 2020-12) and the test suite checks them and this validator against the
reference `jsonschema` implementation. At run time tau uses this small validator instead: it supports exactly the
keywords our schemas use, refuses a schema that uses any other keyword (so nothing is silently unchecked), and
imports nothing heavy, which keeps fast commands fast.

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
        error = _validate(instance, root, root, "")
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
        return _validate(instance, root, root, "") is None
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


def _validate(value: object, schema: dict[str, Any], root: dict[str, Any], path: str) -> tuple[str, str] | None:
    if "$ref" in schema:
        ref = schema["$ref"]
        error = _validate(value, _resolve(root, ref), _root_of(ref, root), path)
        if error is not None:
            return error
    expected = schema.get("type")
    if expected is not None:
        types = expected if isinstance(expected, list) else [expected]
        if not any(_TYPES[t](value) for t in types):
            return path, f"expected {' or '.join(types)}, got {_describe(value)}"
    if "const" in schema and not _equal(value, schema["const"]):
        return path, f"expected {schema['const']!r}"
    if "enum" in schema and not any(_equal(value, e) for e in schema["enum"]):
        return path, f"{_short(value)} is not one of {schema['enum']}"
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            return path, f"string shorter than {schema['minLength']}"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return path, f"string longer than {schema['maxLength']}"
        if "pattern" in schema and not _regex(schema["pattern"]).search(value):
            return path, f"{_short(value)} does not match {schema['pattern']!r}"
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return path, f"{value} is less than {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return path, f"{value} is greater than {schema['maximum']}"
    elif isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            return path, f"fewer than {schema['minItems']} items"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return path, f"more than {schema['maxItems']} items"
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                error = _validate(item, items, root, f"{path}/{index}")
                if error is not None:
                    return error
        if schema.get("uniqueItems"):
            seen = [orjson.dumps(v, option=orjson.OPT_SORT_KEYS) for v in value]
            if len(set(seen)) != len(seen):
                return path, "items are not unique"
    elif isinstance(value, dict):
        # the keys first: a misspelt key, here or deeper, explains a missing required one better than the reverse
        error = _properties(value, schema, root, path)
        if error is not None:
            return error
        for key in schema.get("required", ()):
            if key not in value:
                return path, f"missing required property {key!r}"
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            return path, f"fewer than {schema['minProperties']} properties"
    if "anyOf" in schema:
        errors = [_validate(value, sub, root, path) for sub in schema["anyOf"]]
        if all(e is not None for e in errors):
            return _most_telling(_discriminated(value, schema["anyOf"], errors, root), path)
    if "oneOf" in schema:
        errors = [_validate(value, sub, root, path) for sub in schema["oneOf"]]
        passing = sum(e is None for e in errors)
        if passing == 0:
            return _most_telling(_discriminated(value, schema["oneOf"], errors, root), path)
        if passing > 1:
            return path, "matches more than one alternative"
    return None


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


def _properties(value: dict[str, Any], schema: dict[str, Any], root: dict[str, Any],
                path: str) -> tuple[str, str] | None:
    """The first error of an object's keys: a value that fails its property's schema, or an unknown key."""
    props = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        sub = props.get(key)
        matched = False
        if sub is not None:
            matched = True
            error = _validate(item, sub, root, f"{path}/{_escape(key)}")
            if error is not None:
                return error
        for pattern, psub in patterns.items():
            if _regex(pattern).search(key):
                matched = True
                error = _validate(item, psub, root, f"{path}/{_escape(key)}")
                if error is not None:
                    return error
        if not matched:
            if extra is False:
                return path, f"unexpected property {key!r}" + _did_you_mean(key, props)
            if isinstance(extra, dict):
                error = _validate(item, extra, root, f"{path}/{_escape(key)}")
                if error is not None:
                    return error
    return None


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
