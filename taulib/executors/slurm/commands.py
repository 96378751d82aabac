"""Running Slurm's commands: always by name from PATH, always with a timeout, never through a shell.

`scancel` is called only by tau-cancel, for the exact jobs and array tasks of the attempts it cancels.
Each call returns parsed rows or raises: `Unavailable` (69) when the command cannot be asked (not installed,
controller or database down, timed out), `Ambiguous` when `sbatch` may or may not have submitted the job (a
timeout, a lost reply, unparsable output, a communication error), `Refused` when sbatch definitely refused the job.
Job ids are passed with `--jobs` in chunks (never a query without ids, never the whole cluster).
Timeouts: TAU_SLURM_TIMEOUT seconds for queries (default 30), TAU_SBATCH_TIMEOUT for sbatch (default 60).
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import TYPE_CHECKING

from taulib import env
from taulib.errors import Ambiguous, SubmitLimited, SubmitRefused, Unavailable
from taulib.executors.slurm import parse, variables

if TYPE_CHECKING:
    from taulib.rundir.run import Run

CHUNK = 500
# what squeue prints, whole, when no id of its --jobs is in slurmctld's memory any more (Slurm 22.05 and later);
# anything else on a failure, however similar, is a failure
GONE = "slurm_load_jobs error: Invalid job id specified"
SACCT_FORMAT = "JobID,JobIDRaw,JobName%200,State,ExitCode,Submit,Start,End"
# sbatch's words for a refusal by a submit limit (AssocMaxSubmitJobLimit, QOSMaxSubmitJobPerUserLimit, ...)
_SUBMIT_LIMIT = ("job submit limit", "maxsubmitjob", "submitjoblimit")
_TRANSIENT = ("timed out", "timeout", "unable to contact", "zero bytes were transmitted", "connection refused",
              "connection reset", "socket", "temporarily unavailable", "try again")


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise Unavailable(f"{argv[0]} is not installed or not on PATH") from None
    except subprocess.TimeoutExpired:
        raise Unavailable(f"{argv[0]} did not answer within {timeout:g}s") from None


def short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def run_query(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a query command (squeue, sacct, scontrol, sacctmgr) with the query timeout; Unavailable when it cannot
    be run or does not answer in time. The caller reads its exit code and output."""
    return _run(argv, env.read(variables.TIMEOUT))


def squeue(job_ids: list[str]) -> list[parse.Row]:
    rows: list[parse.Row] = []
    for start in range(0, len(job_ids), CHUNK):
        chunk = job_ids[start:start + CHUNK]
        proc = _run(["squeue", "--noheader", "--array", "--format=%i|%T|%r", f"--jobs={','.join(chunk)}"],
                    env.read(variables.TIMEOUT))
        if proc.returncode != 0:
            if proc.stderr.strip() == GONE and not proc.stdout.strip():
                continue  # every id of the chunk has left slurmctld's memory
            raise Unavailable(f"squeue failed: {short(proc.stderr) or f'exit {proc.returncode}'}")
        try:
            rows.extend(parse.squeue(proc.stdout, set(chunk)))
        except parse.ParseError as exc:
            raise Unavailable(f"squeue printed something tau cannot read: {exc}") from None
    return rows


def sacct(job_ids: list[str], arrays: set[str]) -> list[parse.Row]:
    rows: list[parse.Row] = []
    for start in range(0, len(job_ids), CHUNK):
        chunk = job_ids[start:start + CHUNK]
        proc = _run(["sacct", "--noheader", "--parsable2", "--allocations", "--duplicates",
                     f"--format={SACCT_FORMAT}", f"--jobs={','.join(chunk)}"], env.read(variables.TIMEOUT))
        if proc.returncode != 0:
            raise Unavailable(f"sacct failed: {short(proc.stderr) or f'exit {proc.returncode}'}")
        try:
            rows.extend(parse.sacct(proc.stdout, arrays, set(chunk)))
        except parse.ParseError as exc:
            raise Unavailable(f"sacct printed something tau cannot read: {exc}") from None
    return rows


def sacct_usage(job_ids: list[str]) -> dict[tuple[str, int | None], dict[str, object]]:
    """What the finished tasks of these jobs used (`parse.usage`), one sacct call per CHUNK jobs; Unavailable when
    sacct cannot be asked or prints what tau cannot read."""
    out: dict[tuple[str, int | None], dict[str, object]] = {}
    for start in range(0, len(job_ids), CHUNK):
        chunk = job_ids[start:start + CHUNK]
        proc = _run(["sacct", "--noheader", "--parsable2", f"--format={parse.USAGE_FORMAT}",
                     f"--jobs={','.join(chunk)}"], env.read(variables.TIMEOUT))
        if proc.returncode != 0:
            raise Unavailable(f"sacct failed: {short(proc.stderr) or f'exit {proc.returncode}'}")
        try:
            out.update(parse.usage(proc.stdout))
        except parse.ParseError as exc:
            raise Unavailable(f"sacct printed something tau cannot read: {exc}") from None
    return out


def scancel(targets: list[str]) -> None:
    """Cancel exactly these jobs or array tasks (`JOB` or `JOB_TASK`, chunked). A job Slurm no longer knows is
    already gone: not an error. Unavailable (69) when scancel cannot be asked or fails otherwise."""
    for start in range(0, len(targets), CHUNK):
        chunk = targets[start:start + CHUNK]
        proc = _run(["scancel", "--quiet", *chunk], env.read(variables.TIMEOUT))
        if proc.returncode != 0 and not _only_gone(proc.stderr):
            raise Unavailable(f"scancel failed: {short(proc.stderr) or f'exit {proc.returncode}'}")


_SCANCEL_GONE = re.compile(r"scancel: error: Kill job error on job id [0-9]{1,10}(?:_[0-9]{1,7})?: "
                           r"Invalid job id specified")


def _only_gone(stderr: str) -> bool:
    """Whether every line scancel printed says exactly that a job it was given is not known any more."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return bool(lines) and all(_SCANCEL_GONE.fullmatch(line) for line in lines)


def sbatch_script(run: Run, rel: str, text: str, pinned: bool = False,
                  resolved_by: str = "tau-submit or tau-retry") -> str:
    """Publish a job script as RUN/rel (immutable, through the run directory's writer) and submit it; the job id.
    With `pinned`, sbatch runs without the caller's SBATCH_* variables, which would override the script's own
    directives (the collection's CPU job asks for no GPU, and nobody's environment may give it one). Raises
    Ambiguous or SubmitRefused as `sbatch` does."""
    run.dir.publish_bytes(rel, text.encode())
    return sbatch(os.path.join(run.path, rel), pinned, resolved_by)


def sbatch(script_path: str, pinned: bool = False, resolved_by: str = "tau-submit or tau-retry") -> str:
    """Submit; return the job id. Raises Ambiguous (its message names `resolved_by`, the command whose next call
    resolves the job by its name) or SubmitRefused."""
    timeout = env.read(variables.SBATCH_TIMEOUT)
    environ = env.current()
    if pinned:
        environ = {k: v for k, v in environ.items() if not k.startswith("SBATCH_")}
    try:
        proc = subprocess.run(["sbatch", "--parsable", script_path], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, env=environ)
    except FileNotFoundError:
        raise SubmitRefused("sbatch is not installed or not on PATH") from None
    except subprocess.TimeoutExpired:
        raise Ambiguous(f"sbatch's outcome is ambiguous: it did not answer within {timeout:g}s and may still have "
                        f"submitted the job; tau resolves it by its exact name on the next {resolved_by}") \
            from None
    if proc.returncode != 0:
        message = short(proc.stderr) or f"exit {proc.returncode}"
        if any(word in proc.stderr.lower() for word in _TRANSIENT):
            raise Ambiguous(f"sbatch's outcome is ambiguous: it failed in a way that may still have submitted the job "
                            f"({message}); tau resolves it by its exact name on the next {resolved_by}")
        if any(word in proc.stderr.lower() for word in _SUBMIT_LIMIT):
            raise SubmitLimited(f"sbatch refused the job for a submit limit: {message}")
        raise SubmitRefused(f"sbatch refused the job: {message}")
    try:
        return parse.sbatch_job_id(proc.stdout)
    except parse.ParseError:
        raise Ambiguous(f"sbatch's outcome is ambiguous: it printed {parse.short_text(proc.stdout.strip())!r}, not a "
                        "job id, and may still have submitted the job; tau resolves it by its exact name on the next "
                        f"{resolved_by}") from None


LOOKUP_SLACK = 60  # seconds before a journal entry was made that a lookup accepts (login node vs slurmctld clocks)


def find_by_name(name: str, uid: int, created: float) -> dict[str, set[int | None]]:
    """Jobs of this user with exactly this name submitted at or after `created` (the epoch time the journal entry
    was made) less LOOKUP_SLACK, from squeue and sacct: job id -> task indices seen. The submit time matters: a job
    name is derived from the run id and the plan, so another run with the same directory name and plan (one removed
    and made again) has jobs of the same name; squeue keeps finished jobs for MinJobAge and sacct's --starttime also
    selects older jobs that ended later. Slurm prints and takes local time."""
    import time

    since_local = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(created - LOOKUP_SLACK))
    found: dict[str, set[int | None]] = {}
    proc = _run(["squeue", "--noheader", "--array", "--states=all", f"--user={uid}", f"--name={name}",
                 "--format=%i|%j|%V"], env.read(variables.TIMEOUT))
    if proc.returncode != 0:
        raise Unavailable(f"squeue failed: {short(proc.stderr) or f'exit {proc.returncode}'}")
    for job, tasks, seen_name, submit in parse.name_rows(proc.stdout, 3):
        if seen_name == name and not parse.submitted_before(submit, since_local):
            found.setdefault(job, set()).update(tasks)
    proc = _run(["sacct", "--noheader", "--parsable2", "--allocations", f"--uid={uid}", f"--name={name}",
                 f"--starttime={since_local}", "--format=JobID,JobName%200,Submit"],
                env.read(variables.TIMEOUT))
    if proc.returncode != 0:
        raise Unavailable(f"sacct failed: {short(proc.stderr) or f'exit {proc.returncode}'}")
    for job, tasks, seen_name, submit in parse.name_rows(proc.stdout, 3):
        if seen_name == name and not parse.submitted_before(submit, since_local):
            found.setdefault(job, set()).update(tasks)
    return found
