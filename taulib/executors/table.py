"""The one table of executors: each one's name, module, optional roles and plan section (CONTRIBUTING.md "Adding an
executor"). Pure data: it imports nothing of tau, so that `taulib.schema` can name the table's executors in the
schemas without importing the executors' interface (`taulib.executors` re-exports it and asks it).
"""

from __future__ import annotations

from typing import Any


class Row:
    """An executor of the table: the module whose `EXECUTOR` it is, the optional roles it plays (`roles.OPTIONAL`),
    and the JSON Schema of its plan section where share/schemas does not hold it (`taulib.schema` adds it to the
    plan's `scheduler`; the default takes any object, which the executor's `check_section` then checks). A plain
    class: every command imports the table, and a NamedTuple costs 0.1 ms to make."""
    __slots__ = ("module", "roles", "section")

    def __init__(self, module: str, roles: frozenset[str], section: dict[str, Any] | None = None) -> None:
        self.module, self.roles = module, roles
        self.section = section if section is not None else {"type": "object"}


# name -> its row; the order is the order in which `identity` asks them (the local executor first: a local task
# may run inside a Slurm allocation, and is then the local executor's)
EXECUTORS: dict[str, Row] = {
    "local": Row("taulib.executors.local.executor", frozenset({"starter"})),
    "slurm": Row("taulib.executors.slurm.executor", frozenset({"queue", "requeue", "collects"})),
}
DEFAULT = "local"  # the executor of a plan that names none
HERE = "local"  # the executor that runs tasks on this machine: what needs no compute node (an adoption's copies)
