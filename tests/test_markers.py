"""Every test says what it needs beyond a checkout and a venv, so that a subset is chosen by markers alone
(`pytest -m "not slurm"`, make quick): a test whose code reaches the Slurm test cluster, Azurite or an operation only
root may do carries the marker `slurm`, `azurite` or `root` (tests/needs.py judges it from the code it can see at
collection), and a marker that pyproject.toml does not register fails the collection (--strict-markers). The checks
are shown to fail on a small suite of their own that breaks each rule once.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

TESTS = ROOT / "tests"
SERVICES = ("slurm", "azurite", "root", "containers")


def collect(tmp_path: Path, *args: str, run: bool = False) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """pytest with the project's settings and the `needs` plugin over `args`: the process, and one document per test
    (nodeid, fixturenames, markers, group, needs). `run` runs the tests instead of only collecting them."""
    out = tmp_path / "needs.jsonl"
    path = os.pathsep.join(filter(None, [str(TESTS), str(TESTS / "integration"), os.environ.get("PYTHONPATH")]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not this session's xdist worker
    env.update(PYTHONPATH=path, TAU_NEEDS_OUT=str(out))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "needs",
                           "-c", str(ROOT / "pyproject.toml"), *([] if run else ["--collect-only"]), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    items = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return proc, items


def unmarked(items: list[dict]) -> list[str]:
    """One line per test that needs a service or root without carrying its marker."""
    return [f"{item['nodeid']} needs {', '.join(sorted(set(item['needs']) - set(item['markers'])))}"
            for item in items if set(item["needs"]) - set(item["markers"])]


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> list[dict]:
    proc, items = collect(tmp_path_factory.mktemp("needs"), str(TESTS))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert items, "the needs plugin wrote nothing"
    return items


def test_every_test_that_needs_the_cluster_azurite_or_root_carries_its_marker(suite):
    assert unmarked(suite) == [], "add the marker (pytestmark for a module, @pytest.mark.X or pytest.param marks)"


def test_each_service_is_needed_somewhere_so_the_check_still_sees_it(suite):
    """A rename of a helper in tests/needs.py's ENTRIES would silently make every test look free of that service."""
    seen = {need for item in suite for need in item["needs"]}
    assert seen == set(SERVICES)


def test_every_module_with_a_slurm_test_runs_whole_on_the_one_slurm_worker_and_every_other_module_whole_alone(suite):
    slurm_modules = {i["nodeid"].split("::")[0] for i in suite if "slurm" in i["markers"]}
    assert {"tests/integration/test_demo.py", "tests/integration/test_slurm_lifecycle.py"} <= slurm_modules
    for item in suite:
        module = item["nodeid"].split("::")[0]
        assert item["group"] == ("slurm" if module in slurm_modules else module), item["nodeid"]


def test_the_fixtures_a_test_may_ask_for_at_run_time_check_its_marker_themselves():
    """request.getfixturevalue is invisible at collection (test_demo's Slurm case, test_failpoints' FUSE cases)."""
    from needs import FIXTURE_MARKERS

    checked = set()
    for conftest in (TESTS / "conftest.py", TESTS / "integration" / "conftest.py"):
        for node in ast.walk(ast.parse(conftest.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name in FIXTURE_MARKERS:
                checked.update(node.name for call in ast.walk(node)
                               if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "declared"
                               and [getattr(a, "value", None) for a in call.args[1:]] == [node.name])
    assert checked == set(FIXTURE_MARKERS)


# -- the checks fail when they should ------------------------------------------------------------------------------

BROKEN_CONFTEST = '''
import pytest

from needs import declared
from slurm import require_cluster


@pytest.fixture
def cluster(request):
    declared(request, "cluster")
    require_cluster()
'''

BROKEN_TESTS = '''
import os

import pytest

import azurite as az


def give_away(path):
    os.chown(path, 65534, 65534)


def test_unmarked_on_the_cluster(cluster):
    pass


@pytest.mark.slurm
def test_marked_on_the_cluster(cluster):
    pass


def test_unmarked_with_its_own_azurite(tmp_path):
    az.Dedicated(1, tmp_path)


@pytest.mark.parametrize("tamper", [give_away, pytest.param(give_away, marks=pytest.mark.root, id="marked")])
def test_tampered(tamper):
    pass


def test_nothing_needed():
    pass


@pytest.mark.parametrize("kind", ["local", "slurm"])
def test_asks_at_run_time(request, kind):
    if kind == "slurm":
        request.getfixturevalue("cluster")
'''


@pytest.fixture
def broken(tmp_path) -> Path:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(BROKEN_CONFTEST)
    (suite / "test_broken.py").write_text(BROKEN_TESTS)
    return suite


def test_a_test_that_reaches_a_service_without_its_marker_is_named_with_what_it_needs(broken, tmp_path):
    proc, items = collect(tmp_path, "--rootdir", str(broken), str(broken))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert unmarked(items) == ["test_broken.py::test_unmarked_on_the_cluster needs slurm",
                               "test_broken.py::test_unmarked_with_its_own_azurite needs azurite",
                               "test_broken.py::test_tampered[give_away] needs root"]


def test_a_fixture_asked_for_at_run_time_by_a_test_without_its_marker_fails_that_test(broken, tmp_path):
    proc, _ = collect(tmp_path, "--rootdir", str(broken), str(broken / "test_broken.py"), "-k", "run_time", run=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed, 1 passed" in proc.stdout
    assert ("test_broken.py::test_asks_at_run_time[slurm] uses the fixture 'cluster' without the marker 'slurm'"
            in proc.stdout)


def test_a_marker_pyproject_does_not_register_fails_the_collection(broken, tmp_path):
    (broken / "test_broken.py").write_text("import pytest\n\n\n@pytest.mark.slurmy\ndef test_typo():\n    pass\n")
    proc, _ = collect(tmp_path, "--rootdir", str(broken), str(broken))
    assert proc.returncode != 0
    assert "'slurmy' not found in `markers` configuration option" in proc.stdout + proc.stderr
