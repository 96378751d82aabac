"""The local executor's own records and locks in a run directory (tau-run(5) lists them). Pure: names only.

  submissions/<id>/local/supervisor.json      the supervisor's pid and process start time
  submissions/<id>/local/task-NNNNN.json .log  per task: running then finished; the task's output
  locks/local-<submission>.lock               held by the submission's supervisor for its lifetime
  locks/local-slot-K.lock local-gpu-K.lock    a live task's place (of max_parallel, run-wide) and its GPUs
"""

from __future__ import annotations


def supervisor_lock(sub: str) -> str:
    """The lock the supervisor of a submission holds for its lifetime."""
    return f"local-{sub}"


def slot(k: int) -> str:
    """The lock of the local executor's K-th place for a live task (of max_parallel, run-wide)."""
    return f"local-slot-{k}"


def gpu(k: int) -> str:
    """The lock of the K-th GPU of scheduler.local.gpus, held by the live task it was given to."""
    return f"local-gpu-{k}"


def task(sub: str, task_index: int) -> str:
    """A task's record: running (pid, start time), then finished (exit code or signal)."""
    return f"submissions/{sub}/local/task-{task_index:05d}.json"


def task_log(sub: str, task_index: int) -> str:
    """A task's output (the allocation's own output file of its attempt)."""
    return f"submissions/{sub}/local/task-{task_index:05d}.log"


def supervisor(sub: str) -> str:
    """The supervisor's record: its pid and process start time."""
    return f"submissions/{sub}/local/supervisor.json"
