"""Names of everything inside a run directory (documented in tau-run(5)). Pure: it reads and writes nothing.

RUN/
  run.json  plan.json                              run.json is published last by tau-init: its presence = the run exists
  cancel.json  schema.json                         the run's cancellation (tau-cancel), its output schema (first winner)
  input.json                                       the input index of a run over a dataset (tau-run(5) "Input")
  locks/{run,submit,collect,index,shard-NNNNN,resume-shard-NNNNN}.lock
  locks/...                                        an executor's own locks (executors/<name>/records.py)
  index/sealed-KKKK.json                           the sealed-shard index in segments (a cache of winners, rundir.index)
  index/sealed.json                                the whole-run index of earlier versions (read, never written)
  shards/shard-NNNNN/                              made by the first record about the shard (its range: from the plan)
    shard.json  winner.json  cancel.json  dataset/ (shard.json only in runs made by earlier versions; dataset/ only
                                                    for resume "always")
    attempts/attempt-NNNN/
      attempt.json readiness.json observation.json result.json manifest.json client.log progress dataset/
      endpoints.json services/NAME-K.log           (runs with services: the endpoints, each backend's output)
      input.{parquet,jsonl,csv} input-pieces.json  (runs over a dataset: the shard's rows, the pieces they came from)
  submissions/submission-NNNN/
    plan.json status.json usage.json
    ...                                            the executor's own records (executors/<name>/: under Slurm job.sh
                                                   and slurm-JOB_TASK.out; the local executor's local/)
  collections/collection-NNNN/plan.json status.json task-NNNNN.json (a task done: its files in the stage)
    job.sh job-rK.sh slurm-JOB_TASK.out            (Slurm only: the array of its tasks, and the K-th rerun's)
"""

from __future__ import annotations

RUN = "run.json"
PLAN = "plan.json"
CANCEL = "cancel.json"
SCHEMA = "schema.json"
INPUT = "input.json"  # the input index of a run over a dataset (inputs.index), published before run.json
DEFERRAL = "submissions/deferral.json"  # the shards the last submission left for a later one, and why
DRIVE = "drive/state.json"  # tau-drive's cycles and what its notifications last told (under drive.lock)
SHARDS = "shards"
ENDPOINTS = "endpoints.json"  # in an attempt's folder: its services' published endpoints (tau.endpoints)
SEALED_LEGACY = "index/sealed.json"


def sealed_segment(k: int) -> str:
    return f"index/sealed-{k:04d}.json"


def shard_id(index: int) -> str:
    return f"shard-{index:05d}"


def shard_index(sid: str) -> int:
    return int(sid.split("-", 1)[1])


def canonical_shard_id(name: str) -> str:
    """The shard a person named, as its canonical id: a number (`7`, `007`) or an id with any count of digits
    (`shard-7`, `shard-00007`) is `shard-00007`. Anything else (`-1`, `seven`, `shard-x`, ` 7`) is returned as it
    was given, for `Run.check_shard` to refuse with its not-found error, as it refuses a number beyond the run."""
    digits = name.removeprefix("shard-")
    if digits and len(digits) <= 12 and digits.isascii() and digits.isdigit():
        return shard_id(int(digits))
    return name  # too many digits for any shard: refused as not found, never converted


def attempt_id(ordinal: int) -> str:
    return f"attempt-{ordinal:04d}"


def is_attempt_id(name: str) -> bool:
    """Whether `name` is an attempt's id as tau writes it (`attempt_id` of an ordinal from 1: at least four digits,
    no extra leading zero, at most nine)."""
    digits = name[8:]
    return (12 <= len(name) <= 17 and name.startswith("attempt-") and digits.isascii() and digits.isdigit()
            and int(digits) >= 1 and name == attempt_id(int(digits)))


def attempt_ordinal(aid: str) -> int:
    return int(aid.split("-", 1)[1])


def submission_id(number: int) -> str:
    return f"submission-{number:04d}"


def collection_id(number: int) -> str:
    return f"collection-{number:04d}"


def shard_record(sid: str) -> str:
    return f"shards/{sid}/shard.json"


def winner(sid: str) -> str:
    return f"shards/{sid}/winner.json"


def shard_cancel(sid: str) -> str:
    return f"shards/{sid}/cancel.json"


def cancel_record(sid: str | None, generation: int = 1) -> str:
    """The `generation`th cancellation of the run (sid None) or of a shard: cancel.json, then cancel-2.json, ...
    (a cancellation lifted by its reopen record may be followed by another)."""
    name = "cancel.json" if generation == 1 else f"cancel-{generation}.json"
    return name if sid is None else f"shards/{sid}/{name}"


def reopen_record(sid: str | None, generation: int = 1) -> str:
    """The record that lifts the `generation`th cancellation of the run (sid None) or of a shard."""
    name = "reopen.json" if generation == 1 else f"reopen-{generation}.json"
    return name if sid is None else f"shards/{sid}/{name}"


def attempt_stop(sid: str, aid: str) -> str:
    """The request to stop one attempt without cancelling its shard (tau-cancel --attempt, or a stall)."""
    return attempt_file(sid, aid, "stop.json")


def shard_dataset(sid: str) -> str:
    return f"shards/{sid}/dataset"


def attempts_dir(sid: str) -> str:
    return f"shards/{sid}/attempts"


def service_log(sid: str, aid: str, name: str, backend: int) -> str:
    """The output of backend `backend` (1, 2, ...) of service `name` in an attempt."""
    return attempt_file(sid, aid, f"services/{name}-{backend}.log")




def attempt_file(sid: str, aid: str, name: str) -> str:
    return f"shards/{sid}/attempts/{aid}/{name}"


def usage(sub: str) -> str:
    """What the finished tasks of a submission used (tau.usage, written by tau-reconcile)."""
    return f"submissions/{sub}/usage.json"
