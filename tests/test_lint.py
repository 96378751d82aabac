"""The code passes the project's lint settings (pyproject.toml [tool.ruff]): unused imports, shadowed names,
undefined names and the like fail the build, not a review."""

import subprocess
import sys

from helpers import ROOT


def test_ruff_finds_nothing_in_the_code_the_tests_or_the_tools():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "taulib", "tests", "bench", "man", "contrib"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
