"""tau from Python: the commands' library calls as functions and typed values, for programs that live in Python.

    import taulib.api as tau

    run = tau.create("runs/demo", {"records": 800, "shards": 8, "command": ["python3", "client.py"]})
    run.submit()
    status = run.wait(timeout=3600, interval=5)     # drives it (tau-drive): retries within the budget
    print(status.counts, run.logs(3))                # shard-00003's newest attempt, as tau-logs prints it
    dataset = run.collect("runs/demo-dataset")       # dataset.destination, .format, .paths, .records

Each call makes the one library call of the command it is named after (README "From Python"), so the rules, the
records and the documents are the commands' own; a failure raises the typed error of the exit table
(`taulib.errors`, re-exported here: `tau.NotFound`, `tau.Conflict`, ...), whose `code` is the command's exit status
and `message` its message. Importing this package is cheap: everything else is imported by the call that needs it.

  run     create and open a run; Run, whose methods are the commands: submit, status, reconcile, drive, wait,
          retry, cancel, logs, collect
  values  the typed values they return: RunStatus, ShardStatus, Submission, Cancellation, DriveResult, Collection
"""

from __future__ import annotations

from taulib.api.run import Run, Shard, Timeout, create, open
from taulib.api.values import (Cancellation, CollectedFile, Collection, DriveResult, RunStatus, ShardStatus,
                               Submission)
from taulib.errors import (EXIT_CODES, BadInput, Busy, CheckFailed, Conflict, Internal, IOFailure, NotFound,
                           Refused, TauError, Unavailable, UsageError)

__all__ = [
    "create", "open", "Run", "Shard", "Timeout",
    "RunStatus", "ShardStatus", "Submission", "Cancellation", "DriveResult", "Collection", "CollectedFile",
    "TauError", "CheckFailed", "UsageError", "BadInput", "NotFound", "Unavailable", "Internal", "Conflict",
    "IOFailure", "Busy", "Refused", "EXIT_CODES",
]
