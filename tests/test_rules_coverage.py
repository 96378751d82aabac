"""Every branch of the pure rules (taulib/rules) is reached by their own unit tests (tests/test_rules_*.py), with
only the examples written out (TAU_TEST_PROPERTIES=explicit: no generated property cases), so that each branch has a
case a reader can see. Measured with coverage.py, as a separate process (the rules may already be imported here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import ROOT

RULES = ROOT / "taulib" / "rules"


def measure(tmp: Path) -> dict:
    env = dict(os.environ, TAU_TEST_PROPERTIES="explicit", COVERAGE_FILE=str(tmp / ".coverage"))
    env.pop("PYTEST_XDIST_WORKER", None)
    tests = sorted(str(p) for p in (ROOT / "tests").glob("test_rules_*.py") if p.name != Path(__file__).name)
    run = subprocess.run([sys.executable, "-m", "coverage", "run", "--branch", f"--source={RULES}", "-m", "pytest",
                          "-q", "-p", "no:cacheprovider", *tests],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"the rules' tests failed under coverage:\n{run.stdout[-3000:]}{run.stderr[-2000:]}"
    report = tmp / "coverage.json"
    out = subprocess.run([sys.executable, "-m", "coverage", "json", "-o", str(report)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(report.read_text())


def test_every_line_and_branch_of_the_rules_is_reached_by_their_unit_tests(tmp_path):
    files = measure(tmp_path)["files"]
    measured = {Path(name).name for name in files}
    assert measured == {p.name for p in RULES.glob("*.py")}, "coverage did not measure every module of the rules"
    short = []
    for name, data in sorted(files.items()):
        missing_lines = data["missing_lines"]
        missing_branches = [f"{a}->{'exit' if b < 0 else b}" for a, b in data.get("missing_branches", [])]
        if missing_lines or missing_branches:
            short.append(f"{Path(name).name}: lines {missing_lines}, branches {missing_branches}")
    totals = measure_totals(files)
    assert not short, (f"branch coverage of taulib/rules is {totals:.2f}%, not 100%; not reached by "
                       "tests/test_rules_*.py: " + "; ".join(short))


def measure_totals(files: dict) -> float:
    covered = sum(f["summary"]["covered_lines"] + f["summary"]["covered_branches"] for f in files.values())
    total = sum(f["summary"]["num_statements"] + f["summary"]["num_branches"] for f in files.values())
    return 100.0 * covered / total if total else 0.0
