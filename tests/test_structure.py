"""The shape of the library, checked: layers, module sizes, imports, and the one table of each kind.

What a newcomer relies on when opening taulib/: every module is small and says what it reads, writes and
promises; the rules are pure; nothing below a layer imports the layer above it (no import cycle anywhere); only
the safe-filesystem layer opens files with O_NOFOLLOW; only taulib.env reads the environment; and the command list
exists once (taulib.cli.registry), with pyproject.toml and bin/ matching it.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

from taulib import env
from taulib.cli import registry

ROOT = Path(__file__).resolve().parent.parent
TAULIB = ROOT / "taulib"
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(TAULIB.rglob("*.py"))}


def imported(path: Path) -> set[str]:
    """The modules a file imports anywhere in it (function-level imports included): `from pkg import sub` counts
    as pkg.sub when that is a module, else as pkg."""
    return _imports_in(ast.parse(path.read_text(encoding="utf-8")))


def _imports_in(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in MODULES else node.module)
    return found


def graph() -> dict[str, set[str]]:
    return {name: {m for m in imported(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


# -- size and words ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_of_taulib_is_over_400_lines(name):
    lines = MODULES[name].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{name} has {lines} lines; split it so a reader can hold it in mind (<= {MAX_LINES})"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_says_what_it_does_in_its_docstring(name):
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text(encoding="utf-8")))
    assert doc and len(doc.split()) >= 8, f"{name} has no docstring saying what it reads, writes and promises"


IO_LAYERS = ("taulib.fs.", "taulib.rundir.", "taulib.lifecycle.", "taulib.collect.")


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith(IO_LAYERS) and not n.endswith("__init__")
                                        and n.count(".") == 2))
def test_a_module_that_touches_the_disk_says_what_it_reads_and_writes(name):
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text(encoding="utf-8"))) or ""
    says = {word for word in ("Reads", "Writes", "Promises", "Pure") if word in doc}
    assert {"Reads", "Writes"} <= says or "Pure" in says, f"{name}: say what it reads and writes (or that it is pure)"


# -- imports -----------------------------------------------------------------------------------------------------

def test_there_is_no_import_cycle_anywhere_in_taulib():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle_when_there_is_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


# -- the layers, as CONTRIBUTING.md describes them once -------------------------------------------------------------

def runtime_imports(path: Path) -> set[str]:
    """The modules a file imports when it runs (at import or call time): `imported` without the imports under
    `if TYPE_CHECKING:`, which only name types."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = [ast.Pass()]
    return _imports_in(tree)


def layer_table(text: str) -> list[list[str]]:
    """The paths of each row of the layer table of CONTRIBUTING.md "How the code is laid out", top layer first."""
    section = text.split("## How the code is laid out", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.split("\n") if line.startswith("| `taulib/")]
    return [re.findall(r"`(taulib/[^`]*)`", row.split("|")[1]) for row in rows]


def layer_of(name: str, layers: list[list[str]]) -> int | None:
    """The row of a module: the one whose path names it most closely (a file, then the deepest package, then
    `taulib/*.py` for a top-level module); None when no row does."""
    path = str(MODULES[name].relative_to(ROOT))
    best: tuple[int, int] | None = None  # (how closely, row)
    for row, paths in enumerate(layers):
        for pattern in paths:
            if pattern == path:
                closeness = 1000
            elif pattern.endswith("/") and path.startswith(pattern):
                closeness = pattern.count("/")
            elif pattern == "taulib/*.py" and path.count("/") == 1:
                closeness = 1
            else:
                continue
            if best is None or closeness > best[0]:
                best = (closeness, row)
    return None if best is None else best[1]


def upward(edges: dict[str, set[str]], layer: dict[str, int]) -> list[str]:
    """Every import from a layer to one above it (a smaller row), as `a (row) -> b (row)`."""
    return sorted(f"{a} ({layer[a]}) -> {b} ({layer[b]})" for a, targets in edges.items() for b in targets
                  if layer[b] < layer[a])


LAYERS = layer_table((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"))


def test_every_module_of_taulib_is_in_a_layer_of_contributings_table():
    assert len(LAYERS) >= 8, f"CONTRIBUTING.md's layer table was not found: {LAYERS}"
    missing = sorted(name for name in MODULES if layer_of(name, LAYERS) is None)
    assert missing == [], f"in no row of CONTRIBUTING.md's layer table: {missing}"
    named = [pattern for row in LAYERS for pattern in row if pattern != "taulib/*.py"]
    gone = [pattern for pattern in named if not (ROOT / pattern).exists()]
    assert gone == [], f"CONTRIBUTING.md's layer table names what does not exist: {gone}"
    packages = {p.parent.relative_to(ROOT).as_posix() + "/" for p in TAULIB.glob("*/__init__.py")}
    packages |= {p.parent.relative_to(ROOT).as_posix() + "/" for p in (TAULIB / "executors").glob("*/__init__.py")}
    packages -= {"taulib/executors/"}  # its table and roles are named as files, in the base
    assert sorted(packages - set(named)) == [], "a package of taulib is not named in the layer table"


def test_no_import_goes_from_a_layer_to_one_above_it():
    layer = {name: layer_of(name, LAYERS) for name in MODULES}
    assert None not in layer.values()
    edges = {name: {m for m in runtime_imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}
    found = upward(edges, layer)
    assert found == [], "imports from a layer to one above it (CONTRIBUTING.md's table, top layer first): " + \
        "; ".join(found)


def test_the_layer_check_fails_on_a_deliberately_added_upward_import(tmp_path):
    layer = {name: layer_of(name, LAYERS) for name in MODULES}
    edges = {name: {m for m in runtime_imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}
    edges["taulib.rules.budget"].add("taulib.lifecycle.status")  # a rule that reads the run: refused
    edges["taulib.rundir.state"].add("taulib.executors.slurm.parse")  # the read model reaching past the table
    assert upward(edges, layer) == [
        f"taulib.rules.budget ({layer['taulib.rules.budget']}) -> taulib.lifecycle.status "
        f"({layer['taulib.lifecycle.status']})",
        f"taulib.rundir.state ({layer['taulib.rundir.state']}) -> taulib.executors.slurm.parse "
        f"({layer['taulib.executors.slurm.parse']})"]
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from taulib.rundir.run import Run\n" \
             "import taulib.errors\n"
    probe = tmp_path / "probe.py"
    probe.write_text(source, encoding="utf-8")
    assert runtime_imports(probe) == {"taulib.errors", "typing"}, "an import for types only is not a layer's"


RULES = sorted(n for n in MODULES if n.startswith("taulib.rules"))


@pytest.mark.parametrize("name", RULES)
def test_the_rules_import_nothing_but_the_standard_library_and_each_other(name):
    foreign = sorted(m for m in imported(MODULES[name])
                     if m.split(".")[0] not in sys.stdlib_module_names and not m.startswith("taulib.rules"))
    assert not foreign, f"{name} imports {foreign}: the rules are pure (standard library and taulib.rules only)"


@pytest.mark.parametrize("name", [n for n in RULES if n != "taulib.rules"])
def test_every_module_of_the_rules_has_its_own_unit_tests(name):
    # that they reach every branch is measured, not searched for: tests/test_rules_coverage.py
    short = name.rsplit(".", 1)[1]
    assert (ROOT / "tests" / f"test_rules_{short}.py").is_file(), f"{name} has no tests/test_rules_{short}.py"


def _sources(exclude: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(n, p.read_text(encoding="utf-8")) for n, p in MODULES.items() if not n.startswith(exclude)]


def test_only_the_safe_filesystem_layer_opens_with_o_nofollow_or_o_directory():
    found = [n for n, text in _sources(("taulib.fs",)) if re.search(r"O_NOFOLLOW|O_DIRECTORY", text)]
    assert not found, f"{found} open files themselves; go through taulib.fs.tree.Tree"


def test_only_taulib_env_reads_the_process_environment():
    found = [n for n, text in _sources(("taulib.env",)) if re.search(r"os\.environ|os\.getenv|getenv\(", text)]
    assert not found, f"{found} read the environment themselves; ask taulib.env.get"


VARIABLE = re.compile(r"^(?:(?:TAU|SLURM|AZURE|ARROW|MALLOC|JE_ARROW)_[A-Z0-9_]+|KUBECONFIG)\Z")


def test_every_environment_variable_tau_names_is_in_the_table():
    named = set()
    for _, text in _sources(()):
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and VARIABLE.match(node.value):
                named.add(node.value)
    from taulib import executors

    every = {**env.VARS, **executors.variables()}  # tau's own, and each executor's (declared by it)
    assert named - set(every) == set(), f"in neither taulib.env.VARS nor an executor's: {sorted(named - set(every))}"
    assert not set(env.VARS) & set(executors.variables()), "an executor's variable is in tau's own table too"
    assert {v.scope for v in every.values()} == {"user", "allocation", "client", "memory"}


def test_a_variable_that_does_not_parse_falls_back_or_is_refused_when_strict():
    assert env.get("TAU_LOCK_TIMEOUT", {"TAU_LOCK_TIMEOUT": "soon"}) == 30.0
    assert env.get("TAU_LOCK_TIMEOUT", {"TAU_LOCK_TIMEOUT": "-3"}) == 0.0
    assert env.get("TAU_LOCK_TIMEOUT", {"TAU_LOCK_TIMEOUT": "2.5"}) == 2.5
    from taulib.executors.slurm import variables

    assert env.read(variables.RESTART_COUNT, {"SLURM_RESTART_COUNT": "x"}) == 0
    from taulib.errors import UsageError

    with pytest.raises(UsageError) as err:
        env.get("TAU_BLOB_RETRIES", {"TAU_BLOB_RETRIES": "many"})
    assert err.value.code == 2 and err.value.message == "TAU_BLOB_RETRIES holds 'many', which does not parse"
    with pytest.raises(UsageError) as err:
        env.get("TAU_TRUSTED_BLOB_ENDPOINTS", {"TAU_TRUSTED_BLOB_ENDPOINTS": "ftp://x"})
    assert err.value.message == ("TAU_TRUSTED_BLOB_ENDPOINTS holds 'ftp://x', which is not an origin like "
                                 "http://127.0.0.1:10000")


# -- the command list exists once ------------------------------------------------------------------------------------

def test_pyproject_scripts_are_exactly_the_registry():
    with open(ROOT / "pyproject.toml", "rb") as fh:
        scripts = tomllib.load(fh)["project"]["scripts"]
    expected = {"tau": f"{registry.FRONT.module}:main"}
    expected.update({c.program: f"{c.module}:main" for c in registry.COMMANDS})
    assert scripts == expected


BIN_SCRIPT = """#!/bin/sh
# Runs {program} from this checkout (the project's .venv when present, else python3).
here=$(cd "$(dirname "$0")/.." && pwd)
py="$here/.venv/bin/python"; [ -x "$py" ] || py=python3
PYTHONPATH="$here${{PYTHONPATH:+:$PYTHONPATH}}" exec "$py" -m {module} "$@"
"""


def test_bin_holds_exactly_one_script_per_registered_command_and_each_runs_its_module():
    programs = {"tau": registry.FRONT.module, **{c.program: c.module for c in registry.COMMANDS}}
    assert sorted(p.name for p in (ROOT / "bin").iterdir()) == sorted(programs)
    for program, module in programs.items():
        path = ROOT / "bin" / program
        assert path.read_text(encoding="utf-8") == BIN_SCRIPT.format(program=program, module=module), program
        assert path.stat().st_mode & 0o111, f"bin/{program} is not executable"


def test_every_registered_module_exists_and_has_a_click_command_and_a_main():
    import importlib

    for command in registry.COMMANDS:
        module = importlib.import_module(command.module)
        assert callable(module.main) and module.cli.name == command.program, command
        assert command.kind in ("plumbing", "porcelain", "allocation")


def test_the_front_command_usage_lists_every_registered_command_with_its_summary():
    from taulib.cli import tau

    text = tau.usage()
    for command in registry.COMMANDS:
        assert re.search(rf"^  {re.escape(command.name)} +{re.escape(command.summary)}$", text, re.M), command.name
    assert re.search(r"^  completion +print the shell completion", text, re.M)


# -- the executors exist once (taulib.executors: the table, the roles, a package per executor) ----------------------

def executor_packages() -> tuple[str, ...]:
    """The package of each executor of the table (taulib.executors.local, ...), from its row."""
    from taulib.executors import EXECUTORS

    return tuple(row.module.rsplit(".", 1)[0] for row in EXECUTORS.values())


def executor_names_used(source: str) -> list[tuple[int, str]]:
    """(line, name) of every string constant that is an executor's name in a module's source: a comparison
    (`== "slurm"`), a plan section read by name (`["local"]`) or a default; outside the executors' wing, code asks
    taulib.executors instead. Docstrings and messages that merely mention an executor are not constants equal to a
    name, so they pass."""
    from taulib.executors import EXECUTORS

    return sorted((node.lineno, node.value) for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in EXECUTORS)


def test_no_module_outside_the_executors_names_an_executor():
    found = {name: used for name, path in MODULES.items() if not name.startswith("taulib.executors")
             and (used := executor_names_used(path.read_text(encoding="utf-8")))}
    assert found == {}, f"these modules name executors themselves; ask taulib.executors (the table): {found}"


def test_the_executor_name_finder_finds_comparisons_section_reads_and_defaults():
    source = ('if plan["executor"] == "slurm":\n    x = run.plan["scheduler"]["local"]\n'
              'profile = request.get("profile", "local")\n"""Under Slurm, the local executor ..."""\n')
    assert executor_names_used(source) == [(1, "slurm"), (2, "local"), (3, "local")]


def test_every_executor_lives_in_its_own_package_of_the_wing():
    from taulib.executors import EXECUTORS

    for name, row in EXECUTORS.items():
        assert row.module == f"taulib.executors.{name}.executor", f"{name}: its row names {row.module}"
        assert row.module in MODULES and f"taulib.executors.{name}" in MODULES, f"{name} has no package"


def test_only_the_executor_table_imports_an_executors_modules():
    owners = executor_packages()
    found = {name: sorted(m for m in imported(path) if m.startswith(owners) and not m.startswith(name))
             for name, path in MODULES.items() if not name.startswith(owners)}
    assert {name: mods for name, mods in found.items() if mods} == {}, \
        "these modules import an executor's modules; go through taulib.executors"
    for one in owners:  # nor does one executor import another's
        others = tuple(o for o in owners if o != one)
        leaks = {name: sorted(m for m in imported(path) if m.startswith(others))
                 for name, path in MODULES.items() if name.startswith(one)}
        assert {name: mods for name, mods in leaks.items() if mods} == {}, f"{one} imports another executor"


def test_every_executor_of_the_table_plays_every_role_and_exactly_the_optional_roles_its_row_names():
    import importlib
    import inspect

    from taulib import executors
    from taulib.executors import roles

    core = (roles.Plans, roles.Submits, roles.Observes, roles.Stops, roles.Allocation)
    abstract = {n for role in core for n, member in vars(role).items()
                if getattr(member, "__isabstractmethod__", False)}
    assert {"observe", "stop", "hand_off", "resolve", "identity", "limits", "section", "usage"} <= abstract
    neutral = {n for n in vars(roles.Executor) if not n.startswith("_") and n != "name"}
    assert neutral == {n for role in roles.OPTIONAL.values() for n, member in vars(role).items()
                       if getattr(member, "__isabstractmethod__", False)}, "a neutral answer without its role"
    for name, row in executors.EXECUTORS.items():
        chosen = importlib.import_module(row.module).EXECUTOR
        assert isinstance(chosen, executors.Executor) and chosen.name == name and executors.get(name) is chosen
        assert not inspect.isabstract(type(chosen)), f"{row.module} leaves {type(chosen).__abstractmethods__} out"
        assert row.roles <= set(roles.OPTIONAL), f"{name}: its row names roles that do not exist"
        for role, interface in roles.OPTIONAL.items():
            plays = isinstance(chosen, interface)
            assert plays == (role in row.roles), f"{name}: its row and its class disagree on the role {role!r}"
            if not plays:  # no pretending: the neutral answer is the interface's, not a copy of it
                copies = [m for m in vars(interface) if not m.startswith("_") and m in vars(type(chosen))]
                assert copies == [], f"{name} answers {copies} without playing {role!r}"
            assert executors.plays(name, role) == plays
        jobs = chosen.collection_jobs()
        assert (jobs is None) != executors.plays(name, "collects")
        assert jobs is None or (isinstance(jobs, executors.CollectionJobs) and not inspect.isabstract(type(jobs)))
    assert executors.DEFAULT in executors.EXECUTORS and executors.HERE in executors.EXECUTORS
    from taulib.errors import BadInput

    with pytest.raises(BadInput) as err:
        executors.get("pbs")
    assert err.value.message == "executor 'pbs' is not one of local, slurm"


def _enums_of(node: object, key: str) -> list[list]:
    """The `enum` lists under every property named `key` anywhere in a schema."""
    found = []
    if isinstance(node, dict):
        for name, sub in node.items():
            if name == key and isinstance(sub, dict) and "enum" in sub:
                found.append(sub["enum"])
            found.extend(_enums_of(sub, key))
    elif isinstance(node, list):
        for sub in node:
            found.extend(_enums_of(sub, key))
    return found


def test_the_schemas_name_exactly_the_executors_of_the_table():
    import json

    from taulib.executors import EXECUTORS

    schemas = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in (ROOT / "share" / "schemas").glob("*.json")}
    enums = [(name, enum) for name, doc in schemas.items() for key in ("executor", "profile")
             for enum in _enums_of(doc, key)]
    assert len(enums) >= 5, enums  # plan-request, plan, submission-plan, observations, the attempt's scheduler
    assert all(sorted(enum) == sorted(EXECUTORS) for _, enum in enums), enums
    for name in ("plan-request.schema.json", "plan.schema.json"):
        scheduler = schemas[name]["properties"]["scheduler"]["properties"]
        own = ["profile", "site"] if name == "plan-request.schema.json" else ["profile"]  # a request names a site
        assert sorted(scheduler) == sorted([*EXECUTORS, *own]), f"{name}: scheduler holds {sorted(scheduler)}"


# -- every package maps its modules --------------------------------------------------------------------------------
# A package's map is the last paragraph of its __init__.py docstring (the lines after its last blank line), and
# nothing else is in that paragraph. Each entry is one line: two spaces, the name (a module's file name without
# .py, `__main__` included; a sub-package's folder name followed by `/`), two or more spaces, its description. A
# description too long for one line goes on in the lines below, each indented by more than two spaces (aligned
# under the description, as the maps do). Any other line there is a stray line: prose belongs before the map.

MAP_ENTRY = re.compile(r"^  (?P<name>[A-Za-z_][A-Za-z0-9_]*/?) {2,}\S")
MAP_CONTINUATION = re.compile(r"^ {3,}\S")
PACKAGES = {module_name(p): p.parent for p in sorted(TAULIB.rglob("__init__.py"))}


def read_map(doc: str) -> tuple[list[str], list[str]]:
    """The names a package's docstring `doc` maps, in order, and the lines of its map that are neither an entry nor
    the continuation of one."""
    lines = doc.rstrip().split("\n")
    start = max((i + 1 for i, line in enumerate(lines) if not line.strip()), default=0)
    names: list[str] = []
    stray: list[str] = []
    for line in lines[start:]:
        entry = MAP_ENTRY.match(line)
        if entry:
            names.append(entry["name"])
        elif not (names and MAP_CONTINUATION.match(line)):
            stray.append(line)
    return names, stray


def package_contents(folder: Path) -> list[str]:
    """What a package's map must name: its modules, and its sub-packages with a `/`."""
    modules = [p.stem for p in folder.glob("*.py") if p.name != "__init__.py"]
    packages = [p.name + "/" for p in folder.iterdir() if (p / "__init__.py").is_file()]
    return sorted(modules + packages)


def test_a_package_map_is_read_from_the_last_paragraph_with_wrapped_descriptions():
    doc = ("Title.\n\n  prose   in an earlier paragraph is no entry\n\n  tree     Tree: a folder reached\n"
           "           through one descriptor\n  cli/  the commands\n  writeback  blocks handed to writeback\n")
    assert read_map(doc) == (["tree", "cli/", "writeback"], []), read_map(doc)
    assert read_map("Title.\n\n  a, b, c\n        what a, b and c are\nprose\n") == \
        ([], ["  a, b, c", "        what a, b and c are", "prose"]), "one name per entry line, then its description"
    assert read_map("Slurm: the `script` and `parse` modules, in prose.") == \
        ([], ["Slurm: the `script` and `parse` modules, in prose."]), "a docstring without a map maps nothing"


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_package_maps_each_of_its_modules_in_its_docstring_and_nothing_else(package):
    folder = PACKAGES[package]
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")), clean=False) or ""
    names, stray = read_map(doc)
    have = package_contents(folder)
    problems = []
    if missing := [n for n in have if n not in names]:
        problems.append(f"lacks {', '.join(missing)}")
    if unknown := [n for n in names if n not in have]:
        problems.append(f"names {', '.join(unknown)}, which do not exist")
    if twice := sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"names {', '.join(twice)} twice")
    if stray:
        problems.append(f"has lines that are neither an entry nor its continuation: {stray}")
    assert not problems, (f"{folder.relative_to(ROOT)}/__init__.py: its map (the docstring's last paragraph, "
                          "'  name  description' a line) " + "; ".join(problems))


# -- no reference to a document outside this repository --------------------------------------------------------------
# A reader has this repository and nothing else: a rule is cited by the man page that says it ("tau-winner(1)",
# "tau-run(5) \"The client's environment\""), a test or a goal says what it is for, never which request asked for
# it. Public upstream issues (`kueue#14811`) name where the world's bug is, and stay.

OUTSIDE = re.compile(r"\bSPEC\b\s*(?:§|section\b|[0-9])|\bissues?\s*(?:#\s*)?[0-9]+", re.IGNORECASE)
SCANNED = ("taulib", "man", "bench", "contrib", "tests", "README.md", "CONTRIBUTING.md")
SKIPPED = {"__pycache__", ".pytest_cache", ".mypy_cache", "node_modules"}


def _scanned_text():
    """(path relative to the repository, its text) of every text file under SCANNED; this section's own lines are
    blanked (they name what they refuse)."""
    own = Path(__file__).resolve()
    for top in SCANNED:
        start = ROOT / top
        paths = [start] if start.is_file() else sorted(p for p in start.rglob("*") if p.is_file()) if start.is_dir() \
            else []
        for path in paths:
            if SKIPPED & set(path.relative_to(ROOT).parts):
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            if path.resolve() == own:
                lines = text.split("\n")
                begin = lines.index(next(line for line in lines if line.startswith("# -- no reference to a document")))
                end = next((i for i in range(begin + 1, len(lines)) if lines[i].startswith("# -- ")), len(lines))
                text = "\n".join(lines[:begin] + [""] * (end - begin) + lines[end:])
            yield path.relative_to(ROOT), text


def test_a_citation_of_an_outside_document_is_recognised_and_an_upstream_issue_is_not():
    for cited in ("destination (SPEC 8)", "SPEC §5", "the spec section 3", "the 1 GiB case of issue 4",
                  "Issue 10 on the cluster", "goal (issues 4 and 13)", "issue #11"):
        assert OUTSIDE.search(cited), cited
    for fine in ("SPECIAL_EXIT", "_PV_SPEC_FIELDS", "kueue#14811", "its issue counts", "github.com/ray/issues/2314",
                 "a pod spec with 2 containers"):
        assert not OUTSIDE.search(fine), fine


def test_nothing_cites_a_specification_or_an_issue_that_is_not_in_this_repository():
    found = [f"{path}:{n}: {line.strip()}" for path, text in _scanned_text()
             for n, line in enumerate(text.split("\n"), 1) if OUTSIDE.search(line)]
    assert not found, "cite the man page that says the rule, or say what it is for:\n" + "\n".join(found)


def test_make_mutation_runs_every_unit_test_file_of_the_rules_against_their_mutants():
    with open(ROOT / "pyproject.toml", "rb") as fh:
        config = tomllib.load(fh)["tool"]["mutmut"]
    selected = set(config["pytest_add_cli_args_test_selection"])
    unit = {f"tests/{p.name}" for p in (ROOT / "tests").glob("test_rules_*.py") if p.name != "test_rules_coverage.py"}
    assert unit - selected == set(), f"[tool.mutmut] does not run {sorted(unit - selected)}"
    assert all((ROOT / name).is_file() for name in selected), "[tool.mutmut] lists a test file that does not exist"
    assert "taulib/rules/*" in config["only_mutate"]
