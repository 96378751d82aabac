"""enroot through pyxis under Slurm: `srun --container-image=...` inside the allocation (tau-run(5) "Images and
runtimes", tau-slurm(7) "Containers"). Built from pyxis's documented flags; not installed on the test machines, so
checked by golden command lines (tests/golden/runtimes/).

    RUNTIME_COMMAND --ntasks=1 --nodes=1 --container-image=IMAGE --container-mounts=HOST:PATH[:ro],...
        --container-env=NAME,... --no-container-mount-home --no-container-remap-root --no-container-entrypoint
        [--container-workdir=DIR] RUNTIME_ARGS PROGRAM ARGS...

- a reference is given in enroot's own form, by digest: `REGISTRY#PATH:sha256:<hex>` (enroot 3.x and 4.x read it
  alike; enroot checks every blob it downloads against its digest); a squashfs file (`enroot import` once) is pinned
  by its sha256, which tau checks, and given by its path;
- the step's environment reaches the program; `--container-env` names every variable tau sets, so that the image's
  own values never override them; the values are never on the command line;
- no home folder, no root remapping, no entrypoint: only what the plan mounts, run as the user; an unnamed
  container, removed when the step ends (a named one would be reused, defeating the pin);
- the program is an ordinary process of the Slurm step (no PID namespace), which Slurm signals and kills itself.
GPUs are the step's (`--gpus` or `--gres` in `image.runtime_args` when the site wants them named).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib.rules import image as image_rules
from taulib.runtimes.base import Command, Launch, Runtime

if TYPE_CHECKING:
    from taulib.jsonio import Record


class Pyxis(Runtime):
    name = "enroot"

    def command(self, launch: Launch) -> Command:
        image = launch.image
        argv = [*image["runtime_command"], "--ntasks=1", "--nodes=1", f"--container-image={launch.target}"]
        if launch.mounts:
            argv.append("--container-mounts=" + ",".join(
                f"{m.host}:{m.container}" + ("" if m.writable else ":ro") for m in launch.mounts))
        if launch.env:
            argv.append("--container-env=" + ",".join(sorted(launch.env)))
        argv += ["--no-container-mount-home", "--no-container-remap-root", "--no-container-entrypoint"]
        if launch.workdir is not None:
            argv.append(f"--container-workdir={launch.workdir}")
        return Command([*argv, *image["runtime_args"], *launch.argv], dict(launch.env), {})

    def reference(self, image: Record) -> str:
        ref = image_rules.parse(image["ref"])
        return (ref.path if ref.registry is None else f"{ref.registry}#{ref.path}") + ":" + ref.digest


RUNTIMES = {"enroot": Pyxis()}
