"""A shard's decision: its state, reason, what it spent of the failure budget, what its next attempt does and
whether its running attempt is stalled, from the facts its records hold, read once (`rundir.state.facts`).

Pure (tests/test_rules_shard.py). The one function every view of a shard goes through (tau-status, tau-reconcile,
tau-drive, a collection's missing shards), weighing:
- a winner: the shard is sealed, and its attempts before the winning one failed (`budget.won`);
- its newest attempt's verdict (`attempt.effective_attempt`, with why the attempt was asked to stop);
- a cancellation in force: the shard is cancelled, and nothing of it is retried;
- the attempts the user ended (`spared`): asked to stop by the user (stop.json `by` user), or ended cancelled while
  a cancellation of the shard or the run was ever recorded. A stop or cancellation the user asked for is never a
  failure of the client: it spends neither the shard's attempts nor the run's failure budget. A stall's stop, and a
  cancellation by anyone else (an administrator's scancel), do;
- for a newest attempt that failed, what the next one does (`escalation.next_attempt`): the request it asks, a wait
  for the executor's measure, or no retry that could help (its terminal `code` one a retry cannot mend:
  `budget.NOT_RETRIED`, an image that changed);
- the retry budget: a retryable verdict with every attempt used is exhausted (`rollup.shard_state`);
- for a running attempt, its heartbeat and progress against the stall windows (`stall`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taulib.rules import budget, rollup
from taulib.rules.attempt import Verdict, effective_attempt

if TYPE_CHECKING:
    from collections.abc import Mapping

    from taulib.rules.escalation import Next
    from taulib.rules.evidence import Evidence

SIGKILL = 9  # a client killed by it said nothing on why (POSIX's number; the same on every platform tau runs on)
WON = Verdict("succeeded", "the winner's attempt")


class Facts:
    """What the records say of one shard, read once (`rundir.state.facts`). Defined as a plain class with slots,
    not a NamedTuple: it is on the start-up path of every command that reads a run.

    won: the ordinal of the attempt that won (its winner.json), None without a winner (then nothing else matters);
    attempt: its newest attempt's record; evidence: that attempt's scheduler evidence; stopped: why that attempt was
    asked to stop (its stop.json's reason), None when it was not; stopped_by: who asked each attempt 1..n to stop
    (stop.json's `by`, None where none was); classified: the terminal classification each attempt 1..n recorded,
    None when no cancellation of the shard or the run was ever recorded (then no attempt can have been ended by one);
    cancelled: when the cancellation in force was asked for (None: none is in force); request: the newest attempt's
    request ({mem, time}); measured: its executor's figures (`rundir.usage`), None when not in; result: its result.json,
    None when it recorded none or the plan does not escalate (only escalation reads it); updated_at: when its record
    last changed (epoch); readiness: its readiness.json while it has not ended (None otherwise); beat_at, progress_at:
    that record's last heartbeat and last change of its count of records done (epochs); records: the records the
    shard holds."""

    __slots__ = ("won", "attempt", "evidence", "stopped", "stopped_by", "classified", "cancelled", "request",
                 "measured", "result", "updated_at", "readiness", "beat_at", "progress_at", "records")

    def __init__(self, *, won: int | None = None, attempt: Mapping[str, Any] | None = None,
                 evidence: Evidence | None = None, stopped: str | None = None,
                 stopped_by: tuple[str | None, ...] = (), classified: tuple[str | None, ...] | None = None,
                 cancelled: str | None = None, request: Mapping[str, str | None] | None = None,
                 measured: Mapping[str, Any] | None = None, result: Mapping[str, Any] | None = None,
                 updated_at: float = 0.0, readiness: Mapping[str, Any] | None = None, beat_at: float | None = None,
                 progress_at: float | None = None, records: int = 0) -> None:
        self.won, self.attempt, self.evidence, self.stopped = won, attempt, evidence, stopped
        self.stopped_by, self.classified, self.cancelled, self.request = stopped_by, classified, cancelled, request
        self.measured, self.result, self.updated_at, self.readiness = measured, result, updated_at, readiness
        self.beat_at, self.progress_at, self.records = beat_at, progress_at, records


class Policy:
    """What the plan says the decision weighs: the attempts a shard may make, how a retry grows its request
    (`retry.escalate`, None: it does not), the accounting window a wait is bounded by (seconds), and the stall
    windows (seconds; `progress_stall_seconds` None turns the progress rule off)."""

    __slots__ = ("max_attempts", "escalate", "window", "stall_seconds", "progress_stall_seconds")

    def __init__(self, max_attempts: int, escalate: Mapping[str, Any] | None, window: float, stall_seconds: int,
                 progress_stall_seconds: int | None) -> None:
        self.max_attempts, self.escalate, self.window = max_attempts, escalate, window
        self.stall_seconds, self.progress_stall_seconds = stall_seconds, progress_stall_seconds


def policy(plan: Mapping[str, Any]) -> Policy:
    """The plan's policy (its `retry` and `windows`, read as `rules.plan` defaults them)."""
    retry, windows = plan["retry"], plan["windows"]
    return Policy(retry["max_attempts"], retry.get("escalate"), float(windows["accounting_lag_seconds"]),
                  windows["stall_seconds"], windows["progress_stall_seconds"])


class Decision:
    """A shard's decision: the verdict on the attempt that decides it (None before any), its state (one of
    `rollup.SHARD_STATES`) and reason, its attempts (the winner's ordinal, else its newest attempt's), how many of
    them failed against the run's failure budget, what its next attempt does (when its newest failed and it is not
    cancelled), and why its running attempt is stalled (None when it is not)."""

    __slots__ = ("verdict", "state", "reason", "attempts", "failed", "next", "stalled")

    def __init__(self, verdict: Verdict | None, state: str, reason: str, attempts: int, failed: int,
                 next: Next | None = None, stalled: str | None = None) -> None:
        self.verdict, self.state, self.reason, self.attempts = verdict, state, reason, attempts
        self.failed, self.next, self.stalled = failed, next, stalled


def cancel_reason(requested_at: str) -> str:
    """The reason of a shard a cancellation asked for at `requested_at` holds."""
    return f"cancelled by the user at {requested_at}"


def spared(facts: Facts) -> list[int]:
    """The ordinals of the attempts the user ended (see the module's docstring)."""
    classified = facts.classified
    return [ordinal for ordinal, by in enumerate(facts.stopped_by, start=1)
            if by == "user" or (classified is not None and classified[ordinal - 1] == "cancelled")]


def following(facts: Facts, policy: Policy, now: float) -> Next:
    """What the next attempt of the shard whose newest attempt (`facts.attempt`, failed) is does: the request it
    asks for, or why it waits or cannot help (`escalation.next_attempt`), from the attempt's request, what ended it
    (its record, the scheduler's terminal evidence, the executor's figures) and whether it was killed without a word
    on why (no result of its own, or its client killed by SIGKILL)."""
    from taulib.rules import escalation  # only a shard whose newest attempt failed asks (0.6 ms of start-up)

    # for the type checker: the reader gives a newest attempt its request
    assert facts.attempt is not None and facts.request is not None  # pragma: no mutate
    measured = facts.measured
    terminal = facts.evidence if facts.evidence is not None and facts.evidence.terminal else None
    scheduler = terminal.classification if terminal is not None else None
    recorded = (facts.attempt.get("terminal") or {}).get("classification")
    ended = escalation.ended_as(recorded, scheduler, measured)
    killed = bool(policy.escalate) and ended not in escalation.CAPS and (
        facts.result is None or facts.result.get("signal") == SIGKILL)
    ended_at = terminal.changed_at if terminal is not None else facts.updated_at
    found = escalation.next_attempt(facts.request, ended, policy.escalate, killed, measured is not None, ended_at,
                                    policy.window, now)
    return found._replace(cause=escalation.measured_cause(ended, recorded, scheduler, measured))


def decide(facts: Facts, policy: Policy, now: float) -> Decision:
    """The shard's decision from its facts, under the plan's `policy`, at the observer's time `now`."""
    if facts.won is not None:
        return Decision(WON, "succeeded", "sealed by its winner", facts.won, budget.won(facts.won))
    attempt = facts.attempt
    verdict = None if attempt is None else effective_attempt(attempt, facts.evidence, facts.stopped)
    attempts = 0 if attempt is None else int(attempt["ordinal"])
    cancelled = None if facts.cancelled is None else cancel_reason(facts.cancelled)
    nxt = None
    futile = None if attempt is None else budget.NOT_RETRIED.get((attempt.get("terminal") or {}).get("code"))
    if cancelled is None and verdict is not None and verdict.state in budget.RETRYABLE:
        nxt = following(facts, policy, now)
        if futile is not None:
            nxt = nxt._replace(action="exhausted", reason=futile)
    ended_by_user = spared(facts)
    latest_spared = attempts in ended_by_user
    state, reason = rollup.shard_state(
        False,  # pragma: no mutate (a winner returned above; None would say the same)
        verdict, attempts - len(ended_by_user), policy.max_attempts, cancelled,
        nxt.reason if nxt is not None and nxt.action == "exhausted" else None)
    if nxt is not None and nxt.cause is not None:  # a shard with a next attempt failed, is unknown or exhausted
        reason = f"{reason}; {nxt.cause}"
    # the user's stops and cancellations are no failures: the newest one is left out like a cancelled shard's
    earlier_spared = len(ended_by_user) - (1 if latest_spared else 0)
    failed = budget.failed_attempts(attempts - earlier_spared, budget.latest_failed(
        None if verdict is None else verdict.state, cancelled is not None or latest_spared))
    stalled = stalled_by(facts, policy, now) if verdict is not None and verdict.state == "running" else None
    return Decision(verdict, state, reason, attempts, failed, nxt, stalled)


def since(now: float, at: float) -> float:
    """How long ago `at` was by the observer's clock `now`, to a tenth of a second, never less than 0 (a clock
    behind the writer's reads as just now)."""
    return round(max(0.0, now - at), 1)


def stalled_by(facts: Facts, policy: Policy, now: float) -> str | None:
    """Why the shard's running attempt is stalled (`stall`), or None: no heartbeat for the stall window, or a count
    of records done that has not changed for the progress window; None without a readiness record."""
    if facts.beat_at is None:
        return None
    from taulib.rules import stall

    readiness = facts.readiness or {}
    still = None if facts.progress_at is None else max(0.0, now - facts.progress_at)
    return (stall.heartbeat(since(now, facts.beat_at), policy.stall_seconds)
            or stall.progress(readiness.get("records_done"), facts.records, still, policy.progress_stall_seconds))
