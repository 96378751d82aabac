"""The adversarial suite's report at the end of the pytest run, and its fixtures (the parts are in harness.py)."""

from __future__ import annotations

import json
import os

import pytest
from harness import EXERCISED, REPORT, SCALE, Tally


def pytest_terminal_summary(terminalreporter) -> None:
    if not REPORT and not EXERCISED:
        return
    from taulib import failpoints

    reached = {name for _, name in EXERCISED}
    line = (f"adversarial suite: {REPORT['cases']} generated cases tried, {REPORT['misbehaved']} misbehaved; "
            f"failpoints: {len(failpoints.NAMES)} total, {len(reached)} exercised in {len(EXERCISED)} "
            f"(command, failpoint) crashes; {REPORT['race_rounds']} race rounds; scale {SCALE}")
    terminalreporter.write_line(line)
    target = os.environ.get("TAU_ADVERSITY_REPORT")
    if target:
        with open(target, "w") as fh:
            json.dump({"cases": REPORT["cases"], "misbehaved": REPORT["misbehaved"],
                       "failpoints_total": len(failpoints.NAMES), "failpoints_exercised": sorted(reached),
                       "crashes": sorted(f"{c} {n}" for c, n in EXERCISED), "race_rounds": REPORT["race_rounds"],
                       "scale": SCALE}, fh, indent=1)


@pytest.fixture
def tally(request) -> Tally:
    return Tally(request.node.name)
