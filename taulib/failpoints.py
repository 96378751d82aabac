"""Named failpoints at every step of every commit protocol, armed from the environment.

`TAU_FAILPOINTS` holds `name=action` pairs separated by `;` or `,`. Actions:
  crash       SIGKILL this process at that step (a real crash: no clean-up, no atexit)
  error       raise FailpointError there (an I/O failure the caller must handle)
  delay:S     sleep S seconds there (to widen a race window in tests)
  once-crash  crash only if the marker file named by TAU_FAILPOINT_ONCE does not exist yet (then create it)

With the variable unset, `hit` is one dict lookup on an empty dict: nothing measurable.
The names are listed in `NAMES`; tests iterate over it, so a failpoint that is added must be added there.
"""

from __future__ import annotations

import os
import signal
import time

from taulib import env
from taulib.errors import FailpointError

NAMES = (
    # taulib.fs.atomic: immutable publish
    "store.publish.temp_written",
    "store.publish.temp_synced",
    "store.publish.linked",
    "store.publish.temp_removed",
    # taulib.fs.atomic: mutable replace
    "store.replace.temp_written",
    "store.replace.temp_synced",
    "store.replace.renamed",
    # taulib.fs.tree: folders
    "store.mkdir.created",
    # taulib.lifecycle.init
    "init.shards_written",
    # taulib.lifecycle.submission: the journal and the attempts
    "submit.prepared",
    "submit.attempts_published",
    "submit.submitted",
    # taulib.lifecycle.attempt: in-allocation side
    "attempt.running",
    "attempt.result_written",
    "attempt.manifest_written",
    # taulib.lifecycle.winner
    "winner.validated",
    # taulib.collect.collection
    "collect.planned",
    "collect.staged",
    "collect.renamed",
)


_ARMED: dict[str, str] = env.get("TAU_FAILPOINTS")  # type: ignore[assignment]


def hit(name: str) -> None:
    """Run the action armed for `name`, if any."""
    action = _ARMED.get(name)
    if action is None:
        return
    if action == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "once-crash":
        marker = env.get("TAU_FAILPOINT_ONCE")
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "error":
        raise FailpointError(f"failpoint {name!r} injected an error", failpoint=name)
    elif action.startswith("delay:"):
        time.sleep(float(action.split(":", 1)[1]))
