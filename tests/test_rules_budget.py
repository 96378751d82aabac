"""taulib.rules.budget: when a shard, or a whole run, stops being retried."""

from __future__ import annotations

import pytest

from taulib.rules.budget import (DEFAULTS, RETRYABLE, exhausted, failed_attempts, latest_failed, run_stopped, spent,
                                 won)

RETRY = {"max_attempts": 3, "max_failed_attempts": 10, "max_failed_fraction": 0.1}


@pytest.mark.parametrize("retryable, attempts, limit, expected", [
    (True, 2, 3, False), (True, 3, 3, True), (True, 4, 3, True), (False, 3, 3, False), (False, 9, 3, False),
    (True, 1, 1, True), (True, 0, 1, False)])
def test_a_shard_is_exhausted_when_it_would_be_retried_with_every_attempt_used(retryable, attempts, limit,
                                                                                 expected):
    assert exhausted(retryable, attempts, limit) is expected


def test_every_attempt_before_the_newest_failed_and_the_newest_when_it_did():
    assert failed_attempts(0, False) == 0
    assert failed_attempts(1, False) == 0 and failed_attempts(1, True) == 1
    assert failed_attempts(3, False) == 2 and failed_attempts(3, True) == 3


def test_the_run_stops_only_past_both_limits_at_once():
    assert run_stopped(10, 50, 100, RETRY) is None  # not more than 10 failed attempts
    assert run_stopped(11, 10, 100, RETRY) is None  # not more than 10% of the shards
    assert run_stopped(500, 1, 10, RETRY) is None  # 1 of 10 shards is 10%, not more
    assert run_stopped(500, 2, 10, RETRY) is not None  # 2 of 10 is more
    reason = run_stopped(11, 11, 100, RETRY)
    assert reason == ("past the run's failure budget: 11 failed attempts (more than 10) and 11 of 100 shards failed "
                      "(more than 10%); tau-retry submits nothing more (tau-retry --shard S grants a named shard one "
                      "more attempt)")


def test_a_budget_of_zero_stops_at_the_first_failure():
    assert run_stopped(1, 1, 4, {**RETRY, "max_failed_attempts": 0, "max_failed_fraction": 0.0}) is not None
    assert run_stopped(0, 0, 4, {**RETRY, "max_failed_attempts": 0, "max_failed_fraction": 0.0}) is None


def test_a_shard_won_by_its_nth_attempt_failed_every_attempt_before_it():
    assert won(1) == 0 and won(3) == 2


@pytest.mark.parametrize("verdict, cancelled, expected", [
    ("failed", False, True), ("unknown", False, True), ("failed", True, False), ("unknown", True, False),
    ("running", False, False), ("succeeded", False, False), ("pending", False, False), (None, False, False)])
def test_the_newest_attempt_counts_as_failed_only_when_retryable_and_its_shard_not_cancelled(verdict, cancelled,
                                                                                            expected):
    assert latest_failed(verdict, cancelled) is expected
    assert (verdict in RETRYABLE and not cancelled) is expected


def test_what_a_run_spent_is_its_retry_settings_its_failures_and_whether_it_stopped():
    counts = {"failed": 7, "exhausted": 5, "succeeded": 88}
    assert spent(RETRY, 11, counts, 100) == {**RETRY, "failed_attempts": 11, "failed_shards": 12,
                                             "stopped": run_stopped(11, 12, 100, RETRY)}
    assert spent(RETRY, 11, counts, 100)["stopped"] is not None
    assert spent(DEFAULTS, 3, {"failed": 1, "exhausted": 0}, 4) == {**DEFAULTS, "failed_attempts": 3,
                                                                   "failed_shards": 1, "stopped": None}
