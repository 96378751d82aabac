"""Named failpoints at every step of every commit protocol, armed from the environment.

`TAU_FAILPOINTS` holds `name=action` pairs separated by `;` or `,`. Actions:
  crash       SIGKILL this process at that step (a real crash: no clean-up, no atexit)
  error       raise FailpointError there (an I/O failure the caller must handle)
  delay:S     sleep S seconds there (to widen a race window in tests)
  once-crash  crash only if the marker file named by TAU_FAILPOINT_ONCE does not exist yet (then create it)
  crash@N     crash the N-th time this process reaches that step (a later window of one tau-submit, say)

A name may be qualified by the command it fires in: `tau-collect:collect.staged=crash` crashes tau-collect there
but not the tau-attempt processes a local supervisor starts with the same environment; a collection's task K (a
Slurm array task or a local worker process) answers to `tau-collect-task-K:` as well, before `tau-collect:`.
`TAU_FAILPOINT_TRACE` names
a file to which every failpoint reached is appended as one line `COMMAND NAME` (the adversarial suite learns from
it which failpoints each command reaches, then crashes each one).

With the variables unset, `hit` is one dict lookup on an empty dict and one test of an empty string.
The names are listed in `NAMES`, with the protocol each belongs to (tau-run(5) lists them too); tests iterate over
it, so a failpoint that is added must be added there. A renamed failpoint answers to its old name too (`ALIASES`).
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
    "store.publish.renamed",  # where hard links are missing: the temp file renamed to the name
    # taulib.fs.atomic: mutable replace
    "store.replace.temp_written",
    "store.replace.temp_synced",
    "store.replace.renamed",
    # taulib.fs.tree: folders
    "store.mkdir.created",
    # taulib.fs.publish: a staged folder published without renameat2 (reserve, claim, rename, release)
    "publish.reserved",
    "publish.claimed",
    "publish.renamed",
    # taulib.lifecycle.init: plan, the input index (runs over a dataset), the shards folder (and a declared schema),
    # run.json last
    "init.plan_written",
    "init.input_written",
    "init.shards_written",
    # taulib.lifecycle.submission: the journal and the attempts (tau-submit, tau-retry; submit.attempts_published
    # in format-1 runs only: a format-2 run's attempts are given by the status SUBMITTED itself)
    "submit.prepared",
    "submit.handed_off",  # the scheduler has the job (Slurm: sbatch returned) and nothing records it
    "submit.attempts_published",
    "submit.submitted",
    # taulib.lifecycle.attempt: in-allocation side
    "attempt.recorded",  # taulib.rundir.state.record_attempt: a derived attempt's attempt.json, before it changes
    "attempt.running",
    "attempt.input_cut",  # taulib.inputs.cut: the shard's input file and its pieces written, before the client
    "attempt.services_started",  # taulib.lifecycle.allocation: every backend started, before readiness says so
    "attempt.endpoints_published",  # endpoints.json and the ready revision written, before the client starts
    "attempt.cleaned_up",  # every service and process left stopped, before the result
    "attempt.manifest_written",
    "attempt.result_written",
    # taulib.lifecycle.reconcile: evidence, then the sealed-shard index
    "reconcile.applied",
    # taulib.lifecycle.winner: validated, published, then added to the sealed-shard index
    "winner.validated",
    "winner.published",
    # taulib.lifecycle.cancel: the records, then the stopping
    "cancel.recorded",
    # taulib.collect: the journal, the CPU job, the stage, the publication
    "collect.planned",
    "collect.handed_off",  # the collection's CPU job exists and nothing records it
    "collect.task_written",  # a task's partition files written and fsynced, before its record
    "collect.staged",
    "collect.renamed",
    # taulib.bundle.seal: manifest, marker, current pointer
    "seal.manifest_written",
    "seal.marker_written",
    "seal.current_replaced",
    # taulib.bundle.fetch: the stage, the publication
    "fetch.staged",
    "fetch.published",
)


# name -> the old names it answers to as well (armed by scripts and tests written before it was renamed)
ALIASES = {
    "submit.handed_off": ("submit.sbatch_returned",),
    "collect.handed_off": ("collect.sbatch_returned",),
}

_ARMED = env.get("TAU_FAILPOINTS")
_TRACE = env.get("TAU_FAILPOINT_TRACE")
command = "tau"  # the command this process runs (set by `taulib.cli.common.run_command`; "tau-local" for a local
# executor's supervisor)
task: str | None = None  # a further qualifier this process answers to first (`tau-collect-task-K`), or None


_REACHED: dict[str, int] = {}  # how often this process reached each armed `crash@N` failpoint


def hit(name: str) -> None:
    """Run the action armed for `name`, if any."""
    if _TRACE:
        _trace(name)
    if not _ARMED:
        return
    action = _armed(name)
    for old in ALIASES.get(name, ()):
        action = action or _armed(old)
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
    elif action.startswith("crash@"):
        _REACHED[name] = _REACHED.get(name, 0) + 1
        if str(_REACHED[name]) == action.removeprefix("crash@"):
            os.kill(os.getpid(), signal.SIGKILL)
    elif action == "error":
        raise FailpointError(f"failpoint {name!r} injected an error", failpoint=name)
    elif action.startswith("delay:"):
        time.sleep(float(action.split(":", 1)[1]))


def _armed(name: str) -> str | None:
    """The action armed for `name` in this process: for its task first, then its command, then anywhere."""
    return (task is not None and _ARMED.get(f"{task}:{name}")) or _ARMED.get(f"{command}:{name}") \
        or _ARMED.get(name)


def _trace(name: str) -> None:
    fd = os.open(_TRACE, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, f"{command} {name}\n".encode())  # one append: lines of processes never interleave
    finally:
        os.close(fd)
