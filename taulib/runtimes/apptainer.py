"""apptainer and singularity: `exec` of a SIF file pinned by its sha256, or of `docker://NAME@sha256:...`
(tau-run(5) "Images and runtimes"). Built from their documented flags; not installed on the test machines, so
checked by golden command lines (tests/golden/runtimes/).

    APPTAINERENV_NAME=VALUE ... RUNTIME_COMMAND exec --containall --cleanenv --no-eval RUNTIME_ARGS [--nv]
        --mount type=bind,src=HOST,dst=PATH[,ro] ... [--pwd DIR] IMAGE PROGRAM ARGS...

- `--containall`: no host folder but the mounts, its own PID namespace (apptainer's init passes signals on and
  reaps), a clean environment: the program gets exactly the variables tau names, through APPTAINERENV_NAME
  (SINGULARITYENV_NAME for singularity), never on the command line, and `--no-eval` keeps their values from being
  read as shell;
- `--nv` when GPUs were given: the NVIDIA devices and driver; which ones the program uses is CUDA_VISIBLE_DEVICES,
  as the scheduler set it (its cgroup is what isolates them);
- a `docker://` reference by digest is verified by apptainer as it pulls it; apptainer keeps what it pulled in its
  cache and trusts it later, so a site that wants tau's own check pins a SIF file (`apptainer pull FILE
  docker://NAME@sha256:...` once, then `file` + `sha256`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib.runtimes.base import Command, Launch, Runtime, lookup_argv

if TYPE_CHECKING:
    from taulib.jsonio import Record


class Apptainer(Runtime):
    def __init__(self, name: str, prefix: str) -> None:
        self.name, self.prefix = name, prefix

    def command(self, launch: Launch) -> Command:
        image = launch.image
        argv = [*image["runtime_command"], "exec", "--containall", "--cleanenv", "--no-eval", *image["runtime_args"]]
        if launch.devices:
            argv.append("--nv")
        for mount in launch.mounts:
            argv += ["--mount", f"type=bind,src={mount.host},dst={mount.container}" + ("" if mount.writable else ",ro")]
        if launch.workdir is not None:
            argv += ["--pwd", launch.workdir]
        env = {f"{self.prefix}{name}": value for name, value in launch.env.items()}
        return Command([*argv, launch.target, *launch.argv], env, {})

    def reference(self, image: Record) -> str:
        return f"docker://{image['ref']}"

    def lookup(self, launch: Launch) -> Launch | None:
        return launch._replace(argv=lookup_argv(launch.argv), env={})


RUNTIMES = {"apptainer": Apptainer("apptainer", "APPTAINERENV_"),
            "singularity": Apptainer("singularity", "SINGULARITYENV_")}
