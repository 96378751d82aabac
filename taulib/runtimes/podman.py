"""podman: `podman run` of an image pinned by digest (tau-run(5) "Images and runtimes"). The runtime the test suite
runs for real.

    RUNTIME_COMMAND run --rm --replace --pull=never --name NAME --network=host --init --http-proxy=false
        RUNTIME_ARGS --mount type=bind,src=HOST,dst=PATH[,ro=true] ... --env NAME ... [--workdir DIR]
        [--device nvidia.com/gpu=ID ...] IMAGE PROGRAM ARGS...

- the image is run by digest (`NAME@sha256:...`), or by the id of the image a file held (its config's digest, read
  from the archive's bytes as they are hashed: `archive`; `podman load` only when podman does not hold it yet),
  never by a tag, with `--pull=never`: `check` made sure first that podman holds that digest (`podman image inspect
  NAME@sha256:...` answers only then), pulling it by digest when it did not (a pull by digest is verified by
  podman);
- host network; the environment by name (`--env NAME`: podman copies the value from its own environment, so no
  value is on the command line), and nothing else: `--http-proxy=false` keeps the host's proxy variables out;
- `--init`: a small init is the container's first process, passes signals on and reaps; podman passes the
  signals it gets to the container (`--sig-proxy`, on by default);
- GPUs as CDI devices (`nvidia.com/gpu=ID`), the ids the scheduler gave; only those are inside, so the device
  variables (CUDA_VISIBLE_DEVICES and its kin) are renumbered from 0 there;
- a name per attempt and program, with `--replace`: a container a killed run left behind is replaced, and `cleanup`
  stops and removes it at once (`podman rm --force --time 0`: its grace was the stop signal's, or the cancel's).
Site flags (`image.runtime_args`, e.g. `--ulimit`, `--userns=keep-id`, `--security-opt label=disable`) go right
after `run`; global options (`--runtime`, `--cgroup-manager=cgroupfs`) in `image.runtime_command`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from taulib.rules.services import DEVICE_VARIABLES
from taulib.runtimes import archive
from taulib.runtimes.base import (Checked, Command, ImageChanged, ImageUnavailable, Launch, Runtime, changed,
                                  describe, lookup_argv, query)

if TYPE_CHECKING:
    from taulib.jsonio import Record


class Podman(Runtime):
    name = "podman"

    def command(self, launch: Launch) -> Command:
        image = launch.image
        argv = [*image["runtime_command"], "run", "--rm", "--replace", "--pull=never", "--name", launch.name,
                "--network=host", "--init", "--http-proxy=false", *image["runtime_args"]]
        for mount in launch.mounts:
            argv += ["--mount", f"type=bind,src={mount.host},dst={mount.container}"
                     + ("" if mount.writable else ",ro=true")]
        env = dict(launch.env)
        if launch.devices:  # only the devices given are inside, numbered from 0 there
            inside = ",".join(str(number) for number in range(len(launch.devices)))
            env.update({name: inside for name in DEVICE_VARIABLES if name in env})
        for name in sorted(env):
            argv += ["--env", name]
        if launch.workdir is not None:
            argv += ["--workdir", launch.workdir]
        for device in launch.devices:
            argv += ["--device", f"nvidia.com/gpu={device}"]
        return Command([*argv, launch.target, *launch.argv], env, {})

    def check(self, image: Record, environ: dict[str, str]) -> Checked:
        base = image["runtime_command"]
        if image["file"] is not None:
            return self._file(image, environ)
        ref = self.reference(image)
        code, said = query([*base, "image", "inspect", "--format", "{{json .RepoDigests}}", ref], environ)
        if code != 0:
            pulled, why = query([*base, "pull", "--quiet", ref], environ)
            if pulled != 0:
                raise ImageUnavailable(f"podman holds no image {ref} and could not pull it by digest: {why[-400:]}")
            code, said = query([*base, "image", "inspect", "--format", "{{json .RepoDigests}}", ref], environ)
            if code != 0:
                raise ImageUnavailable(f"podman image inspect {ref} failed after its pull: {said[-400:]}")
        try:
            digests = {entry.rpartition("@")[2] for entry in json.loads(said.splitlines()[0])}
        except (ValueError, IndexError, AttributeError):
            raise ImageUnavailable(f"podman image inspect {ref} answered {said[:200]!r}, not a list of digests") \
                from None
        if image["digest"] not in digests:
            raise ImageChanged(f"image changed: podman's image {ref} has the digests {', '.join(sorted(digests))}, "
                               f"not {image['digest']}, which the run pins")
        return Checked(ref, image["digest"], "podman image inspect")

    def _file(self, image: Record, environ: dict[str, str]) -> Checked:
        """An image archive: hashed against its pin and read for its image's id in one pass (`archive`); run by that
        id, loaded first only when podman does not hold it yet."""
        base = image["runtime_command"]
        found, config = archive.read(image["file"])
        if found != image["digest"]:
            raise ImageChanged(changed(image, found))
        by = "the sha256 of the file"
        if config is not None:
            code, said = query([*base, "image", "inspect", "--format", "{{.Id}}", config[7:]], environ)
            if code == 0 and said.splitlines()[0] == config[7:]:
                return Checked(config[7:], found, by + ", held by podman")
        code, said = query([*base, "load", "--quiet", "--input", image["file"]], environ)
        if code != 0:
            raise ImageUnavailable(f"podman load of {describe(image)} failed: {said[-400:]}")
        loaded = _loaded(said)
        if loaded is None:
            raise ImageUnavailable(f"podman load of {describe(image)} named no image: {said[-400:]}")
        code, said = query([*base, "image", "inspect", "--format", "{{.Id}}", loaded], environ)
        if code != 0 or not said:
            raise ImageUnavailable(f"podman image inspect {loaded} failed: {said[-400:]}")
        held = said.splitlines()[0]
        if config is not None and held != config[7:]:  # the name it loaded under was taken by another image since
            raise ImageUnavailable(f"podman loaded {describe(image)} as {loaded}, which is now the image {held}, not "
                                   f"{config[7:]}")
        return Checked(held, found, by + ", loaded by podman")

    def lookup(self, launch: Launch) -> Launch | None:
        return launch._replace(argv=lookup_argv(launch.argv), env={}, name=launch.name + "-lookup")

    def cleanup(self, launch: Launch) -> list[str] | None:
        return [*launch.image["runtime_command"], "rm", "--force", "--ignore", "--time", "0", launch.name]


def _loaded(said: str) -> str | None:
    """The image `podman load` says it loaded: "Loaded image: NAME" or "Loaded image(s): A,B" (the first)."""
    for line in said.splitlines():
        head, _, rest = line.partition(":")
        if head.strip().startswith("Loaded image") and rest.strip():
            return rest.strip().split(",")[0].strip()
    return None


RUNTIMES = {"podman": Podman()}
