"""The crash-state model of tests/crashstates.py on small programs whose answers are known: what it records from
strace, and which states a power cut may leave (unsynced data and unsynced folder entries lost, synced ones kept)."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import crashstates as cs
import pytest

pytestmark = pytest.mark.skipif(not os.path.exists(cs.STRACE), reason="strace is missing (make system-deps)")


def run(tmp_path: Path, program: str) -> tuple[Path, cs.Recording]:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    rec = cs.record([sys.executable, "-c", textwrap.dedent(program)], root, cwd=root)
    assert rec.returncode == 0, rec.stderr
    return root, rec


def files(state: dict, prefix: str = "") -> dict[str, bytes]:
    out = {}
    for name, value in state.items():
        if name == "\0mode":
            continue
        if isinstance(value, dict):
            out.update(files(value, f"{prefix}{name}/"))
        else:
            out[f"{prefix}{name}"] = value[0]
    return out


def after_last(rec: cs.Recording) -> list[dict[str, bytes]]:
    return [files(s.state) for s in cs.crash_states(rec, dedupe=False) if s.cut == len(rec.ops)]


def test_the_log_replayed_is_what_the_program_left_writes_appends_offsets_dups_and_a_child_included(tmp_path):
    root, rec = run(tmp_path, """
        import os, subprocess
        fd = os.open("a", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.write(fd, b"hello\\n")
        os.writev(fd, [b"ab", b"cd"])
        os.dup2(fd, 9)
        os.close(fd)
        os.write(9, b"+dup")
        g = os.open("b", os.O_RDWR | os.O_CREAT, 0o600)
        os.pwrite(g, b"zz", 4)
        os.lseek(g, 1, os.SEEK_SET)
        os.write(g, b"y")
        os.ftruncate(g, 5)
        os.mkdir("d", 0o700)
        os.rename("b", "d/b")
        os.link("a", "c")
        os.unlink("a")
        subprocess.run(["sh", "-c", "printf x >> c"], check=True)
    """)
    assert files(cs.prefix(rec, len(rec.ops))) == {"c": b"hello\nabcd+dupx", "d/b": b"\0y\0\0z"}
    assert cs.digest(cs.prefix(rec, len(rec.ops))) == cs.digest(cs.capture(root))


def test_data_written_without_an_fsync_may_be_lost_or_zeroed_and_an_fsynced_file_keeps_it(tmp_path):
    root, rec = run(tmp_path, """
        import os
        for name, sync in (("loose", False), ("kept", True)):
            fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o600)
            os.write(fd, b"data")
            if sync:
                os.fsync(fd)
            os.close(fd)
        os.fsync(os.open(".", os.O_RDONLY))
    """)
    finals = after_last(rec)
    assert {s["loose"] for s in finals} == {b"data", b"", b"\0\0\0\0"}
    assert {s["kept"] for s in finals} == {b"data"}


def test_a_rename_or_a_create_is_lost_until_its_folder_is_fsynced_then_kept(tmp_path):
    root, rec = run(tmp_path, """
        import os
        def publish(name):
            fd = os.open(".tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, name.encode())
            os.fsync(fd)
            os.close(fd)
            os.rename(".tmp", name)
        publish("first")
        os.fsync(os.open(".", os.O_RDONLY))
        publish("second")  # no fsync of the folder after it
    """)
    finals = after_last(rec)
    assert all(s["first"] == b"first" for s in finals)
    assert {tuple(sorted(s)) for s in finals} == {("first", "second"), (".tmp", "first"), ("first",)}
    assert all(s.get("second", b"second") == b"second" for s in finals), "a renamed record is whole or absent"


def test_a_folder_made_without_an_fsync_of_its_parent_may_vanish_with_everything_in_it(tmp_path):
    root, rec = run(tmp_path, """
        import os
        os.mkdir("d", 0o700)
        fd = os.open("d/f", os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"x")
        os.fsync(fd)
        os.close(fd)
        os.fsync(os.open("d", os.O_RDONLY))
    """)
    assert {} in after_last(rec)
    assert {"d/f": b"x"} in after_last(rec)


def test_states_are_distinct_and_every_cut_has_its_prefix_state(tmp_path):
    root, rec = run(tmp_path, """
        import os
        fd = os.open("f", os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"1")
        os.write(fd, b"2")
        os.close(fd)
    """)
    states = list(cs.crash_states(rec))
    assert len({s.key for s in states}) == len(states)
    assert [files(s.state) for s in states if s.label == "prefix"] == [{}, {"f": b""}, {"f": b"1"}, {"f": b"12"}]
    assert {"f": b"1\0"} not in [files(s.state) for s in states]  # a write is kept whole or not at all
