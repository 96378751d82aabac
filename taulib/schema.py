"""Validation of records and inputs against the JSON Schemas in `share/schemas`.

The schemas are ordinary JSON Schema (draft 2020-12) and the test suite checks them and this validator against the
reference `jsonschema` implementation. At run time tau uses this small validator instead: it supports exactly the
keywords our schemas use, refuses a schema that uses any other keyword (so nothing is silently unchecked), and
imports nothing heavy, which keeps fast commands fast. Each schema node is compiled once, on first use, into a
function of the value (`taulib.validator`), so that validating the thousands of records a collection or a status reads
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
from typing import Any
from functools import lru_cache

import orjson

import taulib
from taulib.errors import BadInput, Internal
from taulib.validator import compiled

_META = {"$schema", "$id", "title", "description", "$comment", "default", "examples", "$defs"}
_KEYWORDS = {
    "type", "properties", "required", "additionalProperties", "items", "enum", "const", "pattern",
    "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "$ref", "oneOf", "anyOf",
    "uniqueItems", "minProperties", "patternProperties",
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
        error = compiled(root, root, load)(instance)
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
        return compiled(root, root, load)(instance) is None
    except RecursionError:
        return False


def _validate(value: object, schema: dict[str, Any], root: dict[str, Any], path: str) -> tuple[str, str] | None:
    """The first error of `value` against `schema` (a node of `root`), its pointer prefixed with `path`."""
    error = compiled(schema, root, load)(value)
    return None if error is None else (path + error[0], error[1])
