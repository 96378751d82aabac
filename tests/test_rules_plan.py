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


def test_the_defaults_are_the_documented_values():
    # tau-run(5) "The plan" and tau-init(1) give them; a user's plan that is silent gets exactly these
    assert WINDOWS == {"accounting_lag_seconds": 300, "preemption_seconds": 300, "submission_visibility_seconds": 300,
                       "heartbeat_seconds": 60, "stall_seconds": 900, "progress_stall_seconds": 1800,
                       "stall_action": "report"}
    assert ROWS_PER_PARTITION == 1_000_000


def full_plan() -> dict:
    return {"records": 10, "shard_count": 2, "shard_size": None, "retry": dict(budget.DEFAULTS, max_attempts=5),
            "inherit_env": ["HF_TOKEN"], "windows": dict(WINDOWS, stall_seconds=120),
            "output": {"format": "csv", "schema": [{"name": "id", "type": "int64"}]}}


def test_a_plan_lacking_any_one_field_added_since_gets_that_default_and_keeps_the_rest():
    whole = full_plan()
    for lacking, default in (("retry", budget.DEFAULTS), ("inherit_env", [])):
        plan = {k: v for k, v in whole.items() if k != lacking}
        read = with_defaults(plan)
        assert read == dict(whole, **{lacking: default}), lacking
    no_action = dict(whole, windows={k: v for k, v in whole["windows"].items() if k != "stall_action"})
    assert with_defaults(no_action) == whole  # stall_action report, stall_seconds kept at 120
    no_schema = dict(whole, output={"format": "csv"})
    assert with_defaults(no_schema) == dict(whole, output={"format": "csv", "schema": None})


def test_a_plan_read_with_defaults_keeps_what_it_gives():
    plan = dict({k: v for k, v in full_plan().items() if k != "inherit_env"}, retry={"max_attempts": 5})
    read = with_defaults(plan)
    assert read["retry"] == {"max_attempts": 5, "max_failed_attempts": 10, "max_failed_fraction": 0.1}
    assert (read["records"], read["shard_count"], read["windows"]["stall_seconds"]) == (10, 2, 120)
    assert read["output"]["schema"] == [{"name": "id", "type": "int64"}]
    assert "inherit_env" not in plan  # the record read is not changed
