"""Slurm's own OCI support: `srun --container=BUNDLE` inside the allocation, where the site configured oci.conf
(tau-run(5) "Images and runtimes", tau-slurm(7) "Containers"). Built from Slurm's documented behaviour; not
configured on the test cluster, so checked by golden command lines (tests/golden/runtimes/).

    RUNTIME_COMMAND --ntasks=1 --nodes=1 --container=SCRATCH RUNTIME_ARGS PROGRAM ARGS...

- the image is an OCI bundle folder on a shared filesystem (`file`: its config.json and root filesystem, made once
  with skopeo and umoci), pinned by a digest of its whole tree (`tree_sha256`: every entry's path, type, mode and
  content, in name order, symbolic links as their targets, never followed);
- Slurm takes mounts and the working folder only from config.json, so tau writes one for each program in a folder
  of the attempt's own (SCRATCH): the bundle's config.json, its root the bundle's root filesystem, read-only, with the
  mounts added and the working folder set; Slurm replaces its arguments with the step's and merges the step's
  environment in (oci.conf's EnvExclude filters it);
- the program runs in the Slurm step, which Slurm signals and kills; the runtime oci.conf names (runc, crun)
  passes signals on to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from typing import TYPE_CHECKING

from taulib.errors import TauError
from taulib.fs import openat
from taulib.runtimes.base import Checked, Command, ImageChanged, ImageUnavailable, Launch, Runtime, hash_fd

if TYPE_CHECKING:
    from taulib.jsonio import Record

CONFIG = "config.json"


def tree_sha256(root: str) -> str:
    """`sha256:<hex>` of the tree below `root`: for each entry in name order, a line of its path, type, mode and
    the sha256 of its content (a file's bytes, a symbolic link's target; a folder's is empty). ImageUnavailable
    when the tree cannot be read."""
    total = hashlib.sha256()
    try:
        if not stat.S_ISDIR(os.lstat(root).st_mode):
            raise ImageUnavailable(f"OCI bundle {root!r} is not a folder")
        for folder, dirs, files in os.walk(root, onerror=_raise):
            dirs.sort()
            for name in sorted([*dirs, *files]):
                path = os.path.join(folder, name)
                info = os.lstat(path)
                content = hashlib.sha256()
                if stat.S_ISLNK(info.st_mode):
                    content.update(os.fsencode(os.readlink(path)))
                rel = os.path.relpath(path, root)
                if stat.S_ISREG(info.st_mode):
                    fd = openat.open_named_file(path, "a file of the OCI bundle")
                    found = hash_fd(fd) if fd is not None else ""
                else:
                    found = content.hexdigest()
                total.update(b"%s\0%o\0%s\n" % (os.fsencode(rel), info.st_mode, found.encode()))
    except TauError as exc:
        raise ImageUnavailable(exc.message) from None
    except OSError as exc:
        raise ImageUnavailable(f"OCI bundle {root!r} cannot be read: {exc.strerror} ({exc.filename})") from None
    return "sha256:" + total.hexdigest()


def _raise(exc: OSError) -> None:
    raise exc


class SlurmOci(Runtime):
    name = "slurm-oci"

    def command(self, launch: Launch) -> Command:
        image = launch.image
        bundle = launch.target
        try:
            with open(os.path.join(bundle, CONFIG), "rb") as handle:
                config = json.loads(handle.read())
        except (OSError, ValueError) as exc:
            raise ImageUnavailable(f"OCI bundle {bundle!r} has no readable {CONFIG}: {exc}") from None
        root = (config.get("root") or {}).get("path", "rootfs")
        config["root"] = {"path": os.path.normpath(os.path.join(bundle, root)), "readonly": True}
        config["mounts"] = [*config.get("mounts", []), *(
            {"destination": m.container, "type": "bind", "source": m.host,
             "options": ["rbind", "rw" if m.writable else "ro", "nosuid", "nodev"]} for m in launch.mounts)]
        process = dict(config.get("process") or {})
        if launch.workdir is not None:
            process["cwd"] = launch.workdir
        process.setdefault("cwd", "/")
        config["process"] = process
        files = {CONFIG: json.dumps(config, indent=2, sort_keys=True).encode() + b"\n"}
        argv = [*image["runtime_command"], "--ntasks=1", "--nodes=1", f"--container={launch.scratch}",
                *image["runtime_args"], *launch.argv]
        return Command(argv, dict(launch.env), files)

    def problem(self, image: Record) -> str | None:
        if image["file"] is None:
            return (f"runtime slurm-oci runs an OCI bundle folder, not the reference {image['ref']}: give image.file "
                    "(the bundle, made with skopeo copy and umoci unpack) and its tree's sha256")
        return None

    def check(self, image: Record, environ: dict[str, str]) -> Checked:
        found = tree_sha256(image["file"])
        if found != image["digest"]:
            raise ImageChanged(f"image changed: the OCI bundle {image['file']} has {found}, the run pins "
                               f"{image['digest']}; a different image is a different run (tau-init NEW --from RUN)")
        return Checked(image["file"], found, "the sha256 of the bundle's tree")


RUNTIMES = {"slurm-oci": SlurmOci()}
