"""Shared makers of observations and evidence for the tests of the pure rules (tests/test_rules_*.py), and how many
examples their property tests try."""

from __future__ import annotations

import os

from taulib.rules.evidence import Evidence, Seen

# TAU_TEST_PROPERTIES (tests/conftest.py loads the Hypothesis profile of the same name): "full" in make check;
# "quick" under make mutation, where every mutant runs the tests again: a tenth of the examples, derandomized so that
# a score is the same from run to run; "explicit" for the coverage of the rules (tests/test_rules_coverage.py): only
# the examples written out, so that every branch is reached by a case a reader can see.
PROPERTIES = os.environ.get("TAU_TEST_PROPERTIES", "full")


def examples(n: int) -> int:
    """How many examples a property test tries: `n`, or a tenth of it (at least 20) when PROPERTIES is quick."""
    return max(20, n // 10) if PROPERTIES == "quick" else n


WINDOWS = {"accounting_lag_seconds": 300, "preemption_seconds": 600, "submission_visibility_seconds": 300}
# what a scheduler can report; accounting_lag and unknown are tau's own conclusions from absence
SCHEDULER_STATES = ("pending", "running", "completed", "failed", "cancelled", "timed_out", "node_failed",
                    "out_of_memory", "preempted", "requeued")
LIFECYCLE = ("submitted", "running", "succeeded", "failed")


def view(state: str, exit_code: int | None = None, reason: str | None = None) -> dict:
    return {"state": state, "raw": state.upper(), "exit_code": exit_code, "reason": reason}


def seen(at: float, queue: str | None = None, accounting: str | None = None, queue_ok: bool = True,
         accounting_ok: bool = True, **extra) -> Seen:
    return Seen(at, view(queue, **extra) if queue else None, view(accounting, **extra) if accounting else None,
                queue_ok, accounting_ok)


def ev(state: str, source: str = "queue", at: float = 100.0, terminal: bool = False, **fields) -> Evidence:
    return Evidence(state, source, terminal, at, at, **fields)


def same_but_time(a: Evidence | None, b: Evidence | None) -> bool:
    """Equal in everything but observed_at (when the evidence was last confirmed)."""
    if a is None or b is None:
        return a is b
    return a._replace(observed_at=0.0) == b._replace(observed_at=0.0)


def attempt(state: str, terminal: dict | None = None) -> dict:
    return {"state": state, "terminal": terminal}


# -- the table, rule by rule ----------------------------------------------------------------------------------
