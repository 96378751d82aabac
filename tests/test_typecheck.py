"""The type checker finds nothing: mypy over taulib with the project's settings (pyproject.toml [tool.mypy]), as
`make typecheck` runs it. One test per package of taulib and per top-level module, so that each layer sees its own
errors. Every module of taulib has every flag of `mypy --strict`, as mypy resolves its settings for it; and
`taulib.env.get` gives each variable the type its parser returns."""

from __future__ import annotations

import ast
import subprocess
import sys
import typing

import pytest
from helpers import ROOT

from taulib import env

TAULIB = ROOT / "taulib"
# rules/, fs/, ... and env.py, errors.py, ...
PARTS = sorted([p.name + "/" for p in TAULIB.iterdir() if (p / "__init__.py").is_file()]
               + [p.name for p in TAULIB.glob("*.py")])


def part_of(path: str) -> str:
    """taulib/rules/plan.py -> rules/; taulib/env.py -> env.py."""
    parts = path.split("/")
    return parts[1] + "/" if len(parts) > 2 else parts[1]


@pytest.fixture(scope="module")
def mypy() -> dict[str, list[str]]:
    """mypy's lines (errors and their notes) by package or top-level module; mypy itself must have run (exit 0 or
    1)."""
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), f"mypy did not run (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
    found: dict[str, list[str]] = {"(mypy)": [line for line in proc.stderr.splitlines() if line.strip()]}
    for line in proc.stdout.splitlines():
        path = line.split(":", 1)[0]
        if path.startswith("taulib/") and path.endswith(".py"):
            found.setdefault(part_of(path), []).append(line)
        elif not line.startswith(("Found ", "Success: ")):  # its settings' notes, a file outside taulib
            found["(mypy)"].append(line)
    return found


@pytest.mark.parametrize("part", PARTS)
def test_mypy_finds_no_error_in(mypy, part):
    lines = mypy.get(part, [])
    errors = sum(": error:" in line for line in lines)
    assert not lines, f"mypy finds {errors} errors in taulib/{part}:\n" + "\n".join(lines)


def test_mypy_reads_its_settings_without_a_complaint_and_checks_nothing_outside_taulib(mypy):
    other = {key: lines for key, lines in mypy.items() if key not in PARTS and lines}
    assert not other, "\n".join(line for lines in other.values() for line in lines)


def strict_flags() -> dict[str, object]:
    """Every setting `--strict` changes, with the value it sets (from mypy itself, so a flag a new mypy adds to
    --strict is asked for here too)."""
    from mypy.main import process_options

    _, plain = process_options(["--config-file=", "x.py"])
    _, strict = process_options(["--config-file=", "--strict", "x.py"])
    names = [n for n in dir(plain) if not n.startswith("_") and not callable(getattr(plain, n))]
    return {n: getattr(strict, n) for n in names if getattr(plain, n) != getattr(strict, n)}


def test_every_module_of_taulib_has_every_flag_of_mypy_strict(monkeypatch):
    from mypy.main import process_options

    monkeypatch.chdir(ROOT)
    _, project = process_options(["--config-file", "pyproject.toml"])
    modules = [".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
               for p in sorted(TAULIB.rglob("*.py"))]
    assert "taulib.rules.evidence" in modules and "taulib.cli.common" in modules and "taulib" in modules
    flags = strict_flags()
    lax = {m: sorted(f for f, v in flags.items() if getattr(project.clone_for_module(m), f) != v) for m in modules}
    assert not {m: f for m, f in lax.items() if f}, lax


def test_each_environment_variable_has_the_type_its_parser_returns_for_the_type_checker():
    """taulib.env.get is overloaded by variable name, so that a caller gets the variable's type (float, str | None,
    ...) instead of object; each overload must name exactly the variables of its type in the table."""
    typed: dict[str, str] = {}
    for overload in typing.get_overloads(env.get):
        literal = ast.parse(overload.__annotations__["name"], mode="eval").body
        assert isinstance(literal, ast.Subscript) and ast.unparse(literal.value) == "Literal"
        names = literal.slice.elts if isinstance(literal.slice, ast.Tuple) else [literal.slice]
        for name in names:
            assert isinstance(name, ast.Constant) and name.value not in typed, ast.unparse(name)
            typed[name.value] = overload.__annotations__["return"]
    assert sorted(typed) == sorted(env.VARS), "env.get's overloads name other variables than the table"
    for var in env.VARS.values():
        parsed = var.parse.__annotations__["return"]
        assert typed[var.name] == parsed + (" | None" if var.default is None else ""), var.name
        assert var.default is None or type(var.default).__name__ == parsed.split("[")[0], var.name
