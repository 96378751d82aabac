"""The executors: the one table of them, the roles an engine plays, and one package per executor.

An executor runs the tasks of a submission and says what became of them. A run names its executor in its plan
(`scheduler.profile`) and every attempt names the one that runs it (`scheduler.executor`); lifecycle and collect
ask this module for it (`of`, `of_attempt`, `get`) and never compare executor names (tests/test_structure.py checks
that). Adding an executor is adding a row to `EXECUTORS` and a package `executors/<name>/` whose `executor` module's
`EXECUTOR` plays the roles the row names (CONTRIBUTING.md "Adding an executor"; tests/test_executor_contract.py is
the suite every executor passes).

Reads and writes nothing itself; an executor's package is imported only when a run or an attempt names it, so a
command pays only for the executor it uses. Promises: `get` refuses (BadInput) a name that is not in the table.

  table     the one table: each executor's name, module, optional roles and plan section
  roles     the roles an engine plays (the interface, in engine-neutral words), and what they return
  local/    the embedded local executor (a supervisor process per submission)
  slurm/    one sbatch job array per submission, squeue and sacct, scancel
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from taulib.errors import BadInput, Refused
from taulib.executors.table import DEFAULT, EXECUTORS, HERE, Row
from taulib.executors.roles import (OBSERVED, OPTIONAL, UNLIMITED, Allocation, Capacity, CollectionJobs, Collects,
                                    Executor, Limits, Measured, Observed, Observes, Plans, Queue, Requeue, Resolved,
                                    Starter, Stopped, Stops, Submits, TaskEnd)

__all__ = ["OBSERVED", "OPTIONAL", "UNLIMITED", "Allocation", "Capacity", "CollectionJobs", "Collects", "Executor",
           "Limits", "Measured", "Observed", "Observes", "Plans", "Queue", "Requeue", "Resolved", "Starter", "Stopped",
           "Stops", "Submits", "TaskEnd", "EXECUTORS", "DEFAULT", "HERE", "Row", "get", "of", "of_attempt",
           "identity", "plays", "variables"]

if TYPE_CHECKING:
    from taulib.env import Var
    from taulib.rundir.run import Run


_LOADED: dict[str, Executor] = {}


def get(name: str) -> Executor:
    """The executor of this name (its module imported on first use)."""
    found = _LOADED.get(name)
    if found is None:
        row = EXECUTORS.get(name)
        if row is None:
            raise BadInput(f"executor {name!r} is not one of {', '.join(EXECUTORS)}", executor=name)
        found = _LOADED[name] = importlib.import_module(row.module).EXECUTOR
    return found


def of(run: Run) -> Executor:
    """The run's executor (its plan's `scheduler.profile`)."""
    return get(run.plan["scheduler"]["profile"])


def of_attempt(attempt: dict[str, Any]) -> Executor:
    """The executor that runs an attempt (its `scheduler.executor`)."""
    return get(attempt["scheduler"]["executor"])


def identity(environ: dict[str, str]) -> dict[str, Any]:
    """The scheduler identity this process runs under: the first executor of the table that recognises its
    environment; Refused when none does."""
    for name in EXECUTORS:
        found = get(name).identity(environ)
        if found is not None:
            return found
    raise Refused("not inside an allocation: neither the local executor's nor Slurm's job variables are set; "
                  "tau-attempt run is started by the executor, not by hand")


def variables() -> dict[str, Var[Any]]:
    """Every executor's own variables (`Allocation.variables`) by name: with `taulib.env.VARS`, all tau names."""
    return {var.name: var for name in EXECUTORS for var in get(name).variables}


def plays(name: str, role: str) -> bool:
    """Whether the executor of this name plays this optional role (`roles.OPTIONAL`), as its row says."""
    return role in EXECUTORS[name].roles
