"""Who may read a collected dataset (tau-collect(1) "Modes"): private by default (folders 0700, files 0600), or with
--group-readable (or the plan's collection.group_readable) folders 0750 and files 0640, whatever the umask, on every
path that publishes (inline, --tasks worker processes, --upload, the fallback without renameat2), already when the
dataset appears; a collection's modes are part of its shape, and the stage is checked before it is published."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import PYTHON, ROOT, complete_run, copy_run, error_of, init_run, module_workspace, plan, snapshot, tau
from taulib.collect import bundle, destination
from taulib.errors import Conflict
from taulib.fs import atomic
from taulib.fs.openat import PRIVATE
from taulib.fs.tree import Tree

PRIVATE_MODES = (0o700, 0o600)
GROUP_MODES = (0o750, 0o640)


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """A complete run of 80 records in 4 shards (3 partitions of 30 rows). Copy it to collect."""
    return complete_run(module_workspace(tmp_path_factory, "collect-modes"))


def collect(run_dir: Path, dest: Path, *options: str, env: dict | None = None):
    return tau("tau-collect", str(run_dir), "--destination", str(dest), *options, env=env)


def modes_below(folder: Path) -> dict[str, tuple[str, int]]:
    """Every entry of a dataset, its folder as ".": (kind, permission bits), read without following a symlink."""
    found = {".": ("dir", stat.S_IMODE(folder.lstat().st_mode))}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
            found[str(path.relative_to(folder))] = (kind, stat.S_IMODE(st.st_mode))
    return found


def assert_modes(folder: Path, folders: int, files: int) -> dict[str, tuple[str, int]]:
    """Every folder of the dataset has mode `folders`, every file `files` (and there is nothing else)."""
    found = modes_below(folder)
    wrong = {rel: (kind, f"{mode:04o}") for rel, (kind, mode) in found.items()
             if (kind, mode) not in (("dir", folders), ("file", files))}
    assert not wrong, f"expected folders {folders:04o} and files {files:04o}: {wrong}"
    return found


def plan_of(run_dir: Path, collection_id: str = "collection-0001") -> dict:
    return json.loads((run_dir / "collections" / collection_id / "plan.json").read_text())


# -- by default, and asked for ---------------------------------------------------------------------------------------

def test_a_dataset_is_private_by_default_its_folder_0700_and_every_file_0600(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    proc = collect(run_dir, dest)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["group_readable"] is False
    found = assert_modes(dest, *PRIVATE_MODES)
    assert sorted(found) == [".", "_tau_collection.json", "part-00000.parquet", "part-00001.parquet",
                             "part-00002.parquet"]
    collection = plan_of(run_dir)
    assert (collection["group_readable"], collection["options"]["group_readable"]) == (False, None)


def test_group_readable_gives_its_folder_0750_and_every_file_0640_and_says_so(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    proc = collect(run_dir, dest, "--group-readable")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["group_readable"], doc["records"], doc["partitions"]) == (True, 80, 3)
    found = assert_modes(dest, *GROUP_MODES)
    assert sorted(found) == [".", "_tau_collection.json", "part-00000.parquet", "part-00001.parquet",
                             "part-00002.parquet"]
    collection = plan_of(run_dir)
    assert (collection["group_readable"], collection["options"]["group_readable"]) == (True, True)
    table = collect(run_dir, dest, "--group-readable", "-o", "table")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[1] == "group-readable: folders 0750, files 0640"
    plain = collect(run_dir, run_dir.parent / "plain", "-o", "table")
    assert plain.returncode == 0 and "group-readable" not in plain.stdout


def test_the_datasets_own_record_says_whether_it_is_group_readable(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    for name, options, readable in [("shared", ("--group-readable",), True), ("own", (), False),
                                    ("shared-tasks", ("--group-readable", "--tasks", "3"), True)]:
        assert collect(run_dir, run_dir.parent / name, *options).returncode == 0
        result = json.loads((run_dir.parent / name / "_tau_collection.json").read_bytes())
        assert result["group_readable"] is readable, name


def test_the_same_winners_give_the_same_bytes_private_or_group_readable(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    for name, options in [("own", ()), ("shared", ("--group-readable",))]:
        assert collect(run_dir, run_dir.parent / name, *options).returncode == 0

    def parts(name: str) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in (run_dir.parent / name).iterdir() if p.name.startswith("part-")}
    assert parts("own") == parts("shared") and len(parts("own")) == 3


UMASK_COLLECT = """
import json, os, sys
os.umask(int(sys.argv[1], 8))
from taulib.collect import collection
from taulib.rundir.run import Run
with Run(sys.argv[2]) as run:
    doc = collection.collect(run, sys.argv[3], readable=sys.argv[4] == "yes", task_count=int(sys.argv[5]),
                             progress=False)
print(json.dumps(doc))
"""


@pytest.mark.parametrize("tasks", [1, 3])
@pytest.mark.parametrize("umask", [0o077, 0o022, 0o000], ids=["umask-077", "umask-022", "umask-000"])
def test_the_modes_are_exact_whatever_the_umask_of_the_process_and_its_workers(done, tmp_path, umask, tasks):
    """The library called by a process of any umask (tau's commands set 077 themselves; its workers inherit it)."""
    run_dir = copy_run(done, tmp_path / "ws")
    for name, readable, want in [("shared", "yes", GROUP_MODES), ("own", "no", PRIVATE_MODES)]:
        dest = run_dir.parent / name
        proc = subprocess.run([PYTHON, "-c", UMASK_COLLECT, f"{umask:o}", str(run_dir), str(dest), readable,
                               str(tasks)], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert (doc["state"], doc["records"], doc["tasks"], doc["group_readable"]) == (
            "succeeded", 80, tasks, readable == "yes")
        assert_modes(dest, *want)
        if tasks > 1:
            folder = run_dir / "collections" / doc["collection_id"]
            assert sorted(n for n in os.listdir(folder) if n.startswith("task-")) == [
                f"task-{k:05d}.json" for k in range(tasks)]


def test_tasks_in_local_worker_processes_write_every_partition_0640(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    proc = collect(run_dir, dest, "--group-readable", "--tasks", "3", "--rows-per-partition", "10")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["tasks"], doc["partitions"], doc["group_readable"]) == (3, 8, True)
    assert len(assert_modes(dest, *GROUP_MODES)) == 1 + 8 + 1


def test_the_plans_collection_group_readable_makes_every_collection_of_the_run_group_readable(workspace):
    run_dir = complete_run(workspace, records=20, shards=2, collection={"allowed_roots": [],
                                                                        "group_readable": True})
    assert json.loads((run_dir / "plan.json").read_text())["collection"] == {"allowed_roots": [],
                                                                            "group_readable": True}
    dest = workspace / "data"
    proc = collect(run_dir, dest)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["group_readable"] is True
    assert_modes(dest, *GROUP_MODES)
    collection = plan_of(run_dir)
    assert (collection["group_readable"], collection["options"]["group_readable"]) == (True, None)
    again = collect(run_dir, dest, "--group-readable")  # the plan's shape, said out loud
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["created"] is False


def test_a_plan_that_asks_for_private_collections_is_the_plan_without_the_field(workspace):
    asked = init_run(workspace, "asked", plan_doc=plan(collection={"group_readable": False}))
    silent = init_run(workspace, "silent", plan_doc=plan())
    mine, theirs = (json.loads((r / "plan.json").read_text()) for r in (asked, silent))
    assert mine["collection"] == {"allowed_roots": []}
    assert {k: v for k, v in mine.items() if k != "run_id"} == {k: v for k, v in theirs.items() if k != "run_id"}


def test_a_plan_whose_group_readable_is_not_a_boolean_is_refused_before_the_run_exists(workspace):
    proc = tau("tau-init", str(workspace / "run"), input=json.dumps(plan(collection={"group_readable": "yes"})))
    assert proc.returncode == 65, proc.stderr
    err = error_of(proc)
    assert (err["error"], err["message"]) == ("bad_input", "tau-init: plan on standard input does not match schema "
                                              "'plan-request' at /collection/group_readable: expected boolean, got "
                                              "string")
    assert not (workspace / "run").exists()


# -- part of the shape ------------------------------------------------------------------------------------------------

def test_the_same_destination_with_other_modes_exits_73_naming_what_is_there_and_changes_nothing(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    shared, own = run_dir.parent / "shared", run_dir.parent / "own"
    assert collect(run_dir, shared, "--group-readable").returncode == 0
    assert collect(run_dir, own).returncode == 0
    before, journal = {d: snapshot(d) for d in (shared, own)}, sorted(os.listdir(run_dir / "collections"))
    private = collect(run_dir, shared)
    assert private.returncode == 73, private.stderr
    err = error_of(private)
    assert (err["code"], err["error"]) == (73, "conflict")
    assert err["message"] == (
        f"tau-collect: destination {str(shared)!r} holds collection-0001 group-readable (folders 0750, files 0640), "
        "not private (folders 0700, files 0600) as asked; tau never overwrites a dataset, nor changes its modes: "
        "collect to another destination, or give --group-readable for that one")
    assert err["details"] == {"collection_id": "collection-0001", "destination": str(shared), "group_readable": True}
    readable = collect(run_dir, own, "--group-readable")
    assert readable.returncode == 73, readable.stderr
    assert error_of(readable)["message"] == (
        f"tau-collect: destination {str(own)!r} holds collection-0002 private (folders 0700, files 0600), not "
        "group-readable (folders 0750, files 0640) as asked; tau never overwrites a dataset, nor changes its modes: "
        "collect to another destination, or leave out --group-readable for that one")
    assert {d: snapshot(d) for d in (shared, own)} == before
    assert sorted(os.listdir(run_dir / "collections")) == journal
    assert_modes(shared, *GROUP_MODES)
    assert_modes(own, *PRIVATE_MODES)


def test_another_format_is_refused_with_the_options_that_ask_for_the_group_readable_dataset(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    assert collect(run_dir, dest, "--group-readable").returncode == 0
    proc = collect(run_dir, dest, "--format", "csv", "--group-readable")
    assert proc.returncode == 73, proc.stderr
    assert error_of(proc)["message"].endswith(
        "give --format parquet --rows-per-partition 30 --group-readable for that one")


def test_an_unfinished_group_readable_collection_is_resumed_with_its_modes_and_refused_private(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    crashed = collect(run_dir, dest, "--group-readable", env={"TAU_FAILPOINTS": "tau-collect:collect.staged=crash"})
    assert crashed.returncode == -9
    stages = [p for p in run_dir.parent.iterdir() if ".tau-stage-" in p.name]
    assert len(stages) == 1 and not dest.exists()
    assert_modes(stages[0], *GROUP_MODES)  # the stage has the dataset's modes before it is published
    other = collect(run_dir, dest)
    assert other.returncode == 73, other.stderr
    assert error_of(other)["message"].startswith(
        f"tau-collect: destination {str(dest)!r} is being collected by collection-0001 group-readable (folders 0750, "
        "files 0640), not private (folders 0700, files 0600) as asked;")
    elsewhere = collect(run_dir, run_dir.parent / "elsewhere")
    assert elsewhere.returncode == 75, elsewhere.stderr
    assert error_of(elsewhere)["message"] == (
        f"tau-collect: collection collection-0001 to {str(dest)!r} is not finished; run tau-collect for that "
        "destination first (--format parquet --rows-per-partition 30 --group-readable)")
    resumed = collect(run_dir, dest, "--group-readable")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["collection_id"] == "collection-0001"
    assert_modes(dest, *GROUP_MODES)


def test_a_collection_planned_by_an_older_tau_is_private(done, tmp_path):
    from taulib.collect import shape

    older = {"collection_id": "collection-0001", "destination": "/d", "format": "parquet", "rows_per_partition": 30}
    assert destination.modes(older) == PRIVATE and destination.group_readable(older) is False
    asked = shape.Shape("parquet", 30, {}, group_readable=False)
    shape.same_shape(older, asked, "holds")  # the same shape: nothing raised
    with pytest.raises(Conflict) as caught:
        shape.same_shape(older, asked._replace(group_readable=True), "holds")
    assert caught.value.code == 73
    assert "holds collection-0001 private (folders 0700, files 0600), not group-readable" in caught.value.message


# -- from the moment the dataset appears -----------------------------------------------------------------------------

class Watcher:
    """Looks at `dest` in a tight loop in a thread of its own, from the start of a with block to its end: each time
    it is there, the modes of its folder and of every entry in it, as seen then."""

    def __init__(self, dest: Path) -> None:
        self.dest, self.seen, self.looks = dest, [], 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.looks += 1
            try:
                top = os.lstat(self.dest)
                entries = {name: stat.S_IMODE(os.lstat(self.dest / name).st_mode) for name in os.listdir(self.dest)}
            except FileNotFoundError:
                continue
            self.seen.append((stat.S_IMODE(top.st_mode), entries))

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.mark.slow
@pytest.mark.parametrize("fallback", [False, True], ids=["renameat2", "no-renameat2"])
def test_from_the_moment_the_dataset_appears_every_mode_is_already_its_final_one(done, tmp_path, fallback):
    run_dir = copy_run(done, tmp_path / "ws")
    env = {"TAU_NO_RENAMEAT2": "1"} if fallback else None
    for round_ in range(20):
        dest = run_dir.parent / f"data-{round_}"
        options = ("--group-readable", "--tasks", "3") if round_ % 2 else ("--group-readable",)
        with Watcher(dest) as watcher:
            proc = collect(run_dir, dest, *options, env=env)
        assert proc.returncode == 0, proc.stderr
        assert watcher.seen, f"round {round_}: the watcher never saw {dest}"
        for folder_mode, entries in watcher.seen:
            if fallback and not entries:  # the empty claim before the stage replaces it: never wider
                assert folder_mode & ~0o750 == 0, f"round {round_}: the claim was {folder_mode:04o}"
                continue
            assert folder_mode == 0o750, f"round {round_}: {dest.name} appeared {folder_mode:04o}"
            assert entries and set(entries.values()) == {0o640}, f"round {round_}: {entries}"
            assert len(entries) == 4, f"round {round_}: {sorted(entries)} (a dataset appears whole)"


# -- a crash right after the rename ----------------------------------------------------------------------------------

@pytest.mark.parametrize("tasks", ["1", "3"])
def test_a_collection_killed_right_after_its_rename_has_published_its_final_modes(done, tmp_path, tasks):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    crashed = collect(run_dir, dest, "--group-readable", "--tasks", tasks,
                      env={"TAU_FAILPOINTS": "tau-collect:collect.renamed=crash"})
    assert crashed.returncode == -9, crashed.stderr
    assert_modes(dest, *GROUP_MODES)
    assert not [p for p in run_dir.parent.iterdir() if ".tau-stage-" in p.name]
    adopted = collect(run_dir, dest, "--group-readable", "--tasks", tasks)
    assert adopted.returncode == 0, adopted.stderr
    doc = json.loads(adopted.stdout)
    assert (doc["collection_id"], doc["state"], doc["group_readable"]) == ("collection-0001", "succeeded", True)
    assert_modes(dest, *GROUP_MODES)


# -- --upload: the seal too -------------------------------------------------------------------------------------------

def test_a_group_readable_dataset_uploaded_is_sealed_with_its_tau_folder_0750_and_files_0640(done, tmp_path):
    import socket

    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "sealed"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        origin = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens: the upload fails, after publication
    proc = collect(run_dir, dest, "--group-readable", "--upload", f"{origin}/devstoreaccount1/box/p",
                   env={"TAU_TRUSTED_BLOB_ENDPOINTS": origin, "TAU_BLOB_RETRIES": "0"})
    assert proc.returncode == 69, proc.stderr
    assert "collection collection-0001 is published at" in error_of(proc)["message"]
    found = assert_modes(dest, *GROUP_MODES)
    assert {".tau", ".tau/bundles", ".tau/current"} <= set(found)
    verify = tau("tau-bundle-verify", str(dest))
    assert verify.returncode == 0, verify.stderr


def test_the_seal_of_a_group_readable_stage_makes_its_folders_and_files_with_the_dataset_modes(tmp_path):
    stage = tmp_path / ".dataset.tau-stage-0123456789abcdef"
    stage.mkdir(mode=0o750)
    (stage / "_tau_collection.json").write_bytes(b"{}")
    result = {"collection_id": "collection-0001", "files": []}
    plan_doc = {"collection_id": "collection-0001", "group_readable": True,
                "upload": {"url": "https://acct.blob.core.windows.net/b/p", "generation": "run-0a1b2c3d-c1"}}
    old = os.umask(0o077)
    try:
        with Tree.open(str(tmp_path), label="parent") as parent:
            bundle.seal(SimpleNamespace(run_id="run"), plan_doc, result, parent, stage.name)
    finally:
        os.umask(old)
    found = modes_below(stage)
    assert found[".tau"] == found[".tau/bundles"] == ("dir", 0o750)
    assert found[".tau/current"] == found[".tau/bundles/run-0a1b2c3d-c1.json"] == ("file", 0o640)


# -- the stage checked before it is published -----------------------------------------------------------------------

def a_stage(parent: Path, plan_doc: dict, folder_mode: int, file_mode: int) -> Path:
    stage = parent / destination.stage_name(plan_doc)
    stage.mkdir()
    os.chmod(stage, folder_mode)
    for name in ("part-00000.csv", "_tau_collection.json"):
        (stage / name).write_bytes(b"x\n")
        os.chmod(stage / name, file_mode)
    return stage


SHARED_PLAN = {"collection_id": "collection-0007", "destination": "/x/data", "group_readable": True}


@pytest.mark.parametrize("change, problem", [
    (lambda s: os.chmod(s / "part-00000.csv", 0o644), "'part-00000.csv' of mode 0644, where tau made it 0640"),
    (lambda s: os.chmod(s / "part-00000.csv", 0o600), "'part-00000.csv' of mode 0600, where tau made it 0640"),
    (lambda s: (s / "sub").mkdir(mode=0o755), "'sub' of mode 0755, where tau made it 0750"),
    (lambda s: os.symlink("/etc/passwd", s / "part-00001.csv"), "'part-00001.csv', which is neither a regular file "
                                                                "nor a folder"),
], ids=["wider-file", "private-file", "wider-folder", "symlink"])
def test_a_stage_entry_tau_did_not_make_so_is_never_published(tmp_path, change, problem):
    stage = a_stage(tmp_path, SHARED_PLAN, 0o750, 0o640)
    change(stage)
    with Tree.open(str(tmp_path), label="parent") as parent, pytest.raises(Conflict) as caught:
        destination.check_modes(parent, SHARED_PLAN)
    assert caught.value.code == 73
    assert caught.value.message == (f"the stage of collection collection-0007 holds {problem}: it was changed behind "
                                    "tau's back; nothing is published")


def test_a_stage_folder_left_narrower_by_a_crash_is_given_its_mode_and_a_right_stage_passes(tmp_path):
    stage = a_stage(tmp_path, SHARED_PLAN, 0o700, 0o640)  # a crash between its mkdir and its fchmod
    with Tree.open(str(tmp_path), label="parent") as parent:
        destination.check_modes(parent, SHARED_PLAN)
    assert stat.S_IMODE(stage.stat().st_mode) == 0o750
    own_plan = dict(SHARED_PLAN, group_readable=False, collection_id="collection-0008")
    a_stage(tmp_path, own_plan, 0o700, 0o600)
    with Tree.open(str(tmp_path), label="parent") as parent:
        destination.check_modes(parent, own_plan)
        with pytest.raises(Conflict):  # a private collection's stage holds no group-readable file
            os.chmod(tmp_path / destination.stage_name(own_plan) / "part-00000.csv", 0o640)
            destination.check_modes(parent, own_plan)


# -- the tree's modes ------------------------------------------------------------------------------------------------

def test_a_subtree_with_modes_makes_its_folder_and_files_with_them_and_never_widens_an_existing_folder(tmp_path):
    old = os.umask(0o077)
    try:
        with Tree.open(str(tmp_path), label="parent") as parent:
            with parent.subtree("made", create=True, modes=destination.GROUP_READABLE) as made:
                made.write_new("a/b.json", b"{}")
                os.close(made.create("c.bin"))
                os.close(made.create("d.bin", readable=True))
            (tmp_path / "there").mkdir(mode=0o700)
            with parent.subtree("there", create=True, modes=destination.GROUP_READABLE) as there:
                there.write_new("e.json", b"{}")
            with parent.subtree("plain", create=True) as plain:
                plain.write_new("f.json", b"{}")
    finally:
        os.umask(old)
    assert modes_below(tmp_path / "made") == {".": ("dir", 0o750), "a": ("dir", 0o750), "a/b.json": ("file", 0o640),
                                              "c.bin": ("file", 0o640), "d.bin": ("file", 0o640)}
    assert modes_below(tmp_path / "there") == {".": ("dir", 0o700), "e.json": ("file", 0o640)}
    assert modes_below(tmp_path / "plain") == {".": ("dir", 0o700), "f.json": ("file", 0o600)}


@pytest.mark.parametrize("umask", [0o077, 0o022, 0o277, 0o000])
def test_a_new_file_has_exactly_the_mode_asked_for_whatever_the_umask(tmp_path, umask):
    dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    old = os.umask(umask)
    try:
        atomic.write_new(dfd, "private", b"x")
        atomic.write_new(dfd, "shared", b"x", 0o640)
    finally:
        os.umask(old)
        os.close(dfd)
    assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o640


# -- the client image: the option handed on ---------------------------------------------------------------------------

def test_a_collection_in_the_client_image_hands_group_readable_to_the_tau_inside(done, tmp_path, monkeypatch):
    from taulib.collect import collection, image
    from taulib.rundir.run import Run

    run_dir = copy_run(done, tmp_path / "ws")
    handed: list[list[str]] = []
    monkeypatch.setattr(image, "wanted", lambda run, environ=None: True)
    monkeypatch.setattr(image, "inside", lambda run, dest: None)
    monkeypatch.setattr(image, "run_inside", lambda run, args, folders, environ=None: handed.append(args) or {})
    with Run(str(run_dir)) as run:
        collection.collect(run, str(run_dir.parent / "a"), readable=True)
        collection.collect(run, str(run_dir.parent / "b"), fmt="csv", allow_missing=True)
    assert handed == [["--destination", str(run_dir.parent / "a"), "--group-readable"],
                      ["--destination", str(run_dir.parent / "b"), "--format", "csv", "--allow-missing"]]
