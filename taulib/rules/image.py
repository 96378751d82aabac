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
from typing import NamedTuple

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[a-fA-F0-9:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_REFERENCE = re.compile(rf"(?P<name>(?:(?P<domain>{_DOMAIN})/)?{_COMPONENT}(?:/{_COMPONENT})*)"
                        r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z]"
                        r"[A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}))?", re.ASCII)
SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)
NAME_MAX = 255  # characters of a name (the distribution grammar's limit)


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
