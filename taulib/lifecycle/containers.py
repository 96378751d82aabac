"""An attempt's images: checked against their pins before anything starts, and the commands that run the client and
the services inside them through the plan's runtime (`taulib.runtimes`; tau-run(5) "Images and runtimes").

Reads: the plan's images (the client's `image`, each service's), the image files or the runtime's word on a
digest. Writes: the runtime's own files for a program (slurm-oci's config.json) into the attempt's folder
`containers/NAME/`, through the one writer.
Promises: each image the plan names is checked once per attempt, before the client or any service starts; what
runs is the checked target (a reference by digest, a loaded image's id, a file), never a tag; a program runs with
the run's folder mounted read-only at its own path, its attempt's folder (and a shard's workspace) writable at
theirs, so every path tau hands it (TAU_OUTPUT_DIR and the rest) is the same inside as outside, beside the plan's
own mounts; its environment is the run's without PATH (the image's own), every value passed by name, never on a
command line; whatever a runtime killed mid-run left behind is removed by `cleanup`.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

from taulib import jsonio, runtimes
from taulib.runtimes import Checked, ImageChanged, ImageUnavailable, Launch, Mount
from taulib.rundir import layout

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run

CLEANUP_TIMEOUT = 60.0  # seconds a runtime's cleanup command may take


def images(plan: Record) -> dict[str, Record]:
    """The plan's images by who runs in them: "client", and "service NAME" for each service that names one."""
    found: dict[str, Record] = {}
    if plan.get("image") is not None:
        found["client"] = plan["image"]
    for service in plan.get("services") or []:
        if service.get("image") is not None:
            found[f"service {service['name']}"] = service["image"]
    return found


def key(image: Record) -> str:
    """One image as the runtime is asked for it: the same pin through the same runtime is checked once."""
    return jsonio.canonical({k: image[k] for k in ("ref", "file", "digest", "runtime", "runtime_command")}).decode()


class Images:
    """An attempt's images, checked (`check`), and the launches made of them (`command`, `cleanup`)."""

    def __init__(self, run: Run, attempt: Record) -> None:
        self.run, self.attempt = run, attempt
        self.by_role = images(run.plan)
        self.checked: dict[str, Checked] = {}
        self.launched: list[Launch] = []

    def check(self, environ: dict[str, str]) -> tuple[str, str] | None:
        """Every image checked against its pin, each once: None, or (the failure's code, its message):
        `image_changed` (not retried) or `preflight` (an image the runtime could not give now)."""
        for role, image in self.by_role.items():
            if key(image) in self.checked:
                continue
            try:
                self.checked[key(image)] = runtimes.get(image["runtime"]).check(image, environ)
            except ImageChanged as exc:
                return "image_changed", f"{exc.message} ({role}'s image)"
            except ImageUnavailable as exc:
                return "preflight", f"{exc.message} ({role}'s image); nothing was started"
        return None

    def digests(self) -> dict[str, str]:
        """The digest each role ran in, as checked."""
        return {role: self.checked[key(image)].digest for role, image in self.by_role.items()
                if key(image) in self.checked}

    def mounts(self, image: Record) -> list[Mount]:
        """tau's mounts (the run read-only, the attempt's folder and its dataset writable, the run's input dataset
        read-only, each at its own path), then the plan's, a folder before any below it."""
        sid, aid = self.attempt["shard_id"], self.attempt["attempt_id"]
        run = self.run.path
        attempt_dir = os.path.join(run, layout.attempt_file(sid, aid, "")).rstrip("/")
        dataset = os.path.join(run, self.attempt["dataset"])
        own = [Mount(run, run, False), Mount(attempt_dir, attempt_dir, True)]
        if not dataset.startswith(attempt_dir + "/"):
            own.append(Mount(dataset, dataset, True))
        if self.run.plan.get("input") is not None:  # for a client that reads the source (TAU_INPUT_PIECES)
            source = self.run.plan["input"]["path"]
            own.append(Mount(source, source, False))
        return runtimes.base.mounts(own, image["mounts"])

    def name(self, role: str) -> str:
        """A container's name for `role`, unique to the attempt of this run directory (two runs of one name in two
        folders never share one: `--replace` would stop the other's), in podman's name grammar."""
        where = hashlib.sha256(os.fsencode(self.run.path)).hexdigest()[:8]
        return "-".join(["tau", self.run.run_id, where, self.attempt["shard_id"], self.attempt["attempt_id"],
                         *role.split()])[:250]

    def launch(self, role: str, argv: list[str], env: dict[str, str], devices: list[str],
               copy: int | None = None) -> Launch:
        """The launch of `argv` with `env` (PATH left to the image) in `role`'s checked image (`copy`: a service's
        backend number, in its container's name)."""
        image = self.by_role[role]
        name = self.name(role if copy is None else f"{role} {copy}")
        scratch = os.path.join(self.run.path, layout.attempt_file(self.attempt["shard_id"],
                                                                  self.attempt["attempt_id"], f"containers/{name}"))
        return Launch(image, self.checked[key(image)].target, argv,
                      {k: v for k, v in env.items() if k != "PATH"}, self.mounts(image), devices, name,
                      image["workdir"], scratch)

    def command(self, launch: Launch, environ: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """The runtime's argument vector and its process's environment (the allocation's, then the runtime's
        variables) for `launch`; its files written into the attempt's folder first."""
        made = runtimes.get(launch.image["runtime"]).command(launch)
        if made.files:
            rel = os.path.relpath(launch.scratch, self.run.path)
            self.run.dir.make_folders(rel)
            for name, data in made.files.items():
                self.run.dir.replace_bytes(f"{rel}/{name}", data)
        self.launched.append(launch)
        return made.argv, {**environ, **made.env}

    def lookup(self, role: str, argv: list[str], environ: dict[str, str]) -> str | None:
        """Why `argv`'s program cannot run in `role`'s image (not found, or its script not readable), or None;
        None too when the runtime cannot look before it runs."""
        launch = self.launch(role, argv, {}, [])
        looking = runtimes.get(launch.image["runtime"]).lookup(launch)
        if looking is None:
            return None
        command, env = self.command(looking, environ)
        try:
            code, said = runtimes.base.query(command, env)
        except ImageUnavailable as exc:
            return f"{launch.image['runtime']} could not look {argv[0]!r} up in {role}'s image: {exc.message}"
        image = runtimes.base.describe(launch.image)
        if code == 127:
            return f"{role}'s program {argv[0]!r} is not in image {image} (looked up with its /bin/sh)"
        if code == 126:
            return f"{role}'s script is not a readable file in image {image} (with its mounts)"
        if code != 0:
            return f"{launch.image['runtime']} could not run image {image} for {role}: {said[-300:]}"
        return None

    def cleanup(self, environ: dict[str, str]) -> None:
        """What a runtime killed mid-run left behind, removed (podman's container records)."""
        for launch in self.launched:
            self.remove(launch, environ)

    def remove(self, launch: Launch, environ: dict[str, str]) -> None:
        """The launch's container stopped by force and removed, where its runtime has one of its own (podman rm
        --force: the container's processes run under its monitor, not under the runtime's command)."""
        command = runtimes.get(launch.image["runtime"]).cleanup(launch)
        if command is None:
            return
        try:
            runtimes.base.query(command, environ, CLEANUP_TIMEOUT)
        except ImageUnavailable:
            pass  # nothing more can be done: the runtime did not answer
