"""taulib.rules.stall: when a running attempt is stalled (no heartbeat, or its client's progress standing still),
and whether the plan stops it."""

from __future__ import annotations

import pytest

from taulib.rules import stall
from taulib.rules.plan import WINDOWS


@pytest.mark.parametrize("age, expected", [
    (0.0, None), (900.0, None),
    (900.4, "no heartbeat for 900s (the run's stall_seconds is 900); the attempt is still running as far as the "
            "scheduler knows"),
    (3600.0, "no heartbeat for 3600s (the run's stall_seconds is 900); the attempt is still running as far as the "
             "scheduler knows"),
])
def test_an_attempt_is_stalled_by_its_heartbeat_only_past_stall_seconds(age, expected):
    assert stall.heartbeat(age, 900) == expected


@pytest.mark.parametrize("done, records, still, limit, expected", [
    (None, 100, 5000.0, 60, None),  # the client never reported progress: judged by the heartbeat alone
    (50, 100, None, 60, None),
    (50, 100, 5000.0, None, None),  # the rule is off
    (50, 100, 60.0, 60, None),  # not longer than the limit
    (100, 100, 5000.0, 60, None),  # every record reported done: it is finishing, not stalled
    (120, 100, 5000.0, 60, None),
    (0, 100, 61.0, 60, "no progress for 61s: 0 of 100 records done (the run's progress_stall_seconds is 60)"),
    (50, 100, 5000.0, 60, "no progress for 5000s: 50 of 100 records done (the run's progress_stall_seconds is 60)"),
])
def test_an_attempt_is_stalled_by_its_progress_only_when_the_count_stood_still_too_long(
        done, records, still, limit, expected):
    assert stall.progress(done, records, still, limit) == expected


def test_only_stall_action_stop_stops_and_the_default_reports():
    assert stall.stops({"stall_action": "stop"}) is True
    assert stall.stops({"stall_action": "report"}) is False
    assert stall.stops({}) is False  # a plan written before the field existed
    assert WINDOWS["stall_action"] == "report" and WINDOWS["progress_stall_seconds"] == 1800
    assert set(stall.ACTIONS) == {"report", "stop"}


def test_the_reason_of_a_stopped_stall_names_the_stall_and_the_plan():
    assert stall.reason("no progress for 61s: 0 of 100 records done") == (
        "stalled: no progress for 61s: 0 of 100 records done; stopped, as the run's stall_action says")
