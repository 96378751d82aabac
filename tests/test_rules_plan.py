"""taulib.rules.plan: the plan's defaults, and a plan written before a field existed read with them."""

from __future__ import annotations

from taulib.rules import budget
from taulib.rules.plan import ROWS_PER_PARTITION, WINDOWS, with_defaults


def test_a_plan_written_before_a_field_existed_is_read_with_its_default():
    old = {"records": 10, "shard_count": 2, "shard_size": None, "windows": {"accounting_lag_seconds": 30,
           "preemption_seconds": 60, "submission_visibility_seconds": 90}, "output": {"format": "csv"}}
    new = with_defaults(old)
    assert new["retry"] == {"max_attempts": 3, "max_failed_attempts": 10, "max_failed_fraction": 0.1}
    assert new["inherit_env"] == [] and new["output"] == {"format": "csv", "schema": None}
    assert new["windows"] == {"accounting_lag_seconds": 30, "preemption_seconds": 60,
                              "submission_visibility_seconds": 90, "heartbeat_seconds": 60, "stall_seconds": 900,
                              "progress_stall_seconds": 1800, "stall_action": "report"}
    assert "retry" not in old  # the record read is not changed
    # a plan of the version before the stall fields (it has stall_seconds) gets them too
    between = dict(new, windows={k: v for k, v in new["windows"].items() if k not in ("progress_stall_seconds",
                                                                                   "stall_action")})
    assert with_defaults(between)["windows"] == new["windows"]
    assert with_defaults(new) is new  # a plan with every field is returned as it is


def test_the_defaults_are_what_tau_init_fills_in_where_a_request_is_silent():
    from taulib.lifecycle.init import resolve_plan

    plan = resolve_plan({"records": 10, "shards": 2, "command": ["client"]}, "run")
    assert plan["windows"] == WINDOWS
    assert plan["output"]["rows_per_partition"] == ROWS_PER_PARTITION
    assert plan["retry"] == budget.DEFAULTS == {"max_attempts": 3, "max_failed_attempts": 10,
                                                 "max_failed_fraction": 0.1}
    assert plan["scheduler"] == {"profile": "local", "local": {"max_parallel": 4}, "slurm": {}}
