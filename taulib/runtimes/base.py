"""What a runtime is given and answers, and the checks every runtime shares (tau-run(5) "Images and runtimes").

A runtime turns a `Launch` (the image as the plan records it, what the runtime runs, the program and its
environment, the mounts, the GPUs, a name) into a `Command`: the argument vector of the runtime's own process, the
variables that process gets beside the allocation's, and any files it reads (written by the caller into the run).
Values of the environment never appear in the argument vector: a runtime is told names, and takes the values from
its own environment (podman's --env NAME, pyxis's --container-env), or from variables it reads (apptainer's
APPTAINERENV_NAME). Before anything runs, `check` asks for the digest of what is about to run (an image file: the
sha256 of its bytes, read by tau; a reference: the runtime's own word) and compares it with the plan's.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from typing import TYPE_CHECKING, NamedTuple

from taulib.errors import TauError
from taulib.fs import openat
from taulib.rules import program as program_rules

if TYPE_CHECKING:
    from taulib.jsonio import Record

QUERY_TIMEOUT = 300.0  # seconds a runtime's answer (an inspection, a pull, a load) may take at most
QUERY_OUTPUT = 64 * 1024  # bytes of a runtime's answer kept for a message or a parse
CHUNK = 1 << 20  # bytes read at a time while an image file is hashed


class Mount(NamedTuple):
    """A bind mount: the host's folder or file, where it appears inside, and whether the program may write it."""

    host: str
    container: str
    writable: bool


def mounts(own: list[Mount], given: list[Record]) -> list[Mount]:
    """tau's own mounts and the plan's (`{host, container, writable}` records), a folder before any below it."""
    return sorted([*own, *(Mount(m["host"], m["container"], m["writable"]) for m in given)],
                  key=lambda m: m.container.count("/"))


class Launch(NamedTuple):
    """A program to run in an image: the plan's image record (`rules.image.resolve`), what the runtime runs
    (`Checked.target`), the program and its arguments inside the image, the environment it gets (the values), the
    mounts (tau's own and the plan's), the GPUs it was given (the scheduler's ids, in its order), a name unique to
    the attempt and the program (a container's name), and its working folder inside (None: the image's)."""

    image: Record
    target: str
    argv: list[str]
    env: dict[str, str]
    mounts: list[Mount]
    devices: list[str]
    name: str
    workdir: str | None
    scratch: str = ""  # a folder of the attempt's own where the runtime's files (`Command.files`) are written


class Command(NamedTuple):
    """How the runtime is started: its argument vector, the variables its own process gets beside the
    allocation's, and files it reads (a path -> their bytes), which the caller writes before it starts."""

    argv: list[str]
    env: dict[str, str]
    files: dict[str, bytes]


class Checked(NamedTuple):
    """An image checked against its pin: what the runtime runs (a reference by digest, a loaded image's id, a file),
    the digest that was checked (recorded as the attempt's `image_digest`), and who said so."""

    target: str
    digest: str
    by: str


class ImageChanged(Exception):
    """What would run is not the image the plan pins (a file rewritten, a digest the runtime does not give): the
    attempt fails and is not retried (a different image is a different run)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ImageUnavailable(Exception):
    """The runtime could not give the image now (a pull that failed, a runtime that did not answer): the attempt
    fails as a preflight failure, which a retry may mend."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def describe(image: Record) -> str:
    """The image as a message names it."""
    return image["ref"] if image["ref"] is not None else f"{image['file']} (sha256 {image['digest'][7:]})"


def file_sha256(path: str) -> str:
    """`sha256:<hex>` of the image file at `path`, read without following a symbolic link (an image pinned by its
    bytes is named by the file that holds them). ImageUnavailable when it cannot be read."""
    try:
        fd = openat.open_named_file(path, "image file")
    except TauError as exc:
        raise ImageUnavailable(exc.message) from None
    if fd is None:
        raise ImageUnavailable(f"image file {path!r} does not exist")
    return "sha256:" + hash_fd(fd)


def hash_fd(fd: int) -> str:
    """The sha256 (hex) of what the descriptor `fd` reads, which is then closed."""
    digest = hashlib.sha256()
    try:
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()


def changed(image: Record, found: str) -> str:
    """What an image file that is not the pinned one says (the message of ImageChanged)."""
    return (f"image changed: {image['file']} has {found}, the run pins {image['digest']}; a different image is a "
            "different run (tau-init NEW --from RUN with the new sha256)")


def check_file(image: Record) -> Checked:
    """An image file's bytes against the plan's sha256: ImageChanged when they differ."""
    found = file_sha256(image["file"])
    if found != image["digest"]:
        raise ImageChanged(changed(image, found))
    return Checked(image["file"], found, "the sha256 of the file")


def query(argv: list[str], environ: dict[str, str], timeout: float = QUERY_TIMEOUT) -> tuple[int, str]:
    """Ask the runtime: (exit status, its output, stdout then stderr, bounded). A runtime that cannot be started
    or does not answer in time is ImageUnavailable."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=environ, timeout=timeout,
                              check=False)
    except OSError as exc:
        raise ImageUnavailable(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise ImageUnavailable(f"{' '.join(argv[:3])} did not answer within {timeout:.0f} s") from None
    text = (done.stdout + done.stderr)[-QUERY_OUTPUT:].decode("utf-8", "replace").strip()
    return done.returncode, text


class Runtime:
    """A container runtime: `command` (pure: the golden tests hold its command lines), `check`, and where it can,
    `lookup` (the program found inside the image before it runs) and `cleanup` (what a killed runtime left)."""

    name = ""

    def command(self, launch: Launch) -> Command:
        """The runtime's command line for `launch`."""
        raise NotImplementedError

    def problem(self, image: Record) -> str | None:
        """Why this runtime cannot run the plan's `image` (a kind of image it does not take), or None."""
        return None

    def check(self, image: Record, environ: dict[str, str]) -> Checked:
        """The image checked against its pin (ImageChanged, ImageUnavailable). An image file's bytes are hashed;
        a reference is run by its digest, which the runtime checks as it pulls it (a runtime that can say which
        digest it holds overrides this)."""
        if image["file"] is not None:
            return check_file(image)
        return Checked(self.reference(image), image["digest"], f"{self.name}'s pull by digest")

    def reference(self, image: Record) -> str:
        """How this runtime is told a reference: by digest alone (`rules.image.Reference.pinned`)."""
        ref: str = image["ref"]
        return ref

    def lookup(self, launch: Launch) -> Launch | None:
        """A launch that looks the program (and an interpreter's script) up inside the image, exiting 127 when the
        program is not there and 126 when the script is not readable; None when this runtime cannot ask before it
        runs (the start then says)."""
        return None

    def cleanup(self, launch: Launch) -> list[str] | None:
        """A command that removes what a runtime killed mid-run left behind (a container record), or None."""
        return None


LOOKUP = 'command -v -- "$1" >/dev/null 2>&1 || exit 127; [ -z "$2" ] || [ -r "$2" ] || exit 126'


def lookup_argv(argv: list[str]) -> list[str]:
    """The program that looks `argv`'s program (and its script, when an interpreter runs one: `rules.program`) up
    inside an image."""
    index = program_rules.script_index(argv)
    return ["/bin/sh", "-c", LOOKUP, "sh", argv[0], "" if index is None else argv[index]]
