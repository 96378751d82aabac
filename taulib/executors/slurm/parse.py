"""Strict parsers of Slurm's text output (22.05 and later), one function per format, and the state map.

squeue  `squeue --noheader --array --format=%i|%T|%r --jobs=...`
        rows `JOB_TASK|STATE|REASON`; an array not yet split prints `JOB_[1,3-5%2]|PENDING|...`, expanded here;
        a plain job prints `JOB|STATE|REASON` (task None).
sacct   `sacct --noheader --parsable2 --allocations --duplicates
         --format=JobID,JobIDRaw,JobName%200,State,ExitCode,Submit,Start,End --jobs=...`
        rows `JOB_TASK|RAW|NAME|STATE|EXIT:SIGNAL|SUBMIT|START|END`. With --duplicates a requeued or preempted task
        has several rows (REQUEUED/PREEMPTED first); the newest (latest Submit, then Start, then row order) is its
        state, and the earlier rows that a run of it left when it was requeued (REQUEUED, PREEMPTED, NODE_FAIL: the
        states in RESTARTED) count its restarts; any other earlier row of the task, such as the unsplit pending
        rest of its array (`123_[2-5]`), is no run of it and counts nothing. Placeholder rows written during
        accounting lag (JobName `allocation`, or an array job's id without `_task`) are recognised and dropped:
        that task is simply not in accounting yet. Step rows (`123_4.batch`) never appear with --allocations and
        are refused if they do.
usage   `sacct --noheader --parsable2 --format=JobID,State,Start,Elapsed,TotalCPU,MaxRSS,AllocCPUS,ReqMem,
         AllocTRES,Timelimit,NNodes --jobs=...` (no --allocations, no --duplicates: each task's latest run and its
        steps) rows `JOB_TASK[.STEP]|STATE|START|ELAPSED|TOTALCPU|MAXRSS|CPUS|REQMEM|TRES|TIMELIMIT|NODES`: what
        a finished task used (`usage`). A task's figures are final once its allocation row is terminal and its
        batch step is too (or it never started); until then it is left out, never read as zero.
sbatch  `sbatch --parsable` prints `JOBID` or `JOBID;CLUSTER`.
States: the long names map to tau's vocabulary; a trailing `+` is dropped, `CANCELLED by <uid>` (digits) is
CANCELLED; any other spelling maps to `unknown` and is never guessed. `sacct --json` is never used: its exit codes
are wrong in 22.05.
Numbers are bounded before they are converted: a job id is 1 to 4294967295 (Slurm's 32-bit ids), written without
leading zeros; an array task index 0 to 4000000 (MaxArraySize is at most 4000001); an exit code and a signal 0 to
255; durations, sizes and counts a few digits. Anything else is a ParseError, never an integer conversion that
fails or a number that takes memory to build.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

STATE_MAP = {
    "BOOT_FAIL": "failed", "DEADLINE": "failed", "FAILED": "failed", "REVOKED": "failed", "SPECIAL_EXIT": "failed",
    "CANCELLED": "cancelled",
    "COMPLETED": "completed",
    "COMPLETING": "running", "RESIZING": "running", "RUNNING": "running", "SIGNALING": "running",
    "STAGE_OUT": "running", "STOPPED": "running", "SUSPENDED": "running",
    "CONFIGURING": "pending", "PENDING": "pending", "REQUEUE_FED": "pending", "REQUEUE_HOLD": "pending",
    "RESV_DEL_HOLD": "pending",
    "NODE_FAIL": "node_failed",
    "OUT_OF_MEMORY": "out_of_memory",
    "PREEMPTED": "preempted",
    "REQUEUED": "requeued",
    "TIMEOUT": "timed_out",
}
RESTARTED = frozenset({"requeued", "preempted", "node_failed"})  # what a run that was requeued leaves in accounting

JOB_ID_MAX = 4_294_967_295  # Slurm's job ids are 32-bit (a federation's carry the cluster's id in the high bits)
TASK_MAX = 4_000_000  # the largest array task index: MaxArraySize is at most 4000001
_JOB_ID = r"[1-9][0-9]{0,9}"
_TASK = r"0|[1-9][0-9]{0,6}"
_JOB = re.compile(rf"^(?P<job>{_JOB_ID})(?:_(?P<task>{_TASK})|_\[(?P<spec>[0-9,\-%]+)\])?\Z")
_SPEC_PART = re.compile(rf"^(?P<lo>{_TASK})(?:-(?P<hi>{_TASK}))?\Z")
_THROTTLE = re.compile(r"^[0-9]{1,7}\Z")
_EXIT = re.compile(r"^(0|[1-9][0-9]{0,2}):(0|[1-9][0-9]{0,2})\Z")
_CANCELLED_BY = re.compile(r"^CANCELLED by [0-9]{1,10}\Z")


class ParseError(ValueError):
    """Output that does not have the documented shape: never guessed around."""


class Row(NamedTuple):
    job_id: str
    task: int | None
    state: str  # tau's vocabulary
    raw: str  # Slurm's spelling
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    submit: str = ""
    start: str = ""
    name: str = ""


def normalise_state(raw: str) -> str:
    text = raw.strip()
    if text.endswith("+"):
        text = text[:-1]
    if _CANCELLED_BY.match(text):
        return "cancelled"
    return STATE_MAP.get(text, "unknown")


def _task(text: str) -> int:
    value = int(text)  # the pattern bounds its length
    if value > TASK_MAX:
        raise ParseError(f"array task index {text!r} is beyond Slurm's largest ({TASK_MAX})")
    return value


def job_id(text: str) -> str:
    """A Slurm job id as sbatch, squeue and sacct print it (1 to JOB_ID_MAX, no leading zeros); ParseError else."""
    if not re.fullmatch(_JOB_ID, text) or int(text) > JOB_ID_MAX:
        raise ParseError(f"unexpected job id {short_text(text)!r}")
    return text


def task_index(text: str) -> int:
    """An array task index as Slurm prints it (0 to TASK_MAX, no leading zeros); ParseError else."""
    if not re.fullmatch(_TASK, text):
        raise ParseError(f"unexpected array task index {short_text(text)!r}")
    return _task(text)


def short_text(text: str, limit: int = 60) -> str:
    """`text` cut to `limit` characters for a message (a 5,000-digit number is named, not quoted whole)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def expand_array_spec(spec: str) -> list[int]:
    """`1,3-5%2` -> [1, 3, 4, 5] (the `%N` throttle is dropped). Every index is bounded by TASK_MAX and none may
    repeat, so the list never holds more than TASK_MAX + 1 indices."""
    spec, sep, throttle = spec.partition("%")
    if sep and not _THROTTLE.match(throttle):
        raise ParseError(f"bad array throttle {short_text(throttle)!r}")
    out: list[int] = []
    last_seen = -1
    for part in spec.split(","):
        match = _SPEC_PART.match(part)
        if match is None:
            raise ParseError(f"bad array spec element {short_text(part)!r}")
        first = _task(match["lo"])
        last = _task(match["hi"]) if match["hi"] is not None else first
        if last < first or first <= last_seen:
            raise ParseError(f"bad array range {part!r} (ranges ascend and never overlap)")
        out.extend(range(first, last + 1))
        last_seen = last
    return out


def compress_indices(indices: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> `0-2,5,7-8` (sorted, no duplicates); an empty list is refused, because an empty
    `--array=` silently submits a job that is not an array."""
    values = sorted(set(indices))
    if not values:
        raise ValueError("an array needs at least one task index")
    parts, start, prev = [], values[0], values[0]
    following: list[int | None] = [*values[1:], None]
    for value in following:
        if value is not None and value == prev + 1:
            prev = value
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if value is not None:
            start = prev = value
    return ",".join(parts)


def job_fields(text: str) -> tuple[str, list[int | None]]:
    match = _JOB.match(text)
    if match is None or int(match["job"]) > JOB_ID_MAX:
        raise ParseError(f"unexpected job id {short_text(text)!r}")
    if match["spec"] is not None:
        return match["job"], list(expand_array_spec(match["spec"]))
    if match["task"] is not None:
        return match["job"], [_task(match["task"])]
    return match["job"], [None]


def split_rows(text: str, count: int, what: str) -> Iterator[tuple[list[str], str]]:
    """(fields, line) of every non-blank line of `|`-separated output, each with exactly `count` fields."""
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != count:
            raise ParseError(f"{what} has {len(fields)} fields, expected {count}: {short_text(line, 200)!r}")
        yield fields, line


def _asked(job: str, asked: set[str] | None, what: str) -> None:
    if asked is not None and job not in asked:
        raise ParseError(f"{what} printed a row of job {job}, which tau did not ask about")


def task_label(key: tuple[str, int | None]) -> str:
    return key[0] if key[1] is None else f"{key[0]}_{key[1]}"


def squeue(text: str, asked: set[str] | None = None) -> list[Row]:
    """Every row, an unsplit array's expanded; with `asked` (the job ids of the query), a row of any other job is a
    ParseError: squeue answered another question than the one asked."""
    rows = []
    for fields, _line in split_rows(text, 3, "squeue row"):
        job, tasks = job_fields(fields[0].strip())
        _asked(job, asked, "squeue")
        raw = fields[1].strip()
        for task in tasks:
            rows.append(Row(job, task, normalise_state(raw), raw, reason=fields[2].strip() or None))
    return rows


def _exit(text: str) -> tuple[int | None, int | None]:
    match = _EXIT.match(text)
    if match is None or int(match[1]) > 255 or int(match[2]) > 255:
        raise ParseError(f"unexpected ExitCode {short_text(text)!r}")
    return int(match[1]), int(match[2])


def sacct(text: str, arrays: set[str] | None = None, asked: set[str] | None = None) -> list[Row]:
    """All allocation rows, placeholders dropped. `arrays` are job ids known to be arrays (their id without a task
    is a placeholder); with `asked`, a row of a job not asked about is a ParseError."""
    arrays = arrays or set()
    rows = []
    for fields, line in split_rows(text, 8, "sacct row"):
        jobid, _raw_id, name, state, exit_text, submit, start, _end = (f.strip() for f in fields)
        if "." in jobid:
            raise ParseError(f"unexpected step row {short_text(line, 200)!r} (sacct must run with --allocations)")
        job, tasks = job_fields(jobid)
        _asked(job, asked, "sacct")
        if name == "allocation" or (tasks == [None] and job in arrays):
            continue  # accounting-lag placeholder: this task is not in accounting yet
        code, sig = _exit(exit_text)
        for task in tasks:
            rows.append(Row(job, task, normalise_state(state), state, code, sig, None, submit, start, name))
    return rows


def queue_by_task(rows: list[Row]) -> tuple[dict[tuple[str, int | None], Row], dict[tuple[str, int | None], str]]:
    """({(job, task): its one queue row}, {(job, task): why its rows cannot be read}). squeue prints one row per
    task: a task with two rows, or with a state tau does not know, is that task's problem alone (its source is
    unavailable for it, with the reason); the other tasks keep their rows."""
    grouped: dict[tuple[str, int | None], list[Row]] = {}
    for row in rows:
        grouped.setdefault((row.job_id, row.task), []).append(row)
    found, problems = {}, {}
    for key, items in grouped.items():
        if len(items) > 1:
            problems[key] = f"squeue printed {len(items)} rows for {task_label(key)}, where it prints one per task"
        elif items[0].state == "unknown":
            problems[key] = (f"squeue reports state {short_text(items[0].raw)!r} for {task_label(key)}, which tau "
                             "does not know")
        else:
            found[key] = items[0]
    return found, problems


def accounting_by_task(rows: list[Row]) -> tuple[dict[tuple[str, int | None], tuple[Row, int]],
                                                 dict[tuple[str, int | None], str]]:
    """(`latest_by_task` of the tasks whose rows tau can read, {(job, task): why not}): a task with a row in a state
    tau does not know is that task's problem alone."""
    problems: dict[tuple[str, int | None], str] = {}
    for row in rows:
        if row.state == "unknown":
            problems[(row.job_id, row.task)] = (f"sacct reports state {short_text(row.raw)!r} for "
                                                f"{task_label((row.job_id, row.task))}, which tau does not know")
    readable = [row for row in rows if (row.job_id, row.task) not in problems]
    return latest_by_task(readable), problems


def latest_by_task(rows: list[Row]) -> dict[tuple[str, int | None], tuple[Row, int]]:
    """Per (job, task): its newest row and its restarts, how many earlier rows are runs of it that were requeued
    (a state in RESTARTED); an earlier row in any other state (its array's pending rest) is not a restart."""
    grouped: dict[tuple[str, int | None], list[tuple[int, Row]]] = {}
    for order, row in enumerate(rows):
        grouped.setdefault((row.job_id, row.task), []).append((order, row))
    out = {}
    for key, items in grouped.items():
        items.sort(key=lambda item: (item[1].submit, item[1].start if item[1].start not in ("None", "Unknown")
                                     else "", item[0]))
        out[key] = (items[-1][1], sum(1 for _, row in items[:-1] if row.state in RESTARTED))
    return out


def sbatch_job_id(stdout: str) -> str:
    """The job id `sbatch --parsable` printed (`JOBID` or `JOBID;CLUSTER`); ParseError for anything else, a job id
    of 0 or beyond JOB_ID_MAX included."""
    text = stdout.strip()
    match = re.match(rf"^({_JOB_ID})(?:;[A-Za-z0-9_.-]{{1,128}})?\Z", text)
    if match is None or int(match.group(1)) > JOB_ID_MAX:
        raise ParseError(f"unexpected sbatch --parsable output {short_text(text)!r}")
    return match.group(1)


def name_rows(text: str, fields: int) -> list[tuple[str, list[int | None], str, str]]:
    """Rows of `JOBID|NAME[|SUBMIT]` (squeue %i|%j|%V, or sacct JobID,JobName,Submit) for exact-name recovery:
    (job, tasks, name, submit time or "")."""
    out = []
    for parts, _line in split_rows(text, fields, "row"):
        jobid = parts[0].strip()
        if "." in jobid:
            continue
        job, tasks = job_fields(jobid)
        out.append((job, tasks, parts[1].strip(), parts[2].strip() if fields > 2 else ""))
    return out


_LOCAL_TIME = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\Z")


def submitted_before(submit: str, since_local: str) -> bool:
    """True only when `submit` is a Slurm local time (YYYY-MM-DDTHH:MM:SS) earlier than `since_local` (same
    format). Anything else is not ruled out: a row is never dropped on a guess."""
    return bool(_LOCAL_TIME.match(submit)) and submit < since_local


USAGE_FORMAT = "JobID,State,Start,Elapsed,TotalCPU,MaxRSS,AllocCPUS,ReqMem,AllocTRES,Timelimit,NNodes"
_CLOCK = re.compile(r"^(?:([0-9]{1,6})-)?(?:([0-9]{1,6}):)?([0-9]{1,6}):([0-9]{1,6})(?:\.([0-9]{1,9}))?\Z")
_SIZE = re.compile(r"^([0-9]{1,18}(?:\.[0-9]{1,9})?)([KMGTP]?)([nc]?)\Z")
_COUNT = re.compile(r"^[0-9]{1,9}\Z")
_BYTES = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4, "P": 1024 ** 5}
_FINAL = {"completed", "failed", "cancelled", "timed_out", "node_failed", "out_of_memory"}


def clock_seconds(text: str) -> float:
    """sacct's Elapsed, TotalCPU or Timelimit (`[D-][HH:]MM:SS[.mmm]`) in seconds."""
    match = _CLOCK.match(text)
    if match is None:
        raise ParseError(f"unexpected duration {short_text(text)!r}")
    days, hours, minutes, seconds, fraction = match.groups()
    return (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds)
            + (int(fraction) / 10 ** len(fraction) if fraction else 0.0))


def size_bytes(text: str) -> tuple[int, str]:
    """sacct's MaxRSS or ReqMem (`1234K`, `1.50G`, `4000Mn`, `500Mc`, `0`) in bytes, with its per-node or per-CPU
    suffix (n, c or "")."""
    match = _SIZE.match(text)
    if match is None:
        raise ParseError(f"unexpected size {short_text(text)!r}")
    return round(float(match[1]) * _BYTES[match[2]]), match[3]


def gpus(tres: str) -> int:
    """The GPUs an AllocTRES string (`cpu=2,mem=4G,node=1,gres/gpu=2`) holds (typed ones summed when the untyped
    total is absent)."""
    total, typed = None, 0
    for item in filter(None, tres.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ParseError(f"unexpected TRES {item!r}")
        if key == "gres/gpu" or key.startswith("gres/gpu:"):
            if not _COUNT.match(value):
                raise ParseError(f"unexpected GPU count {short_text(item)!r}")
            if key == "gres/gpu":
                total = int(value)
            else:
                typed += int(value)
    return total if total is not None else typed


def usage(text: str) -> dict[tuple[str, int | None], dict[str, object]]:
    """{(job, task): figures} of the tasks whose figures are final: `state` (Slurm's), `elapsed_seconds`,
    `cpu_seconds` (TotalCPU of the allocation: its steps' user and system time), `max_rss_bytes` (the batch
    step's MaxRSS; None when it never started), `cpus`, `gpus`, `mem_requested_bytes` (None when none was asked:
    `0`), `time_limit_seconds` (None when unlimited)."""
    allocations: dict[tuple[str, int | None], list[str]] = {}
    batch: dict[tuple[str, int | None], list[str]] = {}
    for raw, _line in split_rows(text, 11, "sacct usage row"):
        fields = [f.strip() for f in raw]
        jobid, _, step_name = fields[0].partition(".")
        job, tasks = job_fields(jobid)
        for task in tasks:  # an array's remainder (`123_[5-9]`) that never ran, as one row for all of its tasks
            if not step_name:
                allocations[(job, task)] = fields
            elif step_name == "batch" and len(tasks) == 1:
                batch[(job, task)] = fields
    out: dict[tuple[str, int | None], dict[str, object]] = {}
    for key, fields in allocations.items():  # every field is read strictly, whether the task is final or not
        _, state, start, elapsed, total_cpu, _rss, cpus, req_mem, tres, limit, nodes = fields
        if not _COUNT.match(cpus) or not _COUNT.match(nodes):
            raise ParseError(f"unexpected AllocCPUS or NNodes {short_text(cpus)!r}, {short_text(nodes)!r}")
        requested: int | None = None
        if req_mem not in ("", "0"):
            amount, per = size_bytes(req_mem)
            requested = amount * (int(cpus) if per == "c" else int(nodes) if per == "n" else 1)
        step = batch.get(key)
        rss = step[5] if step is not None else ""
        figures = {
            "state": state, "elapsed_seconds": clock_seconds(elapsed),
            "cpu_seconds": clock_seconds(total_cpu) if total_cpu else 0.0,
            "max_rss_bytes": size_bytes(rss)[0] if rss else None,
            "cpus": int(cpus), "gpus": gpus(tres), "mem_requested_bytes": requested or None,
            "time_limit_seconds": None if limit in ("UNLIMITED", "Partition_Limit", "") else clock_seconds(limit)}
        if normalise_state(state) not in _FINAL:
            continue
        if start not in ("None", "Unknown", "") and (step is None or normalise_state(step[1]) not in _FINAL):
            continue  # it ran, and its batch step's figures are not in accounting yet
        out[key] = figures
    return out
