"""taulib.rules.drive: when a driven run is finished, and the notifications a person is owed, once each."""

from __future__ import annotations

import pytest

from taulib.rules import drive
from taulib.rules.rollup import SHARD_STATES


def status(state: str = "running", stopped: str | None = None, retryable: tuple[str, ...] = (),
           deferred: int = 0, reason: str | None = None, **counts: int) -> dict:
    shards = [{"id": f"shard-{i:05d}", "state": name} for i, name in enumerate(
        name for name, n in counts.items() for _ in range(n))]
    return {"state": state, "counts": {name: counts.get(name, 0) for name in SHARD_STATES},
            "retryable": list(retryable), "budget": {"stopped": stopped}, "reason": reason,
            "deferred": {"shards": deferred} if deferred else None, "shards": shards}


@pytest.mark.parametrize("doc, expected", [
    (status("succeeded", succeeded=3), "succeeded"),
    (status("running", succeeded=2, running=1), None),
    (status("pending", succeeded=2, pending=1), None),
    (status("running", succeeded=2, candidate=1), None),
    (status("accounting_lag", succeeded=2, accounting_lag=1), None),
    (status("unknown", succeeded=2, unknown=1, retryable=("shard-00002",)), None),
    (status("failed", succeeded=2, failed=1, retryable=("shard-00002",)), None),  # a retry would be made
    (status("pending", succeeded=2, pending=1, deferred=1), None),
    (status("failed", succeeded=2, failed=1, retryable=("shard-00002",), stopped="past the run's failure budget",
            reason="shard-00002 failed: x; past the run's failure budget"),
     "shard-00002 failed: x; past the run's failure budget"),
    (status("failed", succeeded=2, exhausted=1, reason="shard-00002 exhausted: x"), "shard-00002 exhausted: x"),
    (status("cancelled", succeeded=2, cancelled=1), "the run is cancelled"),
])
def test_a_run_is_finished_when_it_succeeded_or_nothing_is_live_and_no_retry_would_be_made(doc, expected):
    assert drive.finished(doc) == expected


NOTHING_TOLD = {"state": None, "exhausted": []}


def test_a_run_that_succeeds_is_told_done_once():
    doc = status("succeeded", succeeded=3)
    assert drive.events(NOTHING_TOLD, doc) == [{"event": "done", "shard_id": None}]
    told = drive.told_after(NOTHING_TOLD, doc)
    assert told == {"state": "succeeded", "exhausted": []}
    assert drive.events(told, doc) == []  # however many drivers look again


def test_an_exhausted_shard_is_told_once_and_the_run_that_stops_then_once():
    running = status("running", succeeded=1, exhausted=1, running=1)
    assert drive.events(NOTHING_TOLD, running) == [{"event": "exhausted", "shard_id": "shard-00001"}]
    told = drive.told_after(NOTHING_TOLD, running)
    assert told == {"state": None, "exhausted": ["shard-00001"]}
    assert drive.events(told, running) == []
    stopped = status("failed", succeeded=2, exhausted=1, reason="shard-00002 exhausted")
    assert drive.events(told, stopped) == [{"event": "exhausted", "shard_id": "shard-00002"},
                                           {"event": "stopped", "shard_id": None}]
    assert drive.events(drive.told_after(told, stopped), stopped) == []


def test_a_run_reopened_and_finished_again_is_told_again():
    failed = status("failed", succeeded=2, exhausted=1, reason="x")
    told = drive.told_after(NOTHING_TOLD, failed)
    live = status("running", succeeded=2, running=1)
    assert drive.events(told, live) == []
    told = drive.told_after(told, live)
    assert told["state"] is None  # not finished: the next finish is news
    assert drive.events(told, status("succeeded", succeeded=3)) == [{"event": "done", "shard_id": None}]


def test_a_run_with_shards_the_scheduler_deferred_is_not_finished_though_nothing_is_live():
    # the deferred shards wait for room under the scheduler's limits: the next cycle submits them
    assert drive.finished(status("failed", succeeded=2, failed=1, deferred=2, reason="x")) is None
    doc = status("failed", succeeded=2, failed=1, reason="x")
    doc["deferred"] = {"shards": 0}
    assert drive.finished(doc) == "x"
