"""What a test needs beyond a checkout and a venv (the Slurm test cluster, Azurite, root, podman's containers),
judged from the code it can be seen to run at collection, and the pytest markers that say so.

The code a test runs: its function, every fixture of its closure (`item.fixturenames`), the functions and classes it
is parametrized with, and every function or class defined in the tests' own files that those name (also as an
attribute of a tests' module, `az.Dedicated`), followed to the end. A test needs a service when that code reaches
one of ENTRIES: the function that insists on the cluster, the ones that start an Azurite, the ones that mount a
filesystem or give a file away. A fixture asked for at run time (`request.getfixturevalue`) is not seen here: the
fixtures `cluster` and `nolink_workspace` check their test's marker themselves (`declared`).

Loaded as a plugin at collection (`pytest --collect-only -p needs`, tests/ on PYTHONPATH), it writes one JSON line
per test into the file TAU_NEEDS_OUT names: its nodeid, fixturenames, markers, xdist group and needs.
tests/test_markers.py runs it and compares needs with markers.
"""

from __future__ import annotations

import dis
import functools
import importlib
import importlib.util
import inspect
import json
import os
import sys
import types
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# (module, qualified name) of a function or class under tests/ -> the marker a test that reaches it must carry
ENTRIES = {
    ("slurm", "require_cluster"): "slurm",
    ("azurite", "session_fixture"): "azurite",
    ("azurite", "start"): "azurite",
    ("azurite", "Dedicated"): "azurite",
    ("fusefs", "mounted"): "root",
    ("lazyfs", "mounted"): "root",
    ("test_faults", "tmpfs"): "root",
    ("containers", "images"): "containers",
}
BUILTIN_ENTRIES = ((os.chown, "root"), (os.lchown, "root"))

# a fixture whose test must carry the marker even when it is asked for at run time
FIXTURE_MARKERS = {"cluster": "slurm", "nolink_workspace": "root"}


def declared(request, fixture: str) -> None:
    """Fail the test that asked for `fixture` (one of FIXTURE_MARKERS) unless it carries that fixture's marker."""
    marker = FIXTURE_MARKERS[fixture]
    if request.node.get_closest_marker(marker) is None:
        pytest.fail(f"{request.node.nodeid} uses the fixture {fixture!r} without the marker {marker!r}: add "
                    f"@pytest.mark.{marker} (or pytest.param(..., marks=pytest.mark.{marker})); see tests/needs.py")


def _ours(obj, roots: tuple[Path, ...]) -> bool:
    """Defined in a file under one of `roots` (the tests, never taulib or a library)."""
    try:
        source = inspect.getsourcefile(obj)
    except TypeError:
        return False
    return source is not None and any(Path(source).resolve().is_relative_to(root) for root in roots)


def _imported_module(name: str, roots: tuple[Path, ...]) -> types.ModuleType | None:
    """A module of the tests' own that a function imports inside itself (`import fusefs` in a fixture)."""
    if name not in sys.modules:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        if spec is None or spec.origin is None or not any(Path(spec.origin).is_relative_to(r) for r in roots):
            return None
    return importlib.import_module(name)


@functools.cache
def _names(code: types.CodeType) -> tuple[frozenset[str], frozenset[str]]:
    """The global or attribute names a code object and the code nested in it use, and the modules they import."""
    names, imports = set(code.co_names), {i.argval for i in dis.get_instructions(code) if i.opname == "IMPORT_NAME"}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            inner_names, inner_imports = _names(const)
            names |= inner_names
            imports |= inner_imports
    return frozenset(names), frozenset(imports)


def _unwrapped(obj):
    """The function under a fixture's definition or a decorator (contextmanager), else `obj`."""
    get = getattr(obj, "_get_wrapped_function", None)
    obj = get() if callable(get) else obj
    return inspect.unwrap(obj) if isinstance(obj, types.FunctionType) else obj


def _functions(obj) -> list[types.FunctionType]:
    if isinstance(obj, type):
        return [f for member in vars(obj).values() for f in _functions(getattr(member, "__func__", member))]
    return [obj] if isinstance(obj, types.FunctionType) else []


def needs(start, roots: tuple[Path, ...]) -> frozenset[str]:
    """The markers the code reachable from `start` (a function or class) needs."""
    found: set[str] = set()
    seen: set[int] = set()
    todo = [start]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        found.update(marker for builtin, marker in BUILTIN_ENTRIES if obj is builtin)
        marker = ENTRIES.get((getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)))
        obj = _unwrapped(obj)
        if not callable(obj) or not _ours(obj, roots):
            continue
        if marker:
            found.add(marker)
        for function in _functions(obj):
            names, imports = _names(function.__code__)
            local = {name: _imported_module(name, roots) for name in imports - function.__globals__.keys()}
            for name in names:
                target = function.__globals__.get(name) or local.get(name)
                if isinstance(target, types.ModuleType):
                    if target is os or _ours(target, roots):
                        todo.extend(getattr(target, n) for n in names if hasattr(target, n))
                elif target is not None:
                    todo.append(target)
    return frozenset(found)


def item_needs(item: pytest.Item, roots: tuple[Path, ...], known: dict) -> set[str]:
    """What a collected test needs; `known` keeps each start's answer (id -> (start, needs)) for the next test."""
    start = [getattr(item, "function", None)]
    for name in item.fixturenames:
        start.extend(d.func for d in item._fixtureinfo.name2fixturedefs.get(name, ()))
    start.extend(v for v in getattr(getattr(item, "callspec", None), "params", {}).values() if callable(v))
    found = set()
    for obj in filter(None, start):
        if id(obj) not in known:
            known[id(obj)] = (obj, needs(obj, roots))
        found |= known[id(obj)][1]
    return found


def pytest_collection_finish(session: pytest.Session) -> None:
    roots, known = (TESTS, *{Path(item.path).resolve().parent for item in session.items}), {}
    with open(os.environ["TAU_NEEDS_OUT"], "w", encoding="utf-8") as out:
        for item in session.items:
            markers = sorted({m.name for m in item.iter_markers()})
            group = item.get_closest_marker("xdist_group")
            out.write(json.dumps({"nodeid": item.nodeid, "fixturenames": sorted(item.fixturenames),
                                  "markers": markers, "group": group.args[0] if group else None,
                                  "needs": sorted(item_needs(item, roots, known))}) + "\n")
