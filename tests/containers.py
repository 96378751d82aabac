"""The podman images of the container tests, for the tests' own use (plain functions; the fixtures are conftest's).

`images()` runs contrib/containers/test-images.sh once per process, which builds, when missing, the images
localhost/tau-test-client (Debian bookworm, tau and its runtime dependencies in /opt/tau) and localhost/tau-test-service
(the same, another digest) and the image file of tau-test-client (an oci-archive), and returns what it prints:

    {"client": {"ref": "localhost/tau-test-client@sha256:HEX", "digest": "sha256:HEX"},
     "service": {"ref": ..., "digest": ...}, "file": {"path": "/abs/....tar", "sha256": "HEX"}}

The first call of a machine takes about a minute (root, Debian's mirrors and PyPI or pip's cache), one after a change
to taulib, share or pyproject.toml about 40 s, and the others about a second. Every podman command runs as PODMAN, and
`podman run` (or create) adds RUNTIME_ARGS: crun refuses this kind of machine's hybrid cgroups, and raising the
limits is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "contrib" / "containers" / "test-images.sh"

PODMAN = ["podman", "--runtime", "/usr/sbin/runc"]
RUNTIME_ARGS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]

# a cold build takes about a minute on 2 cores; this bounds a hung mirror or registry client
BUILD_TIMEOUT = 900
STDERR_TAIL = 40

_images: dict[str, Any] | None = None
_available: bool | None = None


def images() -> dict[str, Any]:
    """The images and the image file, built when missing by contrib/containers/test-images.sh (once per process).

    Raises RuntimeError with the end of the script's stderr when it fails or prints something else than the JSON."""
    global _images
    if _images is None:
        try:
            proc = subprocess.run([str(SCRIPT)], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, timeout=BUILD_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{SCRIPT.relative_to(ROOT)} took more than {BUILD_TIMEOUT} s:\n"
                               + _tail(exc.stderr)) from None
        if proc.returncode != 0:
            raise RuntimeError(f"{SCRIPT.relative_to(ROOT)} failed (exit status {proc.returncode}):\n"
                               + _tail(proc.stderr))
        try:
            found = json.loads(proc.stdout)
        except json.JSONDecodeError as exc:
            raise RuntimeError(f"{SCRIPT.relative_to(ROOT)} printed no JSON object ({exc}): {proc.stdout!r}\n"
                               + _tail(proc.stderr)) from None
        if not isinstance(found, dict) or not {"client", "service", "file"} <= found.keys():
            raise RuntimeError(f"{SCRIPT.relative_to(ROOT)} printed {proc.stdout!r}, not the images and the file")
        _images = found
    return _images


def podman_available() -> bool:
    """podman and runc are installed and podman answers (with runc) here, now (once per process)."""
    global _available
    if _available is None:
        _available = False
        if shutil.which("podman") is not None and os.access("/usr/sbin/runc", os.X_OK):
            try:
                proc = subprocess.run([*PODMAN, "info", "--format", "{{.Host.OCIRuntime.Name}}"],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      timeout=60)
                _available = proc.returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                pass
    return _available


def _tail(stderr: str | bytes | None) -> str:
    """The last STDERR_TAIL lines of a command's stderr."""
    if stderr is None:
        return "(no stderr)"
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
    return "\n".join(text.rstrip("\n").split("\n")[-STDERR_TAIL:])


def container_pids(name: str) -> set[int]:
    """The host pids of a running container's first process and of its conmon (podman inspect), or none."""
    proc = subprocess.run([*PODMAN, "inspect", "--format", "{{.State.Pid}} {{.State.ConmonPid}}", name],
                          capture_output=True, text=True, check=False)
    return {int(p) for p in proc.stdout.split() if p.isdigit() and int(p) > 0} if proc.returncode == 0 else set()


def container_name(run_dir: Path, rest: str = "") -> str:
    """The name tau gives a container of the run (tau-RUN-DIGEST8-REST, DIGEST8 from the run directory's path;
    REST: SHARD-ATTEMPT-ROLE), or with no REST, the prefix of them all."""
    return f"tau-{run_dir.name}-{hashlib.sha256(str(run_dir).encode()).hexdigest()[:8]}-{rest}"


def containers_of(run_dir: Path) -> list[str]:
    """The containers podman holds whose names are this run's (tau removes its own when an attempt ends)."""
    proc = subprocess.run([*PODMAN, "ps", "--all", "--format", "{{.Names}}", "--filter",
                           f"name={container_name(run_dir)}"], capture_output=True, text=True, check=True)
    return proc.stdout.split()
