"""The attempt verdict: an attempt's effective state from its own lifecycle record and its scheduler evidence.

Pure (tests/test_rules_attempt.py). The attempt record says what the allocation itself recorded (submitted,
running, succeeded, failed); the evidence says what the scheduler saw. The verdict weighs the two:
- a failure either of them reports is a failure. Beside a failure the attempt recorded, the scheduler's reason is
  kept when it says something the attempt could not know (a time limit, memory, a node, a cancellation); its plain
  nonzero exit is only the echo of the recorded failure and is left out, so the reason does not change with the
  moment the scheduler's last word arrives;
- a success the attempt recorded stands unless the scheduler reports a terminal failure;
- COMPLETED from the scheduler without a recorded result is a failure, never a guessed success;
- otherwise the scheduler's live word (pending, running, preempted, accounting lag, unknown) decides; a task the
  queue holds pending says why in the scheduler's own code, glossed when the code names a limit or a wait
  (`queued`, from `WAITING`): "queued (JobArrayTaskLimit: the array's %N throttle, scheduler.slurm.max_parallel)".
  The code is the queue evidence's `reason` as the executor gave it (squeue's %r), never read out of other words;
- an attempt asked to stop (its stop.json: tau-cancel --attempt, or a stall the plan stops) that has not succeeded
  fails with the stop's reason once it ended, whatever ended it, and is "stopping" until then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taulib.rules.evidence import CLASSIFICATION, FAILURE, PREEMPTION, Evidence

if TYPE_CHECKING:
    from collections.abc import Mapping

STATES = ("pending", "running", "succeeded", "failed", "accounting_lag", "unknown")

# Why a queued task waits: the scheduler's reason code (Slurm's squeue %r, "JOB REASON CODES" in squeue(1)) -> what
# it means to a person, in a few words; the limits by the name sacctmgr and the plan give them. A code not listed is
# said as it is. tau submits a run's later windows without a dependency (taulib.executors.slurm.script): a task of a
# later array waits behind an earlier one only by priority, free resources, its array's throttle or a running-jobs
# limit.
WAITING = {
    "Resources": "waiting for free nodes/CPUs/memory",
    "Priority": "jobs of higher priority go first",
    "Dependency": "waits for another job",
    "DependencyNeverSatisfied": "the job it waits for ended otherwise; it will never start",
    "BeginTime": "not before its begin time; a requeued task waits here",
    "JobArrayTaskLimit": "the array's %N throttle, scheduler.slurm.max_parallel",
    "JobHeldUser": "held by its user; scontrol release lets it start",
    "JobHeldAdmin": "held by an administrator",
    "JobHoldMaxRequeue": "held after more requeues than MaxBatchRequeue",
    "Prolog": "its PrologSlurmctld is running",
    "Cleaning": "its previous run is still being cleaned up after a requeue",
    "CONFIGURING": "allocated; its nodes are being readied",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "NodeDown": "a node it needs is down",
    "BadConstraints": "no node has the features it asks for",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "PartitionTimeLimit": "its time limit is over the partition's MaxTime",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "Reservation": "waits for its advanced reservation",
    "Licenses": "waits for a license",
    "AssociationJobLimit": "a job limit of the association",
    "AssocMaxJobsLimit": "the association's MaxJobs",
    "AssocMaxSubmitJobLimit": "the association's MaxSubmitJobs",
    "AssocGrpJobsLimit": "the association's GrpJobs",
    "AssocGrpSubmitJobsLimit": "the association's GrpSubmitJobs",
    "AssocGrpCpuLimit": "the association's GrpTRES on CPUs",
    "AssocGrpMemLimit": "the association's GrpTRES on memory",
    "AssocGrpNodeLimit": "the association's GrpTRES on nodes",
    "AssocGrpGRES": "the association's GrpTRES on GPUs or other GRES",
    "QOSJobLimit": "a job limit of the QOS",
    "QOSMaxJobsPerUserLimit": "the QOS's MaxJobsPerUser",
    "MaxJobsPerAccount": "the QOS's MaxJobsPerAccount",
    "QOSMaxSubmitJobPerUserLimit": "the QOS's limit on the user's queued jobs",
    "QOSGrpJobsLimit": "the QOS's GrpJobs",
    "QOSGrpSubmitJobsLimit": "the QOS's GrpSubmitJobs",
    "QOSGrpCpuLimit": "the QOS's GrpTRES on CPUs",
    "QOSGrpMemLimit": "the QOS's GrpTRES on memory",
    "QOSGrpNodeLimit": "the QOS's GrpTRES on nodes",
    "QOSGrpGRES": "the QOS's GrpTRES on GPUs or other GRES",
    "QOSMaxCpuPerUserLimit": "the QOS's MaxTRESPerUser on CPUs",
    "QOSMaxNodePerUserLimit": "the QOS's MaxTRESPerUser on nodes",
    "QOSMaxGRESPerUser": "the QOS's MaxTRESPerUser on GPUs or other GRES",
}


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


def effective_attempt(attempt: Mapping[str, Any], evidence: Evidence | None, stopped: str | None = None) -> Verdict:
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
            return Verdict("pending", queued(evidence.reason if evidence.source == "queue" else None))
        if evidence.state == "running":
            return Verdict("running", "running" if life == "running" else "allocated, the attempt has not started yet")
    if life == "running":
        return Verdict("running", "the attempt reports it is running")
    return Verdict("pending", "submitted")


def queued(code: str | None) -> str:
    """Why a queued task waits, from the scheduler's reason code (None: it gave none): "queued", "queued (CODE)",
    or "queued (CODE: what it means)" for a code of `WAITING`."""
    if code is None:
        return "queued"
    gloss = WAITING.get(code)
    return f"queued ({code})" if gloss is None else f"queued ({code}: {gloss})"


def terminal_classification(evidence: Evidence) -> str:
    """The classification of an unfinished attempt that terminal evidence ends (attempt.json terminal)."""
    if evidence.classification is not None:
        return evidence.classification
    return CLASSIFICATION.get(evidence.state, "failed")  # evidence recorded before it carried its classification


def _says(failure: Evidence) -> str:
    """What the scheduler says of the failure it reports: its reason, or its state and exit code."""
    return failure.reason or f"scheduler reports {failure.state}" + ("" if not failure.exit_code else
                                                                       f" (exit code {failure.exit_code})")
