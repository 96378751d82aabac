"""Container runtimes: how a program runs inside an image pinned by digest, through the runtime a plan names
(`image.runtime`; tau-run(5) "Images and runtimes"). A seam like the executors': one table, one module per runtime,
asked only through `get`.

Reads: the image (its file's bytes, or the runtime's word on its digest). Writes nothing; a runtime that runs from
a folder of files (slurm-oci's bundle) hands them to the caller, which writes them into the run.
Promises: nothing runs unless the runtime's word, or the file's own sha256, is the digest the plan pins; a name
outside the table is refused (BadInput).

  table      the one table: each runtime's name, module and program
  base       what a runtime is given (`Launch`) and answers (`Command`, `Checked`), the image file's sha256
  archive    an image archive read in one pass: its sha256 and its image's config digest (the image's id)
  podman     podman run, the image checked by podman image inspect (run for real by the tests)
  apptainer  apptainer (or singularity) exec of a SIF file or docker://...@sha256
  pyxis      enroot through pyxis under Slurm: srun --container-image inside the allocation
  slurm_oci  Slurm's own OCI support: srun --container with a bundle tau writes for the attempt
"""

from __future__ import annotations

import importlib

from taulib.errors import BadInput
from taulib.runtimes.base import Checked, Command, ImageChanged, ImageUnavailable, Launch, Mount, Runtime
from taulib.runtimes.table import RUNTIMES, Row, programs

__all__ = ["Checked", "Command", "ImageChanged", "ImageUnavailable", "Launch", "Mount", "Runtime", "RUNTIMES", "Row",
           "get", "programs"]

_LOADED: dict[str, Runtime] = {}


def get(name: str) -> Runtime:
    """The runtime of this name (its module imported on first use)."""
    found = _LOADED.get(name)
    if found is None:
        row = RUNTIMES.get(name)
        if row is None:
            raise BadInput(f"runtime {name!r} is not one of {', '.join(RUNTIMES)}", runtime=name)
        found = _LOADED[name] = importlib.import_module(row.module).RUNTIMES[name]
    return found
