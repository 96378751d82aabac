"""An image archive (an OCI archive or a docker archive, as `podman save` writes them) read in one pass: the sha256
of its bytes, and the digest of the image's config, which is the image's id in podman's store. Hashing and reading
the same bytes once means the id comes from the very bytes that were checked against the pin, and a runtime that
already holds that image need not load the archive again (seconds for each GB, every attempt).

Reads: the archive (its final component never followed). Writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from typing import IO, Any

from taulib.errors import TauError
from taulib.fs import openat
from taulib.runtimes.base import CHUNK, ImageUnavailable

SMALL = 1 << 20  # bytes of a member kept: an index, a manifest or a config is far smaller


class _Hashing:
    """A reader that hashes every byte it gives."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.sha = raw, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.sha.update(data)
        return data


def read(path: str) -> tuple[str, str | None]:
    """(`sha256:<hex>` of the archive's bytes, `sha256:<hex>` of its image's config, or None when the archive
    does not name one: not a tar, or neither an OCI nor a docker archive). ImageUnavailable when it cannot be read."""
    try:
        fd = openat.open_named_file(path, "image file")
    except TauError as exc:
        raise ImageUnavailable(exc.message) from None
    if fd is None:
        raise ImageUnavailable(f"image file {path!r} does not exist")
    kept: dict[str, bytes] = {}
    with os.fdopen(fd, "rb") as raw:
        reader = _Hashing(raw)
        try:
            with tarfile.open(fileobj=reader, mode="r|") as tar:  # type: ignore[call-overload]
                for member in tar:
                    if member.isfile() and member.size <= SMALL:
                        handle = tar.extractfile(member)
                        if handle is not None:
                            kept[member.name.removeprefix("./")] = handle.read()
        except (tarfile.TarError, EOFError):
            kept = {}
        except OSError as exc:
            raise ImageUnavailable(f"image file {path!r} cannot be read: {exc.strerror}") from None
        while reader.read(CHUNK):  # the rest (a tar's end padding, or all of what is not a tar)
            pass
    return "sha256:" + reader.sha.hexdigest(), config_digest(kept)


def config_digest(members: dict[str, bytes]) -> str | None:
    """The image's config digest from an archive's small members: an OCI archive's index.json, its first manifest
    and that manifest's config; a docker archive's manifest.json and its first image's Config. None when they do
    not say."""
    try:
        if "index.json" in members:
            index: Any = json.loads(members["index.json"])
            manifest: Any = json.loads(members[_blob(index["manifests"][0]["digest"])])
            found = manifest["config"]["digest"]
        elif "manifest.json" in members:
            config = json.loads(members["manifest.json"])[0]["Config"]
            found = "sha256:" + os.path.basename(config).removesuffix(".json")
        else:
            return None
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    if not isinstance(found, str) or not found.startswith("sha256:") or len(found) != 71 \
            or any(c not in "0123456789abcdef" for c in found[7:]):
        return None
    return found


def _blob(digest: str) -> str:
    algorithm, _, hexdigits = digest.partition(":")
    return f"blobs/{algorithm}/{hexdigits}"
