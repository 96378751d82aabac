"""The plan's defaults, and how a plan written before a field existed is read. Pure (tests/test_rules_plan.py).

What tau-init fills in where a request is silent, each named with the rule it feeds:
  WINDOWS             the evidence windows (`rules.evidence`), and the heartbeat, the stalls (no heartbeat, no
                      progress) of a running attempt and what a stalled attempt gets (`rules.stall`)
  ROWS_PER_PARTITION  rows in every output file but the last (`rules.partition`)
  retry               the retry budget: `rules.budget.DEFAULTS`
  scheduler.<name>    each executor's own section: `Executor.section` (the local executor's max_parallel)
A plan written by an earlier version of tau lacks the fields added since; `with_defaults` reads it with their
defaults (a documented mapping: tau-run(5) "The plan"), and never changes the record itself.
"""

from __future__ import annotations

from typing import Any

from taulib.rules import budget

WINDOWS: dict[str, int | str | None] = {
    "accounting_lag_seconds": 300, "preemption_seconds": 300, "submission_visibility_seconds": 300,
    "heartbeat_seconds": 60, "stall_seconds": 900, "progress_stall_seconds": 1800, "stall_action": "report"}
ROWS_PER_PARTITION = 1_000_000


def with_defaults(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan as tau reads it: fields added after a plan was written take their defaults. A plan that has every
    field is returned as it is."""
    if "retry" in plan and "inherit_env" in plan and "stall_action" in plan["windows"] and "schema" in plan["output"]:
        return plan
    return dict(plan, retry=dict(budget.DEFAULTS, **plan.get("retry", {})),
                inherit_env=list(plan.get("inherit_env", [])), windows=dict(WINDOWS, **plan["windows"]),
                output=dict({"schema": None}, **plan["output"]))
