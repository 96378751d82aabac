"""The evidence table: what the scheduler's latest word does to an attempt's persisted evidence (tau-reconcile(1)
"Evidence rules").

Pure: every input is an argument (no file, no clock, no environment), so the rules are tested exhaustively and by
properties (tests/test_rules_evidence.py). `taulib.lifecycle.reconcile` does the I/O around them under locks.

Evidence rules, as one table, first match wins. `q` is what the active queue says (None when absent), `a` what
accounting says, `prev` the persisted observation. Terminal evidence is sticky; deadlines are fixed when first set;
absence is never a guessed success or failure.

  rule                      when                                              then
  stale                     observation older than prev                       keep prev
  sticky-terminal           prev is terminal                                  keep prev
  accounting-terminal       a is terminal (completed, failed, cancelled,     a, terminal
                            timed_out, node_failed, out_of_memory)
  queue-present             q is present                                      q (preempted/requeued: not terminal)
  queue-unavailable         queue source unavailable                          keep prev
  preempted-absent          a is preempted/requeued, q absent                 preempted, preemption deadline
                                                                              (kept if set); past it: failed
  accounting-nonterminal    a is present                                      a
  accounting-unavailable    accounting source unavailable                     keep prev
  preemption-continues      prev preempted (its window set), absent from      keep prev until its deadline;
                            both (the row left accounting too)                past it: failed, preempted
  lag-expired               prev accounting_lag, now > its deadline           unknown
  lag-continues             prev accounting_lag                               keep prev
  unknown-stays             prev unknown                                      keep prev
  absent                    absent from both                                  accounting_lag, deadline now+window

No clock that came with data is trusted: a document dated more than FUTURE_TOLERANCE seconds ahead of the
reconciling process's own clock is refused (`ahead`), as is one dated more than FUTURE_TOLERANCE seconds before the
submission of an attempt it names (`predates`: evidence never predates its attempt), and persisted evidence
stamped in that future (by a fast clock, or an older tau that trusted one) is brought back to the present before any
rule reads it (`clamped`), so a fast clock can never make later evidence look "stale" nor stretch a window.

Terminal evidence carries its classification (what ended the attempt: `CLASSIFICATION`, or "preempted" when the
preemption window ran out), so no rule ever has to read it back out of a reason's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

TERMINAL = frozenset({"completed", "failed", "cancelled", "timed_out", "node_failed", "out_of_memory"})
FAILURE = TERMINAL - {"completed"}
PREEMPTION = frozenset({"preempted", "requeued"})
# terminal scheduler state -> the classification of the attempt it ends
CLASSIFICATION = {"completed": "completed_unfinalised", "failed": "failed", "cancelled": "cancelled",
                  "timed_out": "timed_out", "node_failed": "node_failed", "out_of_memory": "out_of_memory"}


class Seen(NamedTuple):
    """One attempt's view in one observation cycle."""

    observed_at: float
    queue: dict[str, Any] | None  # {"state", "raw", "exit_code", "reason"} or None when absent
    accounting: dict[str, Any] | None
    queue_ok: bool = True
    accounting_ok: bool = True


class Evidence(NamedTuple):
    """The persisted scheduler evidence of an attempt (the content of observation.json, times as epochs)."""

    state: str
    source: str  # queue | accounting | absent
    terminal: bool
    observed_at: float
    changed_at: float
    deadline_window: str | None = None  # accounting_lag | preemption
    deadline_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None
    classification: str | None = None  # terminal evidence only: what ended the attempt


def _keep(prev: Evidence | None, seen: Seen, windows: Mapping[str, float]) -> Evidence | None:
    return prev


def _from(view: Mapping[str, Any], source: str, seen: Seen, prev: Evidence | None, terminal: bool) -> Evidence:
    state = view["state"]
    changed = seen.observed_at
    if prev is not None and prev.state == state and prev.source == source:
        changed = prev.changed_at
    return Evidence(state, source, terminal, seen.observed_at, changed, None, None, view.get("exit_code"),
                    view.get("reason"), CLASSIFICATION[state] if terminal else None)


# The rules below run only when their condition in RULES holds: the view they read is there (the asserts say so).
def _accounting_terminal(prev: Evidence | None, seen: Seen, windows: Mapping[str, float]) -> Evidence:
    assert seen.accounting is not None
    # no earlier evidence from accounting has a terminal state without being terminal (and so sticky): the change
    # is always now, whatever `prev` is
    return _from(seen.accounting, "accounting", seen, prev, True)  # pragma: no mutate


def _queue_present(prev: Evidence | None, seen: Seen, windows: Mapping[str, float]) -> Evidence:
    assert seen.queue is not None
    return _from(seen.queue, "queue", seen, prev, False)


def _preemption_failed(state: str, exit_code: int | None, seen: Seen, windows: Mapping[str, float]) -> Evidence:
    return Evidence("failed", "accounting", True, seen.observed_at, seen.observed_at, None, None, exit_code,
                    f"{state} and absent from the queue for longer than the {windows['preemption_seconds']}s "
                    "preemption window", "preempted")


def _preempted_absent(prev: Evidence | None, seen: Seen, windows: Mapping[str, float]) -> Evidence:
    assert seen.accounting is not None
    if prev is not None and prev.deadline_window == "preemption" and prev.deadline_at is not None:
        deadline = prev.deadline_at
        changed = prev.changed_at
    else:
        deadline = seen.observed_at + windows["preemption_seconds"]
        changed = seen.observed_at
    if seen.observed_at > deadline:
        return _preemption_failed(seen.accounting["state"], seen.accounting.get("exit_code"), seen, windows)
    return Evidence("preempted", "accounting", False, seen.observed_at, changed, "preemption", deadline,
                    seen.accounting.get("exit_code"), seen.accounting.get("reason"))


def _preemption_continues(prev: Evidence | None, seen: Seen, windows: Mapping[str, float]) -> Evidence | None:
    """A preempted task that left the queue and then accounting too (a purge, a lost row): its window is the one it
    already had, never a new accounting-lag window, and it fails as preempted once that ran out."""
    assert prev is not None and prev.deadline_at is not None  # pragma: no mutate (RULES' condition says so)
    if seen.observed_at > prev.deadline_at:
        return _preemption_failed(prev.state, prev.exit_code, seen, windows)
    return prev


def _accounting_nonterminal(prev: Evidence | None, seen: Seen, windows: Mapping[str, float]) -> Evidence:
    assert seen.accounting is not None
    return _from(seen.accounting, "accounting", seen, prev, False)


def _lag_expired(prev: Evidence | None, seen: Seen, windows: Mapping[str, float]) -> Evidence:
    return Evidence("unknown", "absent", False, seen.observed_at, seen.observed_at, None, None, None,
                    "absent from the queue and from accounting past the accounting-lag deadline")


def _absent(prev: Evidence | None, seen: Seen, windows: Mapping[str, float]) -> Evidence:
    deadline = seen.observed_at + windows["accounting_lag_seconds"]
    return Evidence("accounting_lag", "absent", False, seen.observed_at, seen.observed_at, "accounting_lag",
                    deadline, None, "absent from the queue and not yet in accounting")


Rule = tuple[str, Callable[[Evidence | None, Seen], bool],
             Callable[[Evidence | None, Seen, Mapping[str, float]], Evidence | None]]

RULES: list[Rule] = [
    ("stale", lambda p, s: p is not None and s.observed_at < p.observed_at, _keep),
    ("sticky-terminal", lambda p, s: p is not None and p.terminal, _keep),
    ("accounting-terminal", lambda p, s: s.accounting is not None and s.accounting["state"] in TERMINAL,
     _accounting_terminal),
    ("queue-present", lambda p, s: s.queue is not None, _queue_present),
    ("queue-unavailable", lambda p, s: not s.queue_ok, _keep),
    ("preempted-absent", lambda p, s: s.accounting is not None and s.accounting["state"] in PREEMPTION,
     _preempted_absent),
    ("accounting-nonterminal", lambda p, s: s.accounting is not None, _accounting_nonterminal),
    ("accounting-unavailable", lambda p, s: not s.accounting_ok, _keep),
    ("preemption-continues", lambda p, s: p is not None and p.deadline_window == "preemption"
     and p.deadline_at is not None, _preemption_continues),
    ("lag-expired", lambda p, s: p is not None and p.state == "accounting_lag" and p.deadline_at is not None
     and s.observed_at > p.deadline_at, _lag_expired),
    ("lag-continues", lambda p, s: p is not None and p.state == "accounting_lag", _keep),
    ("unknown-stays", lambda p, s: p is not None and p.state == "unknown", _keep),
    ("absent", lambda p, s: True, _absent),
]


def next_evidence(prev: Evidence | None, seen: Seen, windows: Mapping[str, float]) -> tuple[str, Evidence | None]:
    """Apply the first matching rule. Returns (rule name, new evidence); None only when prev was None and kept."""
    name, _, then = next(rule for rule in RULES if rule[1](prev, seen))  # the last rule always matches
    return name, then(prev, seen, windows)


FUTURE_TOLERANCE = 60.0  # seconds an observation may be dated ahead of the reconciling process's clock


def ahead(observed_at: float, now: float) -> float | None:
    """How many seconds an observation dated `observed_at` is ahead of `now` beyond the tolerance (None: it is not;
    such a document is refused)."""
    return observed_at - now if observed_at > now + FUTURE_TOLERANCE else None


def predates(observed_at: float, submitted_at: float) -> float | None:
    """How many seconds an observation dated `observed_at` is older than the submission of the attempt it would
    change, beyond the tolerance between two machines' clocks (None: it is not). Evidence never predates its
    attempt, so such a document is refused: it was made before the attempt existed, or by a clock far behind."""
    return submitted_at - observed_at if observed_at < submitted_at - FUTURE_TOLERANCE else None


def clamped(prev: Evidence | None, now: float, windows: Mapping[str, float], present: float | None = None
            ) -> Evidence | None:
    """Persisted evidence with no time beyond `now` (+ the tolerance): such a time came from a fast clock, so it is
    replaced by `present` (default `now`; the reconciler passes the time of the observation in hand, so that the
    new evidence is not "stale" against it), and a deadline beyond `now` plus its own window (the latest a true
    one can be) becomes that."""
    if prev is None:
        return None
    limit = now + FUTURE_TOLERANCE
    present = now if present is None else min(present, now)
    deadline = prev.deadline_at
    if deadline is not None and prev.deadline_window is not None:
        deadline = min(deadline, now + windows[f"{prev.deadline_window}_seconds"])
    if prev.observed_at <= limit and prev.changed_at <= limit and deadline == prev.deadline_at:
        return prev
    return prev._replace(observed_at=present if prev.observed_at > limit else prev.observed_at,
                         changed_at=present if prev.changed_at > limit else prev.changed_at, deadline_at=deadline)


def changed(prev: Evidence | None, new: Evidence) -> bool:
    """Whether `new` says something `prev` did not (the time of the observation alone is no news)."""
    return prev is None or new._replace(observed_at=0.0) != prev._replace(observed_at=0.0)
