"""The reconcile core: pure functions from records and observations to evidence and states.

Nothing here reads a file, a clock or the environment: every input is an argument, so the rules can be tested
exhaustively and property-tested. `taulib.apply` does the I/O around them under locks.

Evidence rules (SPEC 5), as one table, first match wins. `q` is what the active queue says (None when absent),
`a` what accounting says, `prev` the persisted observation. Terminal evidence is sticky; deadlines are fixed when
first set; absence is never a guessed success or failure.

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
  lag-expired               prev accounting_lag, now > its deadline           unknown
  lag-continues             prev accounting_lag                               keep prev
  unknown-stays             prev unknown                                      keep prev
  absent                    absent from both                                  accounting_lag, deadline now+window
"""

from __future__ import annotations

from typing import Callable, NamedTuple

TERMINAL = frozenset({"completed", "failed", "cancelled", "timed_out", "node_failed", "out_of_memory"})
FAILURE = TERMINAL - {"completed"}
PREEMPTION = frozenset({"preempted", "requeued"})


class Seen(NamedTuple):
    """One attempt's view in one observation cycle."""

    observed_at: float
    queue: dict | None  # {"state", "raw", "exit_code", "reason"} or None when absent
    accounting: dict | None
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


def _keep(prev: Evidence | None, seen: Seen, windows: dict) -> Evidence | None:
    return prev


def _from(view: dict, source: str, seen: Seen, prev: Evidence | None, terminal: bool) -> Evidence:
    state = view["state"]
    changed = seen.observed_at
    if prev is not None and prev.state == state and prev.source == source:
        changed = prev.changed_at
    return Evidence(state, source, terminal, seen.observed_at, changed, None, None, view.get("exit_code"),
                    view.get("reason"))


def _accounting_terminal(prev, seen, windows):
    return _from(seen.accounting, "accounting", seen, prev, True)


def _queue_present(prev, seen, windows):
    return _from(seen.queue, "queue", seen, prev, False)


def _preempted_absent(prev, seen, windows):
    if prev is not None and prev.deadline_window == "preemption" and prev.deadline_at is not None:
        deadline = prev.deadline_at
        changed = prev.changed_at
    else:
        deadline = seen.observed_at + windows["preemption_seconds"]
        changed = seen.observed_at
    if seen.observed_at > deadline:
        return Evidence("failed", "accounting", True, seen.observed_at, seen.observed_at, None, None,
                        seen.accounting.get("exit_code"),
                        f"{seen.accounting['state']} and absent from the queue for longer than the "
                        f"{windows['preemption_seconds']}s preemption window")
    return Evidence("preempted", "accounting", False, seen.observed_at, changed, "preemption", deadline,
                    seen.accounting.get("exit_code"), seen.accounting.get("reason"))


def _accounting_nonterminal(prev, seen, windows):
    return _from(seen.accounting, "accounting", seen, prev, False)


def _lag_expired(prev, seen, windows):
    return Evidence("unknown", "absent", False, seen.observed_at, seen.observed_at, None, None, None,
                    "absent from the queue and from accounting past the accounting-lag deadline")


def _absent(prev, seen, windows):
    deadline = seen.observed_at + windows["accounting_lag_seconds"]
    return Evidence("accounting_lag", "absent", False, seen.observed_at, seen.observed_at, "accounting_lag",
                    deadline, None, "absent from the queue and not yet in accounting")


Rule = tuple[str, Callable[[Evidence | None, Seen], bool], Callable]

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
    ("lag-expired", lambda p, s: p is not None and p.state == "accounting_lag" and p.deadline_at is not None
     and s.observed_at > p.deadline_at, _lag_expired),
    ("lag-continues", lambda p, s: p is not None and p.state == "accounting_lag", _keep),
    ("unknown-stays", lambda p, s: p is not None and p.state == "unknown", _keep),
    ("absent", lambda p, s: True, _absent),
]


def next_evidence(prev: Evidence | None, seen: Seen, windows: dict) -> tuple[str, Evidence | None]:
    """Apply the first matching rule. Returns (rule name, new evidence); None only when prev was None and kept."""
    for name, when, then in RULES:
        if when(prev, seen):
            return name, then(prev, seen, windows)
    raise AssertionError("the last rule always matches")


# -- effective attempt state ------------------------------------------------------------------------------------

def effective_attempt(attempt: dict, evidence: Evidence | None) -> tuple[str, str]:
    """(state, reason) of an attempt from its lifecycle record and its scheduler evidence.

    states: pending, running, succeeded, failed, accounting_lag, unknown.
    """
    life = attempt["state"]
    scheduler_failed = evidence is not None and evidence.terminal and evidence.state in FAILURE
    scheduler_says = (evidence.reason or f"scheduler reports {evidence.state}" + _exit(evidence.exit_code)
                      if scheduler_failed else "")
    if life == "failed":
        own = (attempt.get("terminal") or {}).get("reason") or "the attempt failed"
        if scheduler_failed and scheduler_says not in own:
            return "failed", f"{own}; scheduler: {scheduler_says}"
        return "failed", own
    if scheduler_failed:
        return "failed", scheduler_says
    if life == "succeeded":
        return "succeeded", "the attempt finished and recorded a complete result"
    if evidence is not None and evidence.state == "completed":
        return "failed", "the scheduler reports COMPLETED but the attempt never recorded its result"
    if evidence is not None:
        if evidence.state == "accounting_lag":
            return "accounting_lag", evidence.reason or "not yet in accounting"
        if evidence.state == "unknown":
            return "unknown", evidence.reason or "the scheduler no longer knows this attempt"
        if evidence.state in PREEMPTION:
            return "pending", f"{evidence.state}; waiting to be requeued"
        if evidence.state == "pending":
            return "pending", "queued"
        if evidence.state == "running":
            return "running", "running" if life == "running" else "allocated, the attempt has not started yet"
    if life == "running":
        return "running", "the attempt reports it is running"
    return "pending", "submitted"


def terminal_classification(evidence: Evidence) -> str:
    if evidence.state == "completed":
        return "completed_unfinalised"
    if evidence.state in ("cancelled", "timed_out", "node_failed", "out_of_memory"):
        return evidence.state
    if evidence.state == "failed" and evidence.reason and "preemption window" in evidence.reason:
        return "preempted"
    return "failed"


def _exit(code: int | None) -> str:
    return "" if not code else f" (exit code {code})"


# -- roll-up --------------------------------------------------------------------------------------------------

SHARD_STATES = ("succeeded", "candidate", "running", "accounting_lag", "pending", "unknown", "failed")
RETRYABLE = frozenset({"failed", "unknown"})


def shard_state(has_winner: bool, latest: tuple[str, str] | None) -> tuple[str, str]:
    """(state, reason) of a shard: sealed by a winner, else its latest attempt's effective state."""
    if has_winner:
        return "succeeded", "sealed by its winner"
    if latest is None:
        return "pending", "not submitted yet"
    state, reason = latest
    if state == "succeeded":
        return "candidate", "the latest attempt succeeded; its winner is not published yet (run tau-winner)"
    return state, reason


def run_state(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    if total and counts.get("succeeded", 0) == total:
        return "succeeded"
    for state in ("running", "candidate", "accounting_lag", "pending", "unknown"):
        if counts.get(state):
            return "running" if state == "candidate" else state
    return "failed"
