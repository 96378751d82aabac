"""Image references: an OCI reference is read by the distribution grammar (Docker's and podman's) and must be pinned
by digest; a tag beside the digest is allowed and never trusted. Pure (tests/test_rules_image.py).

    reference := name [":" tag] ["@" digest]
    name      := [domain "/"] component ("/" component)*     domain: a host with a dot or a port, or localhost
    component := [a-z0-9]+ (("." | "_" | "__" | "-"+) [a-z0-9]+)*
    tag       := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
    digest    := "sha256:" 64 lowercase hex digits (the only algorithm tau pins by)

A reference without a digest is refused with the digest-qualified form a person can paste (the name, then
@sha256: and the digest their runtime gives): tau never resolves a tag, so a retry days later runs exactly what the
first attempt ran. An image file is pinned by the sha256 of its bytes, 64 lowercase hex digits.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[a-fA-F0-9:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_REFERENCE = re.compile(rf"(?P<name>(?:(?P<domain>{_DOMAIN})/)?{_COMPONENT}(?:/{_COMPONENT})*)"
                        r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z]"
                        r"[A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}))?", re.ASCII)
SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)
NAME_MAX = 255  # characters of a name (the distribution grammar's limit)
DEFAULT_RUNTIME = "podman"  # the runtime of an image that names none


class Reference(NamedTuple):
    """An OCI reference pinned by digest: `registry` (None: the runtime's default, Docker Hub), the repository
    `path` below it, a `tag` (None, or kept only to be shown) and the `digest` (sha256:<hex>)."""

    registry: str | None
    path: str
    tag: str | None
    digest: str

    @property
    def name(self) -> str:
        return self.path if self.registry is None else f"{self.registry}/{self.path}"

    def pinned(self) -> str:
        """The reference by digest alone, as tau hands it to a runtime: the tag is never sent, so nothing can
        resolve it."""
        return f"{self.name}@{self.digest}"


def parse(text: str) -> Reference:
    """The reference `text`, pinned by digest; ValueError saying why not (not a reference, no digest, a digest that
    is not sha256 with 64 lowercase hex digits)."""
    found = _REFERENCE.fullmatch(text)
    if found is None or len(found["name"]) > NAME_MAX:
        raise ValueError(f"{text!r} is not an OCI image reference (registry/name[:tag]@sha256:<64 hex digits>)")
    name, domain, tag, digest = found["name"], found["domain"], found["tag"], found["digest"]
    if domain is not None and "." not in domain and ":" not in domain and domain != "localhost" \
            and domain == domain.lower():
        domain = None  # a first component like library/: a path, not a host
    if digest is None:
        raise ValueError(f"image {text!r} is not pinned by digest, and tau never resolves a tag: name it as "
                         f"{name}@sha256:<64 hex digits>, the digest your runtime gives for it (podman image inspect "
                         f"--format '{{{{.Digest}}}}' {text})")
    algorithm, hexdigits = digest.split(":")  # the grammar allows one colon in a digest
    if algorithm != "sha256" or SHA256.fullmatch(hexdigits) is None:
        raise ValueError(f"image {text!r}: its digest must be sha256: and 64 lowercase hex digits, not {digest!r}")
    path = name if domain is None else name[len(domain) + 1:]
    return Reference(domain, path, tag, digest)


def file_digest(text: str) -> str:
    """An image file's pinned sha256, as the plan gives it: 64 lowercase hex digits, or ValueError."""
    if SHA256.fullmatch(text) is None:
        raise ValueError(f"an image file's sha256 is 64 lowercase hex digits, not {text!r}")
    return text


# -- an image of the plan, resolved ---------------------------------------------------------------------------------

# Characters refused in a mount's paths: the runtimes split their mount specifications on some of them (podman's -v
# on ':', apptainer's --bind on ':' and ',', pyxis's --container-mounts on ',' and ':' and writes the paths into a
# shell function), so one rule for every runtime refuses them all, with whitespace and control characters.
UNSAFE_PATH = re.compile(r"[\s:,\"'\\$`+#\x00-\x1f\x7f]")


def path_problem(path: str, what: str) -> str | None:
    """Why `path` (a mount's host or container side, an image file) cannot be handed to a runtime, or None: it must
    be absolute and normal (no `.`, `..` or doubled `/`) and hold none of `UNSAFE_PATH`'s characters."""
    if not path.startswith("/"):
        return f"{what} {path!r} is not an absolute path"
    if path != "/" and any(part in ("", ".", "..") for part in path[1:].split("/")):
        return f"{what} {path!r} is not a normal path (no '.', '..', doubled or trailing '/')"
    bad = UNSAFE_PATH.search(path)
    if bad is not None:
        return (f"{what} {path!r} holds {bad.group()!r}, which some runtime reads as a separator: give a path without "
                "whitespace or any of : , \" ' \\ $ ` + #")
    return None


def resolve(given: str | dict[str, Any], programs: dict[str, str], base: dict[str, Any] | None = None,
            what: str = "image") -> dict[str, Any]:
    """The plan's record of an image the request gives (`given`: a reference, or an object): its pinned reference
    or file, its digest, the runtime (a name of `programs`, the runtimes' table: name -> program) with its command
    and site flags, its mounts and working folder. What `given` leaves out is taken from `base` (a service's image
    takes the client's runtime, command, flags and mounts), then the defaults (podman, the runtime's own program,
    no flags, no mounts). ValueError saying why it cannot be one."""
    spec: dict[str, Any] = {"ref": given} if isinstance(given, str) else dict(given)
    inherited = base if base is not None and "runtime" not in spec else {}
    runtime = spec.get("runtime", inherited.get("runtime", DEFAULT_RUNTIME))
    if runtime not in programs:
        raise ValueError(f"{what}.runtime {runtime!r} is not one of {', '.join(sorted(programs))}")
    if ("ref" in spec) == ("file" in spec):
        raise ValueError(f"{what} names neither or both of 'ref' and 'file'; give one: a reference pinned by digest, "
                         "or an image file with its sha256")
    if "ref" in spec:
        if "sha256" in spec:
            raise ValueError(f"{what} gives 'sha256' beside 'ref'; a reference is pinned by its own @sha256: digest")
        reference = parse(spec["ref"])
        ref, file, digest = reference.pinned(), None, reference.digest
    else:
        if "sha256" not in spec:
            raise ValueError(f"{what}.file {spec['file']!r} has no 'sha256': an image file is pinned by the sha256 of "
                             "its bytes (sha256sum FILE)")
        problem = path_problem(spec["file"], f"{what}.file")
        if problem is not None:
            raise ValueError(problem)
        ref, file, digest = None, spec["file"], "sha256:" + file_digest(spec["sha256"])
    mounts = [dict(m) for m in spec.get("mounts", inherited.get("mounts", []))]
    seen: set[str] = set()
    for index, mount in enumerate(mounts):
        where = f"{what}.mounts[{index}]"
        problem = path_problem(mount["host"], f"{where}.host") or path_problem(mount["container"],
                                                                                 f"{where}.container")
        if problem is not None:
            raise ValueError(problem)
        if mount["container"] in seen:
            raise ValueError(f"{where} mounts onto {mount['container']!r} a second time")
        seen.add(mount["container"])
        mount["writable"] = mount.get("writable") is True
    workdir = spec.get("workdir")
    if workdir is not None:
        problem = path_problem(workdir, f"{what}.workdir")
        if problem is not None:
            raise ValueError(problem)
    command = list(spec.get("runtime_command", inherited.get("runtime_command", [programs[runtime]])))
    return {"ref": ref, "file": file, "digest": digest, "runtime": runtime, "runtime_command": command,
            "runtime_args": list(spec.get("runtime_args", inherited.get("runtime_args", []))), "mounts": mounts,
            "workdir": workdir}


def writable_mount(path: str, mounts: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str | None]:
    """The mount a host `path` lies below (the deepest one: a mount inside another covers its part; of one folder
    mounted twice, a writable one, else the first), and the path's container side; (None, None) when no mount
    holds it."""
    best: dict[str, Any] | None = None
    for mount in mounts:
        host = mount["host"]
        if (path == host or path.startswith(host.rstrip("/") + "/")) and (
                best is None or (len(host), mount["writable"]) > (len(best["host"]), best["writable"])):
            best = mount
    if best is None:
        return None, None
    rest = path[len(best["host"]):].lstrip("/")
    return best, (best["container"].rstrip("/") + "/" + rest) if rest else best["container"]
