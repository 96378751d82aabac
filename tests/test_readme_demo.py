"""README.md's worked example is what `make demo` prints: the demo script is run (the local executor, a private
folder, about 5 s) and its output compared, line for line, with the block README shows; so are the plan README
shows and the record it shows with jq. Only what differs from run to run is masked: the folders, the plan's digest
(the plan names the client by its absolute path) and the figures of what the attempts used (`USED`, `efficiency:`).
Every other line, key and column must be exactly as README shows it: a change in what the commands print fails here
until README shows it too.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from helpers import ROOT, env_for_tests

README = ROOT / "README.md"
SHOWN_ROOT = "/work/main"  # the checkout README's output was printed in


def block(after: str, fence: str) -> str:
    """The first fenced block of kind `fence` after the README line that starts with `after`."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"```{fence}\n", text.index(after)) + len(fence) + 4
    return text[start:text.index("```", start)]


def shape(text: str, work: str, root: str) -> list[str]:
    """The lines of a demo's output with what differs from run to run masked."""
    lines = []
    for line in text.replace(work, f"{SHOWN_ROOT}/demo").replace(root, SHOWN_ROOT).splitlines():
        line = re.sub(r'"plan_sha256":"[0-9a-f]{64}"', '"plan_sha256":"SHA256"', line)
        if line.startswith(("efficiency: ", "  CPU ", "  slowest: ")):
            line = re.sub(r" \(\d+ finished attempts not measured yet: [^)]*\)", "", line)
            line = re.sub(r"shard-\d{5} attempt-\d{4}", "SHARD ATTEMPT", line)
            line = re.sub(r"\d+(?:\.\d+)?(?:e-?\d+)?", "N", line)
        if line.startswith("shard-"):
            used = r"\d+(?:\.\d+)?s cpu \d+% \d+(?:\.\d+)? [KMGT]?i?B|not measured yet"
            line = re.sub(rf"  (?:{used})  ", "  USED  ", line)
        lines.append(re.sub(r" {2,}", "  ", line))
    return lines


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, str]:
    """The demo run once, as `make demo` runs it from the checkout, in a private folder: (folder, its output with
    standard error and standard output interleaved as on a terminal)."""
    work = tmp_path_factory.mktemp("readme-demo") / "demo"
    proc = subprocess.run([str(ROOT / "contrib/demo/run-demo.sh")], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300,
                          env=env_for_tests({"DEMO_DIR": str(work), "SCHEDULER": "local"}))
    assert proc.returncode == 0, proc.stdout
    return work, proc.stdout


def test_the_output_readme_shows_for_make_demo_is_what_the_demo_prints(demo):
    work, out = demo
    printed = shape(out[out.index("== tau-init"):], str(work), str(ROOT))
    shown = shape(block("(the script writes absolute paths", "text"), str(work), str(ROOT))
    assert printed == shown


def test_the_output_readme_shows_is_checked_with_its_figures_masked_and_nothing_else():
    shown = block("(the script writes absolute paths", "text")
    assert shown.startswith("== tau-init: 8 shards of 800 records\n")
    assert shown.rstrip("\n").endswith("demo: ok: 8 of 8 shards won; 800 of 800 records collected in "
                                       f"{SHOWN_ROOT}/demo/dataset")
    lines = shown.splitlines()
    masked = [line for line, kept in zip(lines, shape(shown, "/nowhere", "/nowhere"), strict=True)
              if re.sub(r" {2,}", "  ", line) != kept]
    # the plan's digest, the three efficiency lines and the USED cell of the eight shards' rows: nothing else
    assert [line[:14] for line in masked] == ['{"adopted":nul', "efficiency: 9 ", "  CPU 47.2% of", "  slowest: sha",
                                              *[f"shard-0000{i}  s" for i in range(8)]]


def test_the_plan_readme_shows_is_the_plan_the_demo_writes(demo):
    work, _ = demo
    written = json.loads((work / "plan.json").read_text())
    written["command"][:2] = [str(Path(arg).relative_to(ROOT)) for arg in written["command"][:2]]
    assert json.loads(block("`make demo` runs `contrib/demo/run-demo.sh`", "json")) == written


def test_the_failed_attempt_readme_shows_with_jq_is_the_demos(demo):
    work, _ = demo
    record = json.loads((work / "run/shards/shard-00003/attempts/attempt-0001/attempt.json").read_text())
    printed = json.dumps({"state": record["state"], "terminal": record["terminal"]}, separators=(",", ":"))
    command = block("Everything is in `demo/run`", "sh").strip()
    assert command == ("jq -c '{state, terminal}' "
                       "demo/run/shards/shard-00003/attempts/attempt-0001/attempt.json")
    assert block(command, "text").strip() == printed
