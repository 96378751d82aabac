"""The one table of container runtimes: each one's name, as a plan's `image.runtime` spells it, its module and its
program (tau-run(5) "Images and runtimes"). Pure data: it imports nothing of tau, so that `taulib.schema` can name
the runtimes in the schemas and tau-init can default a runtime's command without importing any runtime.
"""

from __future__ import annotations


class Row:
    """A runtime of the table: the module whose `RUNTIMES[name]` it is, the program its command runs by default
    (the plan's `image.runtime_command` replaces it, with any global options), and whether this test suite runs it
    for real (the others are checked by golden command lines: tests/golden/runtimes/)."""
    __slots__ = ("module", "program", "exercised")

    def __init__(self, module: str, program: str, exercised: bool = False) -> None:
        self.module, self.program, self.exercised = module, program, exercised


RUNTIMES: dict[str, Row] = {
    "podman": Row("taulib.runtimes.podman", "podman", exercised=True),
    "apptainer": Row("taulib.runtimes.apptainer", "apptainer"),
    "singularity": Row("taulib.runtimes.apptainer", "singularity"),
    "enroot": Row("taulib.runtimes.pyxis", "srun"),
    "slurm-oci": Row("taulib.runtimes.slurm_oci", "srun"),
}


def programs() -> dict[str, str]:
    """Each runtime's default program, by name (what `rules.image.resolve` is given)."""
    return {name: row.program for name, row in RUNTIMES.items()}
