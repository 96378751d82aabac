"""Site profiles (tau-run(5) "Site profiles"): what belongs to a site and not to a run (the executor and its
account, partitions and GPU request style, the container runtime with its command, site flags and standard
mounts, the roots a collection may write below), in a JSON file a team shares, which a plan names by
`scheduler.site`.

Reads: NAME.json in each folder of $TAU_SITE_PATH, then in ~/.config/tau/sites (the first found; the folders are
followed, the file never is). Writes nothing.
Promises: tau-init merges the profile under the plan's own values (an object key by key, a list or a value as a
whole: the plan's wins) and pins the result in the plan with the profile's name and the sha256 of its bytes, so
editing the profile later changes no existing run; `validate` says everything that is wrong with a profile at once.
"""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
from typing import TYPE_CHECKING

from taulib import env, executors, jsonio, schema
from taulib.errors import BadInput, NotFound, TauError
from taulib.fs import openat

if TYPE_CHECKING:
    from taulib.jsonio import Record

SUFFIX = ".json"
HOME_FOLDER = ".config/tau/sites"  # below $HOME
MAX_BYTES = 1 << 20  # a profile larger than this is no profile


def search_path(environ: dict[str, str] | None = None) -> list[str]:
    """The folders searched for a profile, in order: $TAU_SITE_PATH's, then ~/.config/tau/sites."""
    folders = [f for f in env.get("TAU_SITE_PATH", environ).split(":") if f]
    home = env.get("HOME", environ)
    if home:
        folders.append(os.path.join(home, HOME_FOLDER))
    return folders


def find(name: str, environ: dict[str, str] | None = None) -> tuple[str, bytes]:
    """(the path, the bytes) of the profile NAME: the first NAME.json of the search path; NotFound naming the
    folders searched."""
    folders = search_path(environ)
    for folder in folders:
        path = os.path.join(folder, name + SUFFIX)
        fd = openat.open_named_file(path, "site profile")
        if fd is None:
            continue
        try:
            data = os.read(fd, MAX_BYTES + 1)
        finally:
            os.close(fd)
        if len(data) > MAX_BYTES:
            raise BadInput(f"site profile {path!r} is larger than {MAX_BYTES} bytes", path=path)
        return path, data
    raise NotFound(f"site profile {name!r} is not in {', '.join(folders) or 'any folder'} (as {name}{SUFFIX}; "
                   "$TAU_SITE_PATH, then ~/.config/tau/sites)", site=name)


def load(name: str, environ: dict[str, str] | None = None) -> tuple[str, Record, str]:
    """(its path, the profile, the sha256 of its bytes), checked against site.schema.json (BadInput naming the
    field)."""
    path, data = find(name, environ)
    profile = jsonio.loads(data, f"site profile {path}")
    schema.validate(profile, "site", f"site profile {path}")
    assert isinstance(profile, dict)  # the schema's type
    return path, profile, hashlib.sha256(data).hexdigest()


def merged(base: object, own: object) -> object:
    """`own` over `base`: objects key by key, anything else (a list, a value) `own`'s as a whole."""
    if isinstance(base, dict) and isinstance(own, dict):
        out = dict(base)
        for key, value in own.items():
            out[key] = merged(base[key], value) if key in base else value
        return out
    return own


def apply(request: Record, profile: Record) -> Record:
    """The plan request with the profile merged under it (the plan's values win; see the module docstring): its
    scheduler, the defaults of the client's image (of each service's, when the client has none) and the
    collection's roots. `scheduler.site` is taken out: the plan records the profile as `site`."""
    out = copy.deepcopy(request)
    scheduler = dict(out.get("scheduler", {}))
    scheduler.pop("site", None)
    out["scheduler"] = merged(profile.get("scheduler", {}), scheduler)
    defaults = profile.get("image")
    if defaults:
        def image(given: object) -> object:
            return merged(defaults, {"ref": given} if isinstance(given, str) else given)
        if "image" in out:
            out["image"] = image(out["image"])
        else:
            for service in out.get("services", []):
                if "image" in service:
                    service["image"] = image(service["image"])
    if "collection" in profile:
        out["collection"] = merged(profile["collection"], out.get("collection", {}))
    return out


def validate(name: str, environ: dict[str, str] | None = None) -> Record:
    """Everything wrong with the profile NAME: its runtime's program not on PATH, a partition the cluster does not
    have (when Slurm answers), a standard mount's host path that does not exist. A profile that cannot be read or
    is not one raises (NotFound, BadInput)."""
    environ = env.current() if environ is None else environ
    path, profile, digest = load(name, environ)
    problems: list[str] = []
    image = profile.get("image", {})
    if image:
        from taulib.runtimes import table

        runtime = image.get("runtime", "podman")
        if runtime not in table.RUNTIMES:
            problems.append(f"image.runtime {runtime!r} is not one of {', '.join(table.RUNTIMES)}")
        else:
            program = image.get("runtime_command", [table.RUNTIMES[runtime].program])[0]
            if shutil.which(program, path=environ.get("PATH", os.defpath)) is None:
                problems.append(f"image.runtime_command's program {program!r} is not on PATH")
        for index, mount in enumerate(image.get("mounts", [])):
            if not os.path.exists(mount["host"]):
                problems.append(f"image.mounts[{index}].host {mount['host']!r} does not exist")
    sections = profile.get("scheduler", {})
    for key, section in sections.items():
        if key == "profile":
            continue
        try:
            chosen = executors.get(key)
            chosen.check_section(section)
        except TauError as exc:
            problems.append(f"scheduler.{key}: {exc.message}")
            continue
        problems += [f"scheduler.{key}: {problem}" for problem in chosen.check_site(section)]
    if "profile" in sections and sections["profile"] not in executors.EXECUTORS:
        problems.append(f"scheduler.profile {sections['profile']!r} is not one of {', '.join(executors.EXECUTORS)}")
    return {"site": name, "path": path, "sha256": digest, "valid": not problems, "problems": problems}
