"""A fetch's claim on its destination: one tau-bundle-fetch at a time per destination, and the name of its stage,
so that what a killed fetch left is removed by identity, never found by a pattern.

Reads and Writes: one sidecar beside the destination, `.NAME.tau-fetch.lock` (0600, a regular file of ours, never
through a symlink), and what it names. Promises:
- the sidecar is locked (flock, exclusive) for as long as the fetch runs: a second fetch to the same destination
  meanwhile is refused (Busy, 75), never handed the first one's stage;
- before the stage is made, its name (`.NAME.tau-fetch-HEX12`) is written into the sidecar and fsynced;
- taking a claim that nobody holds finishes what a killed fetch (SIGKILL, a power cut) left: the stage the sidecar
  names, when that name is a stage of this destination and a folder of ours, and the destination's no-renameat2
  reservation (`fs.publish.recover_reservation`); nothing else beside the destination is looked at;
- `release()` removes the sidecar while still holding its lock (and only when its name still is the file that
  was locked), so a fetch that ended, published or refused, leaves nothing beside the destination.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat

from taulib.errors import Busy
from taulib.fs import publish
from taulib.fs.tree import Tree

TRIES = 5  # a sidecar removed by its finishing fetch between our open and our lock is opened again


def sidecar_name(name: str) -> str:
    return f".{name}.tau-fetch.lock"


def is_stage_of(name: str, entry: str) -> bool:
    """Whether `entry` is the name of a fetch stage of destination `name` (`.NAME.tau-fetch-` and 12 hex)."""
    return re.fullmatch(rf"\.{re.escape(name)}\.tau-fetch-[0-9a-f]{{12}}", entry) is not None


class Claim:
    """The held claim on destination `name` in folder `parent` (use `take`)."""

    def __init__(self, parent: Tree, name: str, fd: int) -> None:
        self.parent, self.name, self.fd = parent, name, fd
        self.sidecar = sidecar_name(name)

    @classmethod
    def take(cls, parent: Tree, name: str, shown: str) -> Claim:
        """Lock the sidecar of destination `name` (`shown` in messages) and tidy what a killed fetch left."""
        for _ in range(TRIES):
            fd = parent.open_own(sidecar_name(name), os.O_RDWR, "fetch claim")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise Busy(f"another tau-bundle-fetch to {shown!r} is running; wait for it to end, or fetch to "
                           "another destination", destination=shown) from None
            except BaseException:
                os.close(fd)
                raise
            if not parent.same_file(sidecar_name(name), fd):  # its fetch ended and removed it meanwhile
                os.close(fd)
                continue
            claim = cls(parent, name, fd)
            try:
                claim._tidy()
            except BaseException:
                claim.release()
                raise
            return claim
        raise Busy(f"the claim on {shown!r} keeps changing hands; try again", destination=shown)

    def _tidy(self) -> None:
        data = os.pread(self.fd, 4096, 0)
        if data.endswith(b"\n"):
            stage = os.fsdecode(data[:-1])
            if is_stage_of(self.name, stage):
                st = self.parent.lstat(stage)
                if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
                    self.parent.remove_tree(stage)
        publish.recover_reservation(self.parent, self.name)

    def new_stage(self) -> str:
        """A fresh stage name, recorded (durably) before the caller makes the folder."""
        stage = f".{self.name}.tau-fetch-{os.urandom(6).hex()}"
        data = os.fsencode(stage) + b"\n"
        os.ftruncate(self.fd, 0)
        if os.pwrite(self.fd, data, 0) != len(data):
            raise OSError(f"short write to {self.sidecar}")
        os.fsync(self.fd)
        os.fsync(self.parent.fd)  # the sidecar's own name, made when the claim was taken
        return stage

    def release(self) -> None:
        """Remove the sidecar and let the lock go."""
        try:
            if self.parent.same_file(self.sidecar, self.fd):
                os.unlink(self.sidecar, dir_fd=self.parent.fd)
                os.fsync(self.parent.fd)
        finally:
            os.close(self.fd)
