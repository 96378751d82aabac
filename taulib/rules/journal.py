"""Resolving an ambiguous submission by its job's exact name (tau-slurm(7) "Submission: the journal and an
ambiguous reply"): adopt, wait, retire, or refuse.

Pure (tests/test_rules_journal.py). When the hand-off (Slurm's `sbatch`) timed out or its reply was lost, the journal
entry stays PREPARED; the next call asks the scheduler for this user's jobs of exactly the entry's job name submitted
since the entry was made (Slurm: `executors.slurm.commands.find_by_name`) and feeds what it found here, in the
scheduler's own words (`Engine`), with the task indices the entry planned (`{None}`
for a plain job, such as a collection's CPU job) and whether the visibility deadline has passed:
  more than one job                                      conflict: a person must cancel the extra ones
  one job whose tasks are not a subset of the planned    conflict: it is not ours to adopt
  one job with exactly the planned tasks                 adopt it
  one job with only some of them, or none, in time       wait (try again)
  past the deadline                                      retire the entry: its replacement is a new submission
Never a blind duplicate: an entry is replaced only once nothing of its name was seen in time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Mapping, Set


class Engine(NamedTuple):
    """How a scheduler is named in the reasons: its name ("Slurm") and the command that hands a job to it
    ("sbatch")."""
    name: str
    submit: str


class Resolution(NamedTuple):
    action: str  # adopt | wait | retire | conflict
    job_id: str | None
    reason: str


def resolve(found: Mapping[str, Set[int | None]], expected: Set[int | None], past_deadline: bool,
            job_name: str, engine: Engine) -> Resolution:
    """`found`: job id -> task indices seen (None for a plain job) of the jobs named `job_name`."""
    if len(found) > 1:
        return Resolution("conflict", None, f"{len(found)} {engine.name} jobs are named {job_name!r} "
                          f"(ids {sorted(found)}); tau adopts only one: cancel the extra ones")
    if len(found) == 1:
        job_id, seen = next(iter(found.items()))
        if not seen <= expected:
            return Resolution("conflict", job_id, f"{engine.name} job {job_id} is named {job_name!r} but its tasks "
                              f"{sorted(map(str, seen))} are not the planned ones; refusing to adopt it")
        if seen == expected:
            return Resolution("adopt", job_id, f"{engine.name} job {job_id} carries its name")
        if not past_deadline:
            return Resolution("wait", job_id, f"only some tasks of {engine.name} job {job_id} are visible yet")
        return Resolution("retire", job_id, f"only tasks {sorted(map(str, seen))} of job {job_id} were visible by "
                          "the deadline")
    if not past_deadline:
        return Resolution("wait", None, f"its job is not visible in {engine.name} yet (its {engine.submit} reply was "
                          "lost)")
    return Resolution("retire", None, f"no job with its name was visible in {engine.name} by the visibility "
                      "deadline")
