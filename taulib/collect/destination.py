"""Step 2 of a collection: where the dataset may go, and the folder it is staged and published in
(tau-collect(1) "Destination authorisation").

Reads: the plan's `collection.allowed_roots`, the destination's parent folder and, when a dataset is there, its
`_tau_collection.json`. Writes: the parent folders of the destination (0700, when missing), the stage and its
removal. Promises:
- a destination is authorised when, normalised and with symlinks in its parents resolved, it lies strictly below
  the run's workspace (the run directory's parent) or an allowed root, does not overlap the run directory, and its
  parent is a folder of ours that group and others cannot write (so nobody else can swap the dataset);
- the stage (`.NAME.tau-stage-<plan digest>`) lives beside the destination, in the same folder, so publishing it
  is one rename; a stage is removed only when it is a folder of ours;
- the stage is made, and everything in it, with the dataset's modes (`modes`: folders 0700 and files 0600, or 0750
  and 0640 for a collection planned `group_readable`), each set on the new folder's or file's descriptor whatever
  the umask (`open_stage`, through `fs.tree.Tree`'s modes), and checked before it is published (`check_modes`):
  the dataset appears at its destination with its final modes, never private first nor wider; the parent folders
  made here stay 0700 whatever the collection (a group that reads the dataset needs search permission on them,
  which only the user grants);
- a published dataset is adopted only when its `_tau_collection.json` is valid and was made from this plan.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, NamedTuple

from taulib import jsonio, schema
from taulib.errors import Conflict, Refused, TauError, UsageError
from taulib.fs.openat import PRIVATE, Modes
from taulib.fs.tree import Tree

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run

RESULT = "_tau_collection.json"  # leading "_": Arrow, Spark and DuckDB dataset readers skip it
NAME_MAX, PATH_MAX = 255, 4096  # Linux's limits, in bytes (PATH_MAX counts the final NUL)
STAGE_EXTRA = len(".") + len(".tau-stage-") + 16  # what `stage_name` adds to the final name
GROUP_READABLE = Modes(0o750, 0o640)  # tau-collect --group-readable: the group reads, others get nothing


class Destination(NamedTuple):
    path: str  # normalised, as the user gave it
    real_parent: str  # the parent folder, symlinks resolved
    name: str  # the final name in it


def authorise(run: Run, destination: str) -> Destination:
    if not destination or "\0" in destination:
        raise UsageError("--destination must be a path")
    dest = os.path.normpath(os.path.abspath(destination))
    parent, name = os.path.split(dest)
    if not name or name in (".", ".."):
        raise UsageError(f"--destination {destination!r} has no final name")
    roots = [os.path.realpath(os.path.dirname(run.path))] + [
        os.path.realpath(r) for r in run.plan["collection"]["allowed_roots"]]
    real_parent = os.path.realpath(parent)
    real_dest = os.path.join(real_parent, name)
    real_run = os.path.realpath(run.path)
    if not any(real_dest.startswith(root.rstrip("/") + "/") for root in roots):
        raise Refused(f"destination {dest!r} is not below the run's workspace {roots[0]!r} or an allowed root "
                      "(plan collection.allowed_roots)", destination=dest)
    if real_dest == real_run or real_dest.startswith(real_run + "/") or real_run.startswith(real_dest + "/"):
        raise Refused(f"destination {dest!r} overlaps the run directory", destination=dest)
    _check_lengths(dest, real_parent, name)
    _check_parent(dest, real_parent)
    return Destination(dest, real_parent, name)


def _check_lengths(dest: str, real_parent: str, name: str) -> None:
    """Every name tau makes beside the destination (the stage is the longest) fits the filesystem's limits: refused
    here, before anything is journalled or made, never half way through."""
    longest = len(os.fsencode(name)) + STAGE_EXTRA
    if longest > NAME_MAX:
        raise UsageError(f"--destination's final name is {len(os.fsencode(name))} bytes long; its stage beside it "
                         f"needs {STAGE_EXTRA} more and a name holds {NAME_MAX} bytes at most: use a name of "
                         f"{NAME_MAX - STAGE_EXTRA} bytes or fewer", destination=dest)
    for part in real_parent.split("/"):
        if len(os.fsencode(part)) > NAME_MAX:
            raise UsageError(f"--destination {dest!r} has a folder name longer than {NAME_MAX} bytes",
                             destination=dest)
    if len(os.fsencode(real_parent)) + 1 + longest >= PATH_MAX:
        raise UsageError(f"--destination {dest[:64]!r}... is too long: with its stage it must stay under "
                         f"{PATH_MAX} bytes", destination=dest)


def _check_parent(dest: str, real_parent: str) -> None:
    """The nearest existing ancestor of the destination must be a folder (the rest are made 0700)."""
    ancestor = real_parent
    while True:
        try:
            st = os.stat(ancestor)
            break
        except (FileNotFoundError, NotADirectoryError):  # not made yet, or a file on the way up: look higher
            ancestor = os.path.dirname(ancestor)
    if not stat.S_ISDIR(st.st_mode):
        raise Conflict(f"destination {dest!r} cannot be made: {ancestor!r} is not a folder", destination=dest,
                       path=ancestor)


def open_parent(where: Destination) -> Tree:
    """The destination's parent folder (made 0700 when missing), checked: ours, not writable by group or others."""
    os.makedirs(where.real_parent, mode=0o700, exist_ok=True)
    tree = Tree.open(where.real_parent, label="the destination's parent", what="destination folder")
    st = os.fstat(tree.fd)
    if st.st_mode & 0o022:
        tree.close()
        raise Refused(f"the destination's parent {where.real_parent!r} is writable by group or others; another user "
                      "could replace the dataset", path=where.real_parent)
    if st.st_uid != os.geteuid():
        tree.close()
        raise Refused(f"the destination's parent {where.real_parent!r} belongs to another user",
                      path=where.real_parent)
    return tree


def stage_name(plan: Record) -> str:
    return f".{os.path.basename(plan['destination'])}.tau-stage-{jsonio.digest(plan)[:16]}"


def group_readable(plan: Record) -> bool:
    """Whether the collection `plan` publishes a group-readable dataset (a plan made before tau-collect took
    --group-readable has no such field: private)."""
    return bool(plan.get("group_readable", False))


def modes(plan: Record) -> Modes:
    """The modes of the folders and files of the collection `plan`'s dataset."""
    return GROUP_READABLE if group_readable(plan) else PRIVATE


def open_stage(parent: Tree, plan: Record, create: bool = False) -> Tree:
    """The stage of the collection `plan` in `parent`, as a tree that makes its folders and files with the
    dataset's modes; made (with its folder mode) when missing and `create`."""
    return parent.subtree(stage_name(plan), create=create, modes=modes(plan))


def check_modes(parent: Tree, plan: Record) -> None:
    """Just before the stage of the collection `plan` is published: the stage folder, ours, given the dataset's
    folder mode (it was made with it, unless a crash came between its mkdir and its fchmod, which left it
    narrower), and every entry in it a folder or a regular file of ours with the dataset's mode already, as tau
    made it; Conflict (73) naming the first that is not (changed behind tau's back: nothing is published)."""
    want = modes(plan)
    with open_stage(parent, plan) as stage:
        st = os.fstat(stage.fd)
        if st.st_uid != os.geteuid():
            raise Refused(f"stage {stage_name(plan)!r} is not a folder of ours; remove it by hand",
                          path=stage.path)
        if stat.S_IMODE(st.st_mode) != want.folders:
            os.fchmod(stage.fd, want.folders)
        for rel, entry in stage.entries():
            problem = _unlike_tau(rel, entry, want)
            if problem is not None:
                raise Conflict(f"the stage of collection {plan['collection_id']} holds {problem}: it was changed "
                               "behind tau's back; nothing is published", path=rel,
                               collection_id=plan["collection_id"])


def _unlike_tau(rel: str, entry: os.stat_result, want: Modes) -> str | None:
    """What makes the stage's entry `rel` other than tau made it, in words; None when nothing does."""
    if not (stat.S_ISDIR(entry.st_mode) or stat.S_ISREG(entry.st_mode)):
        return f"{rel!r}, which is neither a regular file nor a folder"
    if entry.st_uid != os.geteuid():
        return f"{rel!r}, which belongs to another user"
    expected = want.folders if stat.S_ISDIR(entry.st_mode) else want.files
    if stat.S_IMODE(entry.st_mode) != expected:
        return f"{rel!r} of mode {stat.S_IMODE(entry.st_mode):04o}, where tau made it {expected:04o}"
    return None


def read_result(parent: Tree, name: str) -> Record | None:
    """The `_tau_collection.json` of a dataset published at `name`, or None (absent, damaged or not ours)."""
    try:
        data = parent.read_bytes(f"{name}/{RESULT}", limit=64 << 20)
    except (OSError, TauError):  # a foreign or damaged folder is simply not ours to adopt
        return None
    if data is None:
        return None
    try:
        record = jsonio.loads(data, RESULT)
        schema.validate(record, "collection-result")
    except Exception:  # noqa: BLE001 - likewise
        return None
    return record  # type: ignore[return-value]


def remove_stage(parent: Tree, stage: str) -> None:
    """Remove an unfinished stage of ours (a stage of anybody else's is refused, never removed)."""
    st = parent.lstat(stage)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise Refused(f"stage {stage!r} exists and is not a folder of ours; remove it by hand", path=stage)
    parent.remove_tree(stage)
