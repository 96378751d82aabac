"""taulib.rundir.records.RunDir: the one writer's promises, checked on real files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from taulib import jsonio
from taulib.errors import BadInput, Conflict, Refused
from taulib.rundir.records import RunDir

SHARD = "shards/shard-00000/shard.json"
READINESS = "shards/shard-00000/attempts/attempt-0001/readiness.json"
TEMP_A = ".tau.0123456789abcdef.tmp"
TEMP_B = ".tau.fedcba9876543210.tmp"


def shard_record(end: int = 20) -> dict:
    return {"kind": "tau.shard", "schema_version": 1, "run_id": "run", "shard_id": "shard-00000", "index": 0,
            "record_start": 0, "record_end": end}


def readiness(revision: int, state: str = "running") -> dict:
    return {"kind": "tau.readiness", "schema_version": 1, "run_id": "run", "shard_id": "shard-00000",
            "attempt_id": "attempt-0001", "revision": revision, "state": state, "restarts": 0, "message": None,
            "updated_at": "2026-01-02T03:04:05.000006Z"}


@pytest.fixture
def run_path(workspace: Path) -> Path:
    path = workspace / "run"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def rd(run_path: Path):
    with RunDir(str(run_path)) as run_dir:
        yield run_dir


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def temps_in(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith(".tau."))


# -- immutable publish ----------------------------------------------------------------------------------------

def test_publish_creates_a_private_file_in_private_folders_whatever_the_umask(run_path, rd):
    old = os.umask(0)
    try:
        assert rd.publish(SHARD, shard_record()) is True
    finally:
        os.umask(old)
    assert mode_of(run_path / "shards") == 0o700
    assert mode_of(run_path / "shards" / "shard-00000") == 0o700
    assert mode_of(run_path / SHARD) == 0o600
    assert (run_path / SHARD).read_bytes() == jsonio.canonical(shard_record())
    assert temps_in(run_path / "shards" / "shard-00000") == []


def test_republishing_identical_bytes_is_an_idempotent_success(run_path, rd):
    assert rd.publish(SHARD, shard_record()) is True
    assert rd.publish(SHARD, shard_record()) is False
    with RunDir(str(run_path)) as again:
        assert again.publish(SHARD, shard_record()) is False
        assert again.read(SHARD, "tau.shard") == shard_record()
    assert temps_in(run_path / "shards" / "shard-00000") == []


def test_publishing_different_bytes_is_a_conflict_and_leaves_the_original(run_path, rd):
    rd.publish(SHARD, shard_record(20))
    with pytest.raises(Conflict) as err:
        rd.publish(SHARD, shard_record(21))
    assert err.value.code == 73
    assert "already exists with different content" in err.value.message
    assert SHARD in err.value.message
    assert (run_path / SHARD).read_bytes() == jsonio.canonical(shard_record(20))
    assert temps_in(run_path / "shards" / "shard-00000") == []


def test_a_record_that_fails_its_schema_is_never_written(run_path, rd):
    bad = dict(shard_record(), record_end="twenty")
    with pytest.raises(BadInput) as err:
        rd.publish(SHARD, bad)
    assert err.value.code == 65
    assert "does not match schema 'shard' at /record_end" in err.value.message
    assert not (run_path / "shards").exists()


# -- mutable replace ------------------------------------------------------------------------------------------

def test_a_new_mutable_record_must_start_at_revision_one(run_path, rd):
    with pytest.raises(Conflict) as err:
        rd.replace(READINESS, readiness(2))
    assert err.value.code == 73
    assert "revision must be 1, not 2" in err.value.message
    assert not (run_path / READINESS).exists()
    rd.replace(READINESS, readiness(1))
    assert rd.read(READINESS, "tau.readiness")["revision"] == 1
    assert mode_of(run_path / READINESS) == 0o600


def test_a_readiness_revision_that_does_not_grow_by_one_is_refused(run_path, rd):
    rd.replace(READINESS, readiness(1, "starting"))
    stored = (run_path / READINESS).read_bytes()
    for bad in (3, 1, 0):
        with pytest.raises(Conflict) as err:
            rd.replace(READINESS, readiness(bad, "running"))
        assert err.value.code == 73
        assert f"revision must be 2, not {bad}" in err.value.message
        assert err.value.details["expected_revision"] == 2
        assert (run_path / READINESS).read_bytes() == stored
    rd.replace(READINESS, readiness(2, "running"))
    assert rd.read(READINESS, "tau.readiness") == readiness(2, "running")
    with pytest.raises(Conflict) as err:
        rd.replace(READINESS, readiness(2, "stopped"))
    assert "revision must be 3, not 2" in err.value.message
    assert rd.read(READINESS, "tau.readiness") == readiness(2, "running")
    assert temps_in(run_path / READINESS.rpartition("/")[0]) == []


def test_replace_refuses_a_record_of_another_kind(run_path, rd):
    rd.replace(READINESS, readiness(1))
    other = {"kind": "tau.observation", "schema_version": 1, "run_id": "run", "shard_id": "shard-00000",
             "attempt_id": "attempt-0001", "revision": 2, "state": "running", "source": "queue",
             "terminal": False, "observed_at": "2026-01-02T03:04:05.000006Z",
             "changed_at": "2026-01-02T03:04:05.000006Z", "deadline": None, "exit_code": None, "reason": None}
    with pytest.raises(Conflict) as err:
        rd.replace(READINESS, other)
    assert "holds a tau.readiness record" in err.value.message
    assert rd.read(READINESS, "tau.readiness") == readiness(1)


# -- symlinks -------------------------------------------------------------------------------------------------

def test_a_symlink_where_a_record_is_expected_is_refused_and_never_followed(workspace, run_path, rd):
    outside = workspace / "outside.json"
    outside.write_bytes(jsonio.canonical(shard_record()))  # a valid record: following the link would "work"
    os.chmod(outside, 0o600)
    before = outside.read_bytes()
    rd.make_folders("shards/shard-00000")
    (run_path / SHARD).symlink_to(outside)

    with pytest.raises(Refused) as err:
        rd.read(SHARD, "tau.shard")
    assert err.value.code == 77
    assert "is a symlink; tau never follows one inside a run" in err.value.message
    with pytest.raises(Refused) as err:
        rd.publish(SHARD, shard_record(30))
    assert "is a symlink" in err.value.message
    with pytest.raises(Refused) as err:
        rd.open_read(SHARD)
    assert "is a symlink" in err.value.message

    assert outside.read_bytes() == before
    assert (run_path / SHARD).is_symlink()
    assert temps_in(run_path / "shards" / "shard-00000") == []


def test_replacing_through_a_symlinked_record_is_refused_and_leaves_the_target(workspace, run_path, rd):
    outside = workspace / "readiness.json"
    outside.write_bytes(jsonio.canonical(readiness(1)))
    os.chmod(outside, 0o600)
    rd.make_folders(READINESS.rpartition("/")[0])
    (run_path / READINESS).symlink_to(outside)
    with pytest.raises(Refused) as err:
        rd.replace(READINESS, readiness(2))
    assert err.value.code == 77
    assert "is a symlink" in err.value.message
    assert outside.read_bytes() == jsonio.canonical(readiness(1))
    assert (run_path / READINESS).is_symlink()


def test_a_symlink_where_a_folder_is_expected_is_refused_and_nothing_is_written_through_it(workspace, run_path,
                                                                                          rd):
    outside = workspace / "elsewhere"
    (outside / "shard-00000").mkdir(parents=True, mode=0o700)
    (outside / "shard-00000" / "shard.json").write_bytes(jsonio.canonical(shard_record()))
    os.chmod(outside / "shard-00000" / "shard.json", 0o600)
    (run_path / "shards").symlink_to(outside)
    listing = sorted(str(p.relative_to(outside)) for p in outside.rglob("*"))

    with pytest.raises(Refused) as err:
        rd.read(SHARD, "tau.shard")
    assert err.value.code == 77
    assert "is a symlink; tau never follows one inside a run" in err.value.message
    with pytest.raises(Refused) as err:
        rd.publish("shards/shard-00001/shard.json", dict(shard_record(), shard_id="shard-00001", index=1))
    assert "is a symlink" in err.value.message
    with pytest.raises(Refused):
        rd.make_folders("shards/shard-00002")

    assert sorted(str(p.relative_to(outside)) for p in outside.rglob("*")) == listing


def test_a_dangling_symlink_where_a_folder_would_be_created_is_refused_and_its_target_never_made(workspace,
                                                                                                run_path, rd):
    target = workspace / "never-made"
    (run_path / "shards").symlink_to(target)
    with pytest.raises(Refused) as err:
        rd.publish(SHARD, shard_record())
    assert err.value.code == 77
    assert "is a symlink; tau never follows one inside a run" in err.value.message
    assert not target.exists()
    assert (run_path / "shards").is_symlink()


def test_a_run_directory_that_is_a_symlink_is_refused(workspace, run_path):
    link = workspace / "link"
    link.symlink_to(run_path)
    with pytest.raises(Refused) as err:
        RunDir(str(link))
    assert err.value.code == 77
    assert "is a symlink; pass the real path" in err.value.message


# -- what is on disk must be trustworthy ----------------------------------------------------------------------

def plant(run_path: Path, rel: str, data: bytes) -> None:
    path = run_path / rel
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_bytes(data)
    os.chmod(path, 0o600)


def test_a_record_not_in_canonical_form_is_refused_on_read(run_path, rd):
    plant(run_path, SHARD, jsonio.pretty(shard_record()))
    with pytest.raises(BadInput) as err:
        rd.read(SHARD, "tau.shard")
    assert err.value.code == 65
    assert "is not in canonical form" in err.value.message


def test_a_record_that_fails_its_schema_on_disk_is_refused_on_read(run_path, rd):
    plant(run_path, SHARD, jsonio.canonical(dict(shard_record(), extra=1)))
    with pytest.raises(BadInput) as err:
        rd.read(SHARD, "tau.shard")
    assert err.value.code == 65
    assert "does not match schema 'shard'" in err.value.message
    assert "unexpected property 'extra'" in err.value.message


def test_a_record_that_is_not_json_or_of_another_kind_is_refused_on_read(run_path, rd):
    plant(run_path, SHARD, b'{"kind": "tau.shard", ')
    with pytest.raises(BadInput) as err:
        rd.read(SHARD)
    assert err.value.code == 65
    assert "is not valid JSON" in err.value.message
    plant(run_path, READINESS, jsonio.canonical(readiness(1)))
    with pytest.raises(BadInput) as err:
        rd.read(READINESS, "tau.shard")
    assert "has kind 'tau.readiness', expected 'tau.shard'" in err.value.message


def test_a_record_writable_by_others_is_refused_on_read(run_path, rd):
    plant(run_path, SHARD, jsonio.canonical(shard_record()))
    os.chmod(run_path / SHARD, 0o620)
    with pytest.raises(Refused) as err:
        rd.read(SHARD, "tau.shard")
    assert err.value.code == 77
    assert "writable by another user" in err.value.message


def test_a_group_writable_run_folder_is_refused(run_path):
    os.chmod(run_path, 0o770)
    with pytest.raises(Refused) as err:
        RunDir(str(run_path))
    assert err.value.code == 77
    assert "is writable by group or others" in err.value.message
    assert "chmod 700" in err.value.message


def test_a_group_writable_folder_inside_a_run_is_refused(run_path, rd):
    (run_path / "shards").mkdir(mode=0o700)
    os.chmod(run_path / "shards", 0o775)
    with pytest.raises(Refused) as err:
        rd.publish(SHARD, shard_record())
    assert err.value.code == 77
    assert "is writable by group or others" in err.value.message
    assert not (run_path / "shards" / "shard-00000").exists()


def test_a_path_component_outside_the_grammar_is_refused(rd):
    with pytest.raises(Refused) as err:
        rd.read("shards/../../etc/passwd")
    assert err.value.code == 77
    assert "path component '..' is not allowed" in err.value.message
    with pytest.raises(Refused) as err:
        rd.publish("shards/shard-00000\n/shard.json", shard_record())
    assert "path component 'shard-00000\\n' is not allowed" in err.value.message


# -- crash debris ---------------------------------------------------------------------------------------------

def test_a_temp_still_linked_to_a_record_is_removed_by_the_next_write_in_its_folder(run_path, rd):
    rd.publish(SHARD, shard_record())
    folder = run_path / "shards" / "shard-00000"
    os.link(folder / "shard.json", folder / TEMP_A)  # the state of a crash between link and unlink
    assert (folder / "shard.json").stat().st_nlink == 2

    rd.publish("shards/shard-00000/other.json", readiness(1))

    assert temps_in(folder) == []
    assert (folder / "shard.json").stat().st_nlink == 1
    assert rd.read(SHARD, "tau.shard") == shard_record()


def test_an_unlinked_orphan_temp_is_removed_by_the_next_write_in_its_folder(run_path, rd):
    rd.publish(SHARD, shard_record())
    folder = run_path / "shards" / "shard-00000"
    (folder / TEMP_A).write_bytes(b'{"half": ')
    os.chmod(folder / TEMP_A, 0o600)

    rd.replace("shards/shard-00000/readiness.json", readiness(1))

    assert temps_in(folder) == []
    assert rd.listdir("shards/shard-00000") == ["readiness.json", "shard.json"]


def test_debris_in_another_folder_waits_for_a_write_in_that_folder(run_path, rd):
    rd.publish(SHARD, shard_record())
    (run_path / TEMP_A).write_bytes(b"orphan")
    rd.publish("shards/shard-00000/other.json", readiness(1))
    assert temps_in(run_path) == [TEMP_A]


def test_files_that_do_not_match_the_exact_temp_grammar_are_left_alone(workspace, run_path, rd):
    rd.publish(SHARD, shard_record())
    folder = run_path / "shards" / "shard-00000"
    near_misses = [
        ".tau.0123456789ABCDEF.tmp",  # uppercase hex
        ".tau.0123456789abcde.tmp",  # 15 hex digits
        ".tau.0123456789abcdef0.tmp",  # 17 hex digits
        ".tau.0123456789abcdef.tmp.bak",
        "x.tau.0123456789abcdef.tmp",
        ".tau.0123456789abcdeg.tmp",
        ".tau.0123456789abcdef.temp",
        ".tau.0123456789abcdef.tmp\n",  # "$" alone would match before this final newline
    ]
    for name in near_misses:
        (folder / name).write_bytes(b"keep me")
    # grammar matches but identity does not: a symlink, and a file linked from outside the folder
    outside = workspace / "outside"
    outside.write_bytes(b"linked from elsewhere")
    (folder / TEMP_A).symlink_to(outside)
    os.link(outside, folder / TEMP_B)

    rd.publish("shards/shard-00000/other.json", readiness(1))

    for name in near_misses:
        assert (folder / name).read_bytes() == b"keep me", name
    assert (folder / TEMP_A).is_symlink()
    assert (folder / TEMP_B).read_bytes() == b"linked from elsewhere"
    assert outside.read_bytes() == b"linked from elsewhere"


def test_listdir_hides_temp_files_but_not_near_misses(run_path, rd):
    rd.publish(SHARD, shard_record())
    folder = run_path / "shards" / "shard-00000"
    (folder / TEMP_A).write_bytes(b"")
    (folder / ".tau.0123456789ABCDEF.tmp").write_bytes(b"")
    assert rd.listdir("shards/shard-00000") == [".tau.0123456789ABCDEF.tmp", "shard.json"]


@pytest.mark.slow
def test_reading_thousands_of_folders_keeps_a_bounded_number_of_descriptors_open(tmp_path):
    from taulib.fs import tree

    root = tmp_path / "run"
    with RunDir(str(root), create=True) as rd:
        for i in range(600):
            rd.publish(f"shards/shard-{i:05d}/attempts/attempt-0001/attempt.json".replace("attempt.json", "x.json"),
                       {"kind": "tau.shard", "schema_version": 1, "run_id": "run", "shard_id": f"shard-{i:05d}",
                        "index": i, "record_start": i, "record_end": i + 1})
        before = len(os.listdir("/proc/self/fd"))
        for i in range(600):
            assert rd.read(f"shards/shard-{i:05d}/attempts/attempt-0001/x.json", "tau.shard")["index"] == i
        after = len(os.listdir("/proc/self/fd"))
    assert after - before <= tree.MAX_CACHED_DIRS, (before, after)


def test_read_tail_gives_the_end_of_a_file_and_refuses_what_open_read_refuses(workspace, run_path, rd):
    from taulib.errors import NotFound

    plant(run_path, "submissions/submission-0001/out.log", b"0123456789")
    assert rd.read_tail("submissions/submission-0001/out.log", 4) == b"6789"
    assert rd.read_tail("submissions/submission-0001/out.log", 100) == b"0123456789"
    plant(run_path, "submissions/submission-0001/empty.log", b"")
    assert rd.read_tail("submissions/submission-0001/empty.log", 4) == b""
    with pytest.raises(NotFound):
        rd.read_tail("submissions/submission-0001/missing.log", 4)
    outside = workspace / "secret"
    outside.write_bytes(b"not yours")
    os.symlink(outside, run_path / "submissions/submission-0001/link.log")
    with pytest.raises(Refused) as err:
        rd.read_tail("submissions/submission-0001/link.log", 4)
    assert "link.log" in err.value.message
