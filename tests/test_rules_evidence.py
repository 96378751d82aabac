"""taulib.rules.evidence: the pure evidence table, rule by rule, and its promises over random observation
histories (with the attempt verdict the last property checks)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rules_fixtures import (LIFECYCLE, SCHEDULER_STATES, WINDOWS, attempt, ev, examples, same_but_time, seen,
                            view)

from taulib.rules import evidence as rules
from taulib.rules.attempt import effective_attempt, terminal_classification
from taulib.rules.evidence import Evidence, Seen, changed, next_evidence


def test_the_rules_are_tried_in_the_documented_order():
    assert [name for name, _, _ in rules.RULES] == [
        "stale", "sticky-terminal", "accounting-terminal", "queue-present", "queue-unavailable",
        "preempted-absent", "accounting-nonterminal", "accounting-unavailable", "preemption-continues",
        "lag-expired", "lag-continues", "unknown-stays", "absent"]
    for name, _, _ in rules.RULES:
        assert f"  {name} " in rules.__doc__, f"rule {name!r} is missing from the module's table"


def test_stale_an_observation_older_than_the_persisted_one_changes_nothing():
    prev = ev("running", at=200.0)
    rule, new = next_evidence(prev, seen(150.0, accounting="failed"), WINDOWS)
    assert rule == "stale"
    assert new == prev


def test_sticky_terminal_terminal_evidence_outlives_a_queue_that_says_running():
    prev = ev("failed", "accounting", terminal=True, exit_code=2, reason="exited with status 2")
    rule, new = next_evidence(prev, seen(200.0, queue="running", accounting="running"), WINDOWS)
    assert rule == "sticky-terminal"
    assert same_but_time(new, prev)


def test_accounting_terminal_beats_the_active_queue():
    rule, new = next_evidence(None, seen(100.0, queue="running", accounting="completed", exit_code=0), WINDOWS)
    assert rule == "accounting-terminal"
    assert (new.state, new.source, new.terminal, new.exit_code) == ("completed", "accounting", True, 0)


@pytest.mark.parametrize("state", sorted(rules.TERMINAL))
def test_accounting_terminal_covers_every_terminal_scheduler_state(state):
    rule, new = next_evidence(ev("running"), seen(200.0, accounting=state), WINDOWS)
    assert rule == "accounting-terminal"
    assert new.state == state and new.terminal


def test_queue_present_beats_non_terminal_accounting():
    rule, new = next_evidence(None, seen(100.0, queue="running", accounting="pending"), WINDOWS)
    assert rule == "queue-present"
    assert (new.state, new.source, new.terminal, new.deadline_at) == ("running", "queue", False, None)


def test_queue_present_preempted_is_not_terminal_and_sets_no_deadline():
    rule, new = next_evidence(ev("running"), seen(200.0, queue="preempted", accounting="preempted"), WINDOWS)
    assert rule == "queue-present"
    assert (new.state, new.terminal, new.deadline_at) == ("preempted", False, None)


def test_queue_present_keeps_the_time_of_the_last_change():
    prev = Evidence("running", "queue", False, 150.0, 120.0)
    _, new = next_evidence(prev, seen(180.0, queue="running"), WINDOWS)
    assert (new.observed_at, new.changed_at) == (180.0, 120.0)
    _, moved = next_evidence(new, seen(190.0, queue="pending"), WINDOWS)
    assert moved.changed_at == 190.0


def test_queue_unavailable_keeps_the_persisted_evidence():
    prev = ev("running")
    rule, new = next_evidence(prev, seen(200.0, queue_ok=False), WINDOWS)
    assert rule == "queue-unavailable"
    assert same_but_time(new, prev)
    rule, new = next_evidence(None, seen(200.0, queue_ok=False), WINDOWS)
    assert (rule, new) == ("queue-unavailable", None)


def test_preempted_absent_starts_one_fixed_window_then_fails():
    rule, first = next_evidence(ev("running"), seen(1000.0, accounting="preempted"), WINDOWS)
    assert rule == "preempted-absent"
    assert (first.state, first.terminal, first.deadline_window, first.deadline_at) == \
        ("preempted", False, "preemption", 1600.0)
    rule, second = next_evidence(first, seen(1300.0, accounting="requeued"), WINDOWS)
    assert rule == "preempted-absent"
    assert (second.deadline_window, second.deadline_at) == ("preemption", 1600.0)
    _, at_deadline = next_evidence(second, seen(1600.0, accounting="preempted"), WINDOWS)
    assert at_deadline.state == "preempted"
    rule, past = next_evidence(at_deadline, seen(1600.5, accounting="preempted"), WINDOWS)
    assert rule == "preempted-absent"
    assert (past.state, past.terminal) == ("failed", True)
    assert "600s preemption window" in past.reason
    assert past.classification == "preempted" and terminal_classification(past) == "preempted"


def test_preempted_absent_window_restarts_only_after_the_queue_saw_the_attempt_again():
    _, first = next_evidence(None, seen(1000.0, accounting="preempted"), WINDOWS)
    _, queued = next_evidence(first, seen(1100.0, queue="pending", accounting="requeued"), WINDOWS)
    assert queued.deadline_at is None
    _, again = next_evidence(queued, seen(1200.0, accounting="preempted"), WINDOWS)
    assert again.deadline_at == 1800.0


def test_an_unrequeued_preemption_whose_row_left_accounting_keeps_its_deadline_then_fails_as_preempted():
    # Data Designer's rule: PREEMPTED, gone from the queue, then gone from accounting too; the shard stays pending
    # until the preemption deadline it already had, never a new accounting-lag window, then fails as preempted
    _, first = next_evidence(ev("running"), seen(1000.0, accounting="preempted", exit_code=0), WINDOWS)
    assert (first.state, first.deadline_at) == ("preempted", 1600.0)
    rule, gone = next_evidence(first, seen(1200.0), WINDOWS)
    assert rule == "preemption-continues"
    assert gone == first
    assert effective_attempt(attempt("running"), gone).state == "pending"
    rule, at_deadline = next_evidence(gone, seen(1600.0), WINDOWS)
    assert (rule, at_deadline) == ("preemption-continues", first)
    rule, past = next_evidence(at_deadline, seen(1600.5), WINDOWS)
    assert rule == "preemption-continues"
    assert (past.state, past.terminal, past.classification, past.exit_code) == ("failed", True, "preempted", 0)
    assert past.reason == "preempted and absent from the queue for longer than the 600s preemption window"
    assert effective_attempt(attempt("running"), past) == ("failed", past.reason)


def test_a_vanished_preemption_is_held_only_while_both_sources_answer():
    _, first = next_evidence(None, seen(1000.0, accounting="preempted"), WINDOWS)
    rule, kept = next_evidence(first, seen(1700.0, accounting_ok=False), WINDOWS)
    assert (rule, kept) == ("accounting-unavailable", first)
    rule, back = next_evidence(first, seen(1100.0, queue="pending"), WINDOWS)
    assert rule == "queue-present" and back.deadline_at is None
    rule, lag = next_evidence(back, seen(1200.0), WINDOWS)
    assert (rule, lag.state) == ("absent", "accounting_lag")
    assert lag.deadline_at == 1200.0 + WINDOWS["accounting_lag_seconds"]


@pytest.mark.parametrize("observed, submitted, expected", [
    (1000.0, 1000.0, None), (940.0, 1000.0, None), (939.0, 1000.0, 61.0), (1000.0 - 3600.0, 1000.0, 3600.0),
    (5000.0, 1000.0, None)])
def test_an_observation_dated_before_its_attempts_submission_beyond_the_tolerance_predates_it(observed, submitted,
                                                                                              expected):
    assert rules.predates(observed, submitted) == expected


def test_accounting_nonterminal_is_used_when_the_queue_is_silent():
    rule, new = next_evidence(None, seen(100.0, accounting="running"), WINDOWS)
    assert rule == "accounting-nonterminal"
    assert (new.state, new.source, new.terminal) == ("running", "accounting", False)


def test_accounting_unavailable_keeps_the_persisted_evidence():
    prev = ev("running")
    rule, new = next_evidence(prev, seen(200.0, accounting_ok=False), WINDOWS)
    assert rule == "accounting-unavailable"
    assert same_but_time(new, prev)


def test_absent_from_both_is_accounting_lag_with_a_deadline_never_a_guess():
    rule, new = next_evidence(ev("running"), seen(1000.0), WINDOWS)
    assert rule == "absent"
    assert (new.state, new.source, new.terminal) == ("accounting_lag", "absent", False)
    assert (new.deadline_window, new.deadline_at) == ("accounting_lag", 1300.0)


def test_lag_continues_keeps_the_deadline_fixed_when_first_seen():
    _, lag = next_evidence(None, seen(1000.0), WINDOWS)
    rule, later = next_evidence(lag, seen(1300.0), WINDOWS)
    assert rule == "lag-continues"
    assert same_but_time(later, lag)
    assert later.deadline_at == 1300.0


def test_lag_expired_gives_unknown_after_the_deadline():
    _, lag = next_evidence(None, seen(1000.0), WINDOWS)
    rule, new = next_evidence(lag, seen(1300.001), WINDOWS)
    assert rule == "lag-expired"
    assert (new.state, new.terminal, new.deadline_at) == ("unknown", False, None)
    assert "past the accounting-lag deadline" in new.reason


def test_unknown_stays_unknown_while_the_attempt_is_absent():
    _, lag = next_evidence(None, seen(1000.0), WINDOWS)
    _, unknown = next_evidence(lag, seen(2000.0), WINDOWS)
    rule, new = next_evidence(unknown, seen(3000.0), WINDOWS)
    assert rule == "unknown-stays"
    assert same_but_time(new, unknown)


def test_unknown_recovers_when_the_scheduler_sees_the_attempt_again():
    unknown = ev("unknown", "absent")
    rule, new = next_evidence(unknown, seen(200.0, queue="running"), WINDOWS)
    assert (rule, new.state) == ("queue-present", "running")



def _view(state_strategy):
    return st.one_of(st.none(), state_strategy.map(lambda s: view(s, exit_code=0 if s == "completed" else None)))


DELAYS = st.sampled_from([0, 0.5, 1, 60, 150, 299, 300, 301, 450])  # seconds since the previous cycle


@st.composite
def histories(draw) -> tuple[dict, list[Seen]]:
    """Windows and a sequence of observation cycles with non-decreasing times.

    Each history draws the scheduler states it may report, so that many never reach a terminal state and the
    long absent, lagging and preempted stretches are explored too.
    """
    windows = {"accounting_lag_seconds": draw(st.sampled_from([0, 1, 60, 300])),
               "preemption_seconds": draw(st.sampled_from([0, 1, 60, 300])), "submission_visibility_seconds": 300}
    reported = draw(st.lists(st.sampled_from(SCHEDULER_STATES), min_size=1, max_size=4, unique=True))
    step = st.tuples(DELAYS, _view(st.sampled_from(reported)), _view(st.sampled_from(reported)),
                     st.integers(0, 9), st.integers(0, 9))  # a source is unavailable one cycle in ten
    now = 1_700_000_000.0
    out = []
    for dt, queue, accounting, queue_roll, accounting_roll in draw(st.lists(step, min_size=1, max_size=25)):
        now += dt
        queue_ok, accounting_ok = queue_roll > 0, accounting_roll > 0
        out.append(Seen(now, queue if queue_ok else None, accounting if accounting_ok else None, queue_ok,
                        accounting_ok))
    return windows, out


def _replay(windows: dict, sequence: list[Seen]):
    prev = None
    for s in sequence:
        rule, new = next_evidence(prev, s, windows)
        yield prev, s, rule, new
        prev = new if new is not None else prev


@settings(max_examples=examples(300), deadline=None)
@given(histories())
def test_terminal_evidence_never_changes_once_seen(history):
    windows, sequence = history
    first_terminal = None
    for _, _, _, new in _replay(windows, sequence):
        if first_terminal is not None:
            assert same_but_time(new, first_terminal)
        elif new is not None and new.terminal:
            first_terminal = new


@settings(max_examples=examples(300), deadline=None)
@given(histories())
def test_a_deadline_once_set_never_moves_while_it_stays_set(history):
    windows, sequence = history
    for prev, _, _, new in _replay(windows, sequence):
        if prev is not None and new is not None and prev.deadline_at is not None \
                and new.deadline_window == prev.deadline_window:
            assert new.deadline_at == prev.deadline_at, prev.deadline_window


@settings(max_examples=examples(300), deadline=None)
@given(histories())
def test_unknown_is_reached_only_after_an_accounting_lag_deadline_passed(history):
    windows, sequence = history
    for prev, s, rule, new in _replay(windows, sequence):
        if new is not None and new.state == "unknown" and (prev is None or prev.state != "unknown"):
            assert rule == "lag-expired"
            assert prev is not None and prev.state == "accounting_lag"
            assert prev.deadline_window == "accounting_lag" and s.observed_at > prev.deadline_at


@settings(max_examples=examples(300), deadline=None)
@given(histories())
def test_absence_never_becomes_a_guessed_success_or_failure(history):
    windows, sequence = history
    for prev, s, rule, new in _replay(windows, sequence):
        if new is None or not new.terminal or (prev is not None and prev.terminal):
            continue
        if rule == "accounting-terminal":
            assert s.accounting["state"] in rules.TERMINAL and new.state == s.accounting["state"]
        else:  # the only other way to terminal: a preemption window that ran out (its row in accounting or not)
            assert rule in ("preempted-absent", "preemption-continues") and new.state == "failed"
            assert new.classification == "preempted"
            assert prev is not None and prev.deadline_window == "preemption"
            assert s.observed_at > prev.deadline_at


@settings(max_examples=examples(300), deadline=None)
@given(histories(), st.sampled_from(LIFECYCLE))
def test_success_never_appears_without_a_finalised_attempt(history, life):
    windows, sequence = history
    record = attempt(life, {"classification": life, "reason": None, "exit_code": None}
                     if life in ("succeeded", "failed") else None)
    for _, _, _, new in _replay(windows, sequence):
        effective, _ = effective_attempt(record, new)
        if effective == "succeeded":
            assert life == "succeeded"
        if life != "succeeded":
            assert effective != "succeeded"
        if new is not None and new.state == "completed" and life != "succeeded":
            assert effective == "failed"


# -- what counts as news --------------------------------------------------------------------------------------

def test_evidence_changed_only_when_something_but_the_time_of_the_observation_differs():
    first = ev("running", at=100.0)
    assert changed(None, first)
    assert not changed(first, first._replace(observed_at=160.0))
    assert changed(first, first._replace(state="pending"))
    assert changed(first, first._replace(changed_at=160.0))
    terminal = ev("failed", "accounting", terminal=True, exit_code=3, classification="failed")
    assert changed(terminal._replace(classification=None), terminal)


# -- clocks: evidence from the future never hides later evidence -------------------------------------------------

def test_ahead_is_none_within_the_tolerance_and_the_excess_beyond_it():
    now = 1_000_000.0
    assert rules.ahead(now, now) is None
    assert rules.ahead(now - 3600, now) is None
    assert rules.ahead(now + rules.FUTURE_TOLERANCE, now) is None
    assert rules.ahead(now + rules.FUTURE_TOLERANCE + 1, now) == rules.FUTURE_TOLERANCE + 1
    assert rules.ahead(now + 3600, now) == 3600


def test_clamped_leaves_evidence_of_the_past_as_it_is():
    now = 1_000_000.0
    prev = ev("running", at=now - 10)
    assert rules.clamped(prev, now, WINDOWS) is prev
    assert rules.clamped(None, now, WINDOWS) is None
    lagging = ev("accounting_lag", "absent", at=now - 5, deadline_window="accounting_lag", deadline_at=now + 295)
    assert rules.clamped(lagging, now, WINDOWS) is lagging


def test_clamped_brings_times_from_the_future_back_to_now_and_a_deadline_within_its_window():
    now = 1_000_000.0
    ahead = ev("preempted", at=now + 3600, deadline_window="preemption", deadline_at=now + 3600 + 600)
    fixed = rules.clamped(ahead, now, WINDOWS)
    assert (fixed.observed_at, fixed.changed_at) == (now, now)
    assert fixed.deadline_at == now + WINDOWS["preemption_seconds"]
    assert fixed._replace(observed_at=0, changed_at=0, deadline_at=0) == \
        ahead._replace(observed_at=0, changed_at=0, deadline_at=0)


def test_a_fast_clocked_observer_no_longer_stalls_terminal_evidence():
    """The defect: evidence dated an hour ahead said running; a correctly dated FAILED was "stale" until wall time
    caught up. Clamped first, the FAILED applies at once."""
    now = 1_000_000.0
    ahead = ev("running", at=now + 3600)
    rule, stuck = next_evidence(ahead, seen(now, accounting="failed", exit_code=3), WINDOWS)
    assert rule == "stale" and stuck == ahead  # what the table alone does with a time from the future
    rule, new = next_evidence(rules.clamped(ahead, now, WINDOWS), seen(now, accounting="failed", exit_code=3),
                              WINDOWS)
    assert rule == "accounting-terminal" and new.state == "failed" and new.terminal, new


@settings(max_examples=examples(300), deadline=None)
@given(offset=st.floats(min_value=-1e6, max_value=1e9), window=st.sampled_from([None, "accounting_lag",
                                                                              "preemption"]))
def test_clamped_evidence_is_never_dated_beyond_now_and_its_tolerance(offset, window):
    now = 1_000_000.0
    prev = ev("running", at=now + offset, deadline_window=window,
              deadline_at=None if window is None else now + offset + 10)
    fixed = rules.clamped(prev, now, WINDOWS)
    assert fixed.observed_at <= now + rules.FUTURE_TOLERANCE and fixed.changed_at <= now + rules.FUTURE_TOLERANCE
    if window is not None:
        assert fixed.deadline_at <= now + WINDOWS[f"{window}_seconds"]


def test_clamped_brings_a_time_from_the_future_to_the_observation_in_hand_and_keeps_true_deadlines():
    now = 1_000_000.0
    ahead = ev("running", at=now + 3600)
    fixed = rules.clamped(ahead, now, WINDOWS, present=now - 5)
    assert (fixed.observed_at, fixed.changed_at) == (now - 5, now - 5)
    rule, new = next_evidence(fixed, seen(now - 5, accounting="failed", exit_code=3), WINDOWS)
    assert rule == "accounting-terminal"
    # a true deadline (at most now plus its window) is never shortened, whatever the observation's time
    lagging = ev("accounting_lag", "absent", at=now - 100, deadline_window="accounting_lag", deadline_at=now + 200)
    assert rules.clamped(lagging, now, WINDOWS, present=now - 600) is lagging


def test_the_tolerance_for_a_clock_ahead_is_sixty_seconds():
    now = 1_000_000.0
    assert (rules.ahead(now + 60, now), rules.ahead(now + 61, now)) == (None, 61)
    assert rules.ahead(now + 60.5, now) == 60.5


@pytest.mark.parametrize("observed, changed_at, deadline, expected", [
    # (seconds ahead of now of observed_at, changed_at, and of a preemption deadline) -> what clamping gives
    (-10, -10, 290, (-10, -10, 290)),  # all true: kept as it is
    (3600, -10, 290, (0, -10, 290)),  # observed_at alone from the future
    (-10, 3600, 290, (-10, 0, 290)),  # changed_at alone from the future
    (-10, -10, 3600, (-10, -10, 300)),  # the deadline alone beyond its window
    (60, 60, 300, (60, 60, 300)),  # at the tolerance, at the window: kept
    (60, 3600, 290, (60, 0, 290)),  # observed_at at the tolerance is kept while changed_at is corrected
    (3600, 60, 290, (0, 60, 290)),
])
def test_clamped_corrects_each_time_from_the_future_alone(observed, changed_at, deadline, expected):
    now = 1_000_000.0
    prev = Evidence("preempted", "accounting", False, now + observed, now + changed_at, "preemption", now + deadline)
    fixed = rules.clamped(prev, now, WINDOWS | {"preemption_seconds": 300})
    assert (fixed.observed_at - now, fixed.changed_at - now, fixed.deadline_at - now) == expected
    if expected == (observed, changed_at, deadline):
        assert fixed is prev


def test_the_time_of_a_change_is_kept_only_while_the_same_source_says_the_same_state():
    _, first = next_evidence(None, seen(100.0, queue="running"), WINDOWS)
    _, same = next_evidence(first, seen(200.0, queue="running"), WINDOWS)
    assert (same.observed_at, same.changed_at) == (200.0, 100.0)
    _, moved = next_evidence(same, seen(300.0, accounting="running"), WINDOWS)  # left the queue, accounting says it
    assert (moved.source, moved.state, moved.changed_at) == ("accounting", "running", 300.0)
    _, other = next_evidence(moved, seen(400.0, accounting="pending"), WINDOWS)
    assert other.changed_at == 400.0


# -- each rule's evidence, field by field ------------------------------------------------------------------------

LAG_REASON = "absent from the queue and not yet in accounting"


def test_absence_starts_an_accounting_lag_window_now():
    assert next_evidence(None, seen(100.0), WINDOWS) == ("absent", Evidence(
        "accounting_lag", "absent", False, 100.0, 100.0, "accounting_lag", 400.0, None, LAG_REASON, None))


def test_an_accounting_lag_past_its_deadline_becomes_unknown_now():
    _, lag = next_evidence(None, seen(100.0), WINDOWS)
    assert next_evidence(lag, seen(401.0), WINDOWS) == ("lag-expired", Evidence(
        "unknown", "absent", False, 401.0, 401.0, None, None, None,
        "absent from the queue and from accounting past the accounting-lag deadline", None))


def test_a_view_gives_its_state_exit_code_reason_and_for_terminal_evidence_its_classification():
    rule, queued = next_evidence(None, seen(100.0, queue="pending", reason="Priority"), WINDOWS)
    assert (rule, queued) == ("queue-present", Evidence("pending", "queue", False, 100.0, 100.0, None, None, None,
                                                         "Priority", None))
    rule, ended = next_evidence(queued, seen(200.0, accounting="out_of_memory", exit_code=137, reason="OOM"),
                                WINDOWS)
    assert (rule, ended) == ("accounting-terminal", Evidence("out_of_memory", "accounting", True, 200.0, 200.0, None,
                                                             None, 137, "OOM", "out_of_memory"))


def test_accounting_that_keeps_saying_the_same_keeps_the_time_it_first_said_it():
    _, first = next_evidence(None, seen(100.0, accounting="running"), WINDOWS)
    rule, again = next_evidence(first, seen(200.0, accounting="running"), WINDOWS)
    assert rule == "accounting-nonterminal" and (again.observed_at, again.changed_at) == (200.0, 100.0)


def test_a_preempted_task_absent_from_the_queue_waits_in_its_window_then_fails_as_preempted():
    rule, first = next_evidence(None, seen(100.0, accounting="preempted", exit_code=0, reason="PreemptMode"), WINDOWS)
    assert (rule, first) == ("preempted-absent", Evidence("preempted", "accounting", False, 100.0, 100.0, "preemption",
                                                          700.0, 0, "PreemptMode", None))
    rule, held = next_evidence(first, seen(300.0, accounting="preempted", exit_code=0, reason="PreemptMode"), WINDOWS)
    assert (rule, held) == ("preempted-absent", first._replace(observed_at=300.0))  # deadline and change kept
    rule, failed = next_evidence(held, seen(701.0, accounting="requeued", exit_code=3), WINDOWS)
    assert (rule, failed) == ("preempted-absent", Evidence(
        "failed", "accounting", True, 701.0, 701.0, None, None, 3,
        "requeued and absent from the queue for longer than the 600s preemption window", "preempted"))


def test_a_preemption_that_left_accounting_too_fails_as_preempted_once_its_window_ran_out():
    _, first = next_evidence(None, seen(100.0, accounting="preempted", exit_code=9), WINDOWS)
    assert next_evidence(first, seen(700.0), WINDOWS) == ("preemption-continues", first)
    assert next_evidence(first, seen(701.0), WINDOWS) == ("preemption-continues", Evidence(
        "failed", "accounting", True, 701.0, 701.0, None, None, 9,
        "preempted and absent from the queue for longer than the 600s preemption window", "preempted"))


def test_clamped_reads_persisted_evidence_with_a_window_but_no_deadline_as_it_is():
    odd = ev("pending", at=1_000_000.0 - 5)._replace(deadline_window="preemption")
    assert rules.clamped(odd, 1_000_000.0, WINDOWS) is odd
