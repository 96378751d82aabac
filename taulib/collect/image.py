"""A collection in the run's client image (the plan's `collection.image: client`; tau-collect(1) "In the client
image"): the work a collection does on this machine is done by the tau installed in the client's image, through its
runtime, with the same records and the same bytes as on the host.

Reads: the plan's image and mounts, the image (checked against its pin, and its tau's version). Writes nothing
itself: the tau in the image writes the collection's records and its dataset, as the host's would.
Promises:
- a destination is authorised through the plan's writable mounts too: below a read-only mount, or below no mount
  of the client's image, it is refused (77) before anything is made; its path inside the image is recorded beside
  the host's (the collection plan's `image.destination`);
- the image is checked against its pin, and the tau in it must be this tau's version (tau-collect --version inside):
  otherwise refused (77), naming what to install, before anything is written;
- the tau in the image sees the run directory and the destination's folder at their own paths (writable), beside the
  image's own mounts; it gets tau's variables and the executor's that this process has (never PATH or HOME), and
  TAU_IN_IMAGE, the checked digest, which makes it do the work itself; its output is this command's;
- a stop signal of this command reaches it (its stage removed, as on the host), and its container is gone before
  this command ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import TYPE_CHECKING

from taulib import __version__, env, executors, jsonio, runtimes, signals
from taulib.errors import EXIT_CODES, INTERNAL, Refused, TauError
from taulib.runtimes import ImageChanged, ImageUnavailable, Launch, Mount

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run

KEPT_OUT = frozenset({"PATH", "HOME", "VIRTUAL_ENV"})  # the image has its own
STOP_WAIT = 30.0  # seconds the tau in the image has to end after this command's stop signal


def wanted(run: Run, environ: dict[str, str] | None = None) -> bool:
    """Whether this process must hand the collection's work to the tau in the client image: the plan says so, and
    this process is not that tau already."""
    return run.plan["collection"].get("image") == "client" and not env.get("TAU_IN_IMAGE", environ)


def inside(run: Run, destination: str) -> Record | None:
    """The collection plan's `image` for a destination (host path, normalised): the image's digest and runtime and
    the destination's path inside the image; None when the plan collects on the host. Refused (77) when the
    destination lies below no writable mount of the client's image."""
    if run.plan["collection"].get("image") != "client":
        return None
    from taulib.rules import image as image_rules  # its reference grammar is compiled on import

    image = run.plan["image"]
    mount, there = image_rules.writable_mount(destination, image["mounts"])
    if mount is None or there is None:
        raise Refused(f"destination {destination!r} is below no mount of the client's image, where the collection "
                      "runs (plan collection.image client): mount its folder writable (image.mounts)",
                      destination=destination)
    if not mount["writable"]:
        raise Refused(f"destination {destination!r} is below the read-only mount {mount['host']!r} -> "
                      f"{mount['container']!r} of the client's image, where the collection runs: mount it "
                      "writable (image.mounts[].writable)", destination=destination)
    return {"digest": image["digest"], "runtime": image["runtime"], "destination": there}


def _environment(environ: dict[str, str], digest: str) -> dict[str, str]:
    """What the tau in the image gets: the variables tau and its executors read (`taulib.env`), as this process has
    them, but PATH, HOME and VIRTUAL_ENV; and TAU_IN_IMAGE."""
    names = {*env.VARS, *executors.variables()} - KEPT_OUT
    return {**{k: v for k, v in environ.items() if k in names}, "TAU_IN_IMAGE": digest}


def run_inside(run: Run, args: list[str], folders: list[str], environ: dict[str, str] | None = None) -> Record:
    """Run `tau-collect RUN ARGS` in the client image and return what it printed (one JSON document); its error is
    raised as this command's, with its exit code. `folders`: host folders it writes besides the run (the
    destination's parent), mounted at their own paths."""
    environ = env.current() if environ is None else environ
    image = run.plan["image"]
    runtime = runtimes.get(image["runtime"])
    try:
        checked = runtime.check(image, environ)
    except (ImageChanged, ImageUnavailable) as exc:
        raise Refused(f"the collection runs in the client's image: {exc.message}") from None
    own = [Mount(run.path, run.path, True), *[Mount(f, f, True) for f in folders]]
    name = f"tau-{run.run_id}-collect-{os.getpid()}"

    def launch(argv: list[str], variables: dict[str, str], suffix: str = "") -> Launch:
        return Launch(image, checked.target, argv, variables, runtimes.base.mounts(own, image["mounts"]), [],
                      name + suffix, None)

    asked = runtime.command(launch(["tau-collect", "--version"], {}, "-version"))
    code, said = runtimes.base.query(asked.argv, {**environ, **asked.env})
    if code != 0:
        raise Refused(f"tau is not installed in the client image {runtimes.base.describe(image)}, where the collection "
                      "runs (plan collection.image client): install it there (pip install tau) so that tau-collect is "
                      f"on the image's PATH ({said[-200:]})")
    if __version__ not in said.split():
        raise Refused(f"the client image's tau is {said[-80:]!r}, not this tau's {__version__}: install tau "
                      f"{__version__} in the image, so that its collection is byte for byte this tau's")
    made = runtime.command(launch(["tau-collect", run.path, *args], _environment(environ, checked.digest)))
    code, out_bytes, err_bytes = _run(made.argv, {**environ, **made.env}, runtime.cleanup(launch([], {})))
    if code != 0:
        raise _relayed(code, err_bytes.decode("utf-8", "replace"))
    out = out_bytes.decode("utf-8", "replace").strip()
    found = jsonio.loads(out.splitlines()[-1] if out else "", "the output of tau-collect in the client image")
    if not isinstance(found, dict):
        raise TauError(f"tau-collect in the client image printed {out[:200]!r}, not a JSON object")
    return found


def _run(argv: list[str], environ: dict[str, str], remove: list[str] | None) -> tuple[int, bytes, bytes]:
    """Run the tau in the image: (its exit status, standard output, standard error). A stop signal this command
    gets (SIGINT, SIGTERM, SIGHUP) is passed on to it (the runtime passes it into the container, where that tau
    removes its stage as this one would), which is waited for, STOP_WAIT seconds at most, and its container then
    removed (`remove`); the signal then ends this command too."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=environ)
    try:
        out, err = proc.communicate()
    except BaseException as exc:
        with signals.deferred():
            proc.send_signal(getattr(exc, "signum", signal.SIGINT))
            try:
                proc.communicate(timeout=STOP_WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
            if remove is not None:
                try:
                    runtimes.base.query(remove, environ, STOP_WAIT)
                except ImageUnavailable:
                    pass  # the runtime did not answer: nothing more can be done
        raise
    return proc.returncode, out, err


def _relayed(code: int, said: str) -> TauError:
    """The error of the tau in the image (its one JSON error object on standard error) as this command's, with its
    exit code; whatever else it printed, when it printed none (a runtime's own failure), in the message."""
    lines = said.strip().splitlines()
    try:
        error = jsonio.loads(lines[-1], "error") if lines else None
    except TauError:
        error = None
    if isinstance(error, dict) and isinstance(error.get("message"), str) and isinstance(error.get("code"), int):
        message = error["message"].removeprefix("tau-collect: ")
        relayed = TauError(message, **(error.get("details") or {}))
        relayed.code = error["code"] if error["code"] in EXIT_CODES else INTERNAL
        return relayed
    relayed = TauError(f"the collection in the client image failed (exit {code}): {said.strip()[-400:]}")
    relayed.code = INTERNAL
    return relayed


def existing(folder: str) -> str:
    """`folder`, or its nearest ancestor that exists (tau makes the rest, inside the mount)."""
    while not os.path.isdir(folder) and folder != os.path.dirname(folder):
        folder = os.path.dirname(folder)
    return folder
