"""Mutation testing of the rules, the journal and the winner's publication: `make mutation`.

mutmut (pinned in the `mutation` extra) mutates every function of taulib/rules, taulib/rundir/journal.py and
taulib/lifecycle/winner.py (pyproject.toml [tool.mutmut]: comparisons flipped, and/or swapped, constants and
strings changed, arguments dropped, ...), finds which of the listed in-process tests reach each function, and runs
those against each mutant. A mutant is killed when a test fails. The property tests try a tenth of their examples,
derandomized (TAU_TEST_PROPERTIES=quick, tests/rules_fixtures.py), so that a score is the same from run to run.
A mutant that no test can tell from the original (an equivalent one) is marked in the code with `# pragma: no
mutate` and the reason beside it, never listed here.

1. Starts from an empty `mutants/` (BENCH_MUTATION_KEEP=1 keeps it: only what changed is run again), with what the
   copied tests need beside it: the package's schemas and the venv; builds the completed runs the winner's tests
   start from once (TAU_TEST_WINNER_RUNS), so that a mutant's run of them only copies them.
2. Runs `mutmut run` on BENCH_MUTATION_CHILDREN processes (default: the CPUs), its progress in mutants/run.log.
3. Prints the score of each module and of each area (killed / all mutants; a mutant no test reaches counts as a
   survivor), then every survivor with its change, and one JSON line. Exits 1 when the rules score less than
   RULES_GOAL percent.

About 6 minutes on 2 cores (3,238 mutants). Not part of make check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "mutants"
VENV_BIN = ROOT / ".venv" / "bin"
AREAS = {"rules": "taulib/rules/", "journal": "taulib/rundir/journal.py", "winner": "taulib/lifecycle/winner.py"}
RULES_GOAL = 97.0
# mutmut's exit code of a mutant's test run -> what it means (mutmut.stats.status_by_exit_code)
KILLED = {1, 3, 36, 24, -24, 152, 255}  # tests failed, or timed out (a mutant that loops is caught)
STATUS = {0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", None: "not checked"}


def prepare() -> None:
    if os.environ.get("BENCH_MUTATION_KEEP") != "1" and MUTANTS.exists():
        shutil.rmtree(MUTANTS)
    (MUTANTS / "taulib").mkdir(parents=True, exist_ok=True)
    links = {MUTANTS / "taulib" / "schemas": "../share/schemas",  # taulib/schemas is a link mutmut does not copy
             MUTANTS / ".venv": "../.venv"}  # tests/helpers.py runs the commands of ROOT/.venv/bin
    for link, target in links.items():
        if not link.is_symlink():
            link.symlink_to(target)


def winner_runs(parent: Path) -> Path:
    """The completed runs tests/test_lifecycle_winner.py starts from, built once by the unmutated code (a mutant's
    run of those tests copies them instead of running whole runs again)."""
    code = ("import sys; from pathlib import Path; sys.path[:0] = ['tests']; import test_lifecycle_winner as t; "
            "t.build(Path(sys.argv[1]))")
    made = subprocess.run([str(VENV_BIN / "python"), "-c", code, str(parent)], cwd=ROOT, capture_output=True,
                          text=True)
    if made.returncode != 0:
        sys.exit(f"mutation: building the winner tests' runs failed:\n{made.stdout[-2000:]}{made.stderr[-2000:]}")
    return parent


def run_mutmut(template: Path) -> float:
    children = os.environ.get("BENCH_MUTATION_CHILDREN", str(os.cpu_count() or 2))
    env = dict(os.environ, TAU_TEST_PROPERTIES="quick", TAU_TEST_WINNER_RUNS=str(template))
    env.pop("TAU_FAILPOINTS", None)
    started = time.monotonic()
    with open(MUTANTS / "run.log", "wb") as log:
        proc = subprocess.run([str(VENV_BIN / "mutmut"), "run", "--max-children", children], cwd=ROOT, env=env,
                              stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = (MUTANTS / "run.log").read_bytes()[-3000:].decode(errors="replace")
        sys.exit(f"mutation: mutmut run exited {proc.returncode}; the end of mutants/run.log:\n{tail}")
    return time.monotonic() - started


def results() -> dict[str, int | None]:
    """mutant name -> the exit code of its test run, from every module's .meta file."""
    found: dict[str, int | None] = {}
    for meta in sorted((MUTANTS / "taulib").rglob("*.py.meta")):
        found.update(json.loads(meta.read_text())["exit_code_by_key"])
    return found


def module_of(name: str) -> str:
    """taulib.rules.rollup.x_run_state__mutmut_3 -> taulib/rules/rollup.py"""
    return name.split(".x")[0].replace(".", "/") + ".py"  # a method's is ...journal.xǁJournalǁadvance__mutmut_7


def change(name: str) -> str:
    """The lines a mutant changes, as mutmut shows them."""
    shown = subprocess.run([str(VENV_BIN / "mutmut"), "show", name], cwd=ROOT, capture_output=True, text=True)
    return "\n".join(line for line in shown.stdout.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---"))


def main() -> int:
    if not (VENV_BIN / "mutmut").exists():
        sys.exit("mutation: mutmut is not installed; run make mutation (it installs the mutation extra)")
    prepare()
    with tempfile.TemporaryDirectory(prefix="tau-mutation-") as scratch:
        seconds = run_mutmut(winner_runs(Path(scratch)))
    codes = results()
    per_module: dict[str, Counter] = {}
    survivors = []
    for name, code in sorted(codes.items()):
        counts = per_module.setdefault(module_of(name), Counter())
        status = "killed" if code in KILLED else STATUS.get(code, "suspicious")
        counts[status] += 1
        if status != "killed":
            survivors.append((name, status))
    print(f"mutation: {len(codes)} mutants in {seconds / 60:.1f} min\n")
    print(f"{'MODULE':40} {'MUTANTS':>8} {'KILLED':>7} {'SCORE':>7}  OTHER")
    areas = {area: Counter() for area in AREAS}
    for module, counts in sorted(per_module.items()):
        total = sum(counts.values())
        other = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "killed")
        print(f"{module:40} {total:8} {counts['killed']:7} {100 * counts['killed'] / total:6.1f}%  {other}")
        for area, prefix in AREAS.items():
            if module.startswith(prefix):
                areas[area].update(counts)
    scores = {area: round(100 * c["killed"] / sum(c.values()), 2) if c else None for area, c in areas.items()}
    print()
    for area, counts in areas.items():
        print(f"{area}: {counts['killed']} of {sum(counts.values())} killed, {scores[area]}%")
    if survivors:
        print(f"\n{len(survivors)} not killed:")
        for name, status in survivors:
            print(f"\n## {name} ({status})\n{change(name)}")
    print(json.dumps({"mutants": len(codes), "minutes": round(seconds / 60, 1), "scores": scores,
                      "not_killed": [name for name, _ in survivors]}))
    return 0 if scores["rules"] is not None and scores["rules"] >= RULES_GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
