"""The attempt verdict: an attempt's effective state from its own lifecycle record and its scheduler evidence.

Pure (tests/test_rules_attempt.py). The attempt record says what the allocation itself recorded (submitted,
running, succeeded, failed); the evidence says what the scheduler saw. The verdict weighs the two:
- a failure either of them reports is a failure. Beside a failure the attempt recorded, the scheduler's reason is
  kept when it says something the attempt could not know (a time limit, memory, a node, a cancellation); its plain
  nonzero exit is only the echo of the recorded failure and is left out, so the reason does not change with the
  moment the scheduler's last word arrives;
- a success the attempt recorded stands unless the scheduler reports a terminal failure;
- COMPLETED from the scheduler without a recorded result is a failure, never a guessed success;
- otherwise the scheduler's live word (pending, running, preempted, accounting lag, unknown) decides;
- an attempt asked to stop (its stop.json: tau-cancel --attempt, or a stall the plan stops) that has not succeeded
  fails with the stop's reason once it ended, whatever ended it, and is "stopping" until then.
"""

from __future__ import annotations

from typing import Any

from taulib.rules.evidence import CLASSIFICATION, FAILURE, PREEMPTION, Evidence

STATES = ("pending", "running", "succeeded", "failed", "accounting_lag", "unknown")


class Verdict(tuple[str, str]):
    """(state, reason): state one of STATES. A tuple with names, defined as a plain class because it is on the
    start-up path of every command that reads a run (a NamedTuple costs ~0.1 ms to define)."""

    __slots__ = ()

    def __new__(cls, state: str, reason: str) -> Verdict:
        return tuple.__new__(cls, (state, reason))

    @property
    def state(self) -> str:
        return self[0]

    @property
    def reason(self) -> str:
        return self[1]


def effective_attempt(attempt: dict[str, Any], evidence: Evidence | None, stopped: str | None = None) -> Verdict:
    """The verdict on an attempt (its record, as stored) given its scheduler evidence and, when it was asked to stop
    without its shard being cancelled (tau-cancel --attempt, a stall), why (`stopped`)."""
    if stopped is not None and attempt["state"] != "succeeded":
        verdict = effective_attempt(attempt, evidence)
        if verdict.state == "failed":  # terminal evidence always fails an attempt that did not succeed
            return Verdict("failed", stopped)  # however it ended, it ended because it was stopped
        if verdict.state in ("pending", "running"):
            return Verdict(verdict.state, f"stopping: {stopped}")
        return verdict
    life = attempt["state"]
    failure = evidence if evidence is not None and evidence.terminal and evidence.state in FAILURE else None
    if life == "failed":
        own: str = (attempt.get("terminal") or {}).get("reason") or "the attempt failed"
        if failure is not None and failure.state != "failed" and _says(failure) not in own:
            return Verdict("failed", f"{own}; scheduler: {_says(failure)}")
        return Verdict("failed", own)
    if failure is not None:
        return Verdict("failed", _says(failure))
    if life == "succeeded":
        return Verdict("succeeded", "the attempt finished and recorded a complete result")
    if evidence is not None and evidence.state == "completed":
        return Verdict("failed", "the scheduler reports COMPLETED but the attempt never recorded its result")
    if evidence is not None:
        if evidence.state == "accounting_lag":
            return Verdict("accounting_lag", evidence.reason or "not yet in accounting")
        if evidence.state == "unknown":
            return Verdict("unknown", evidence.reason or "the scheduler no longer knows this attempt")
        if evidence.state in PREEMPTION:
            return Verdict("pending", f"{evidence.state}; waiting to be requeued")
        if evidence.state == "pending":
            return Verdict("pending", "queued")
        if evidence.state == "running":
            return Verdict("running", "running" if life == "running" else "allocated, the attempt has not started yet")
    if life == "running":
        return Verdict("running", "the attempt reports it is running")
    return Verdict("pending", "submitted")


def terminal_classification(evidence: Evidence) -> str:
    """The classification of an unfinished attempt that terminal evidence ends (attempt.json terminal)."""
    if evidence.classification is not None:
        return evidence.classification
    return CLASSIFICATION.get(evidence.state, "failed")  # evidence recorded before it carried its classification


def _says(failure: Evidence) -> str:
    """What the scheduler says of the failure it reports: its reason, or its state and exit code."""
    return failure.reason or f"scheduler reports {failure.state}" + ("" if not failure.exit_code else
                                                                       f" (exit code {failure.exit_code})")
