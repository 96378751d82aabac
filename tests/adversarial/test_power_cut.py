"""The whole life of runs across power cuts on a file system that forgets what was not made durable
(tests/lazyfs.py, a LazyFS in miniature, as root).

Runs are made and driven on the mount as a person would (tau-init, then tau-drive --collect: submissions, the
local supervisor, attempts and their clients, observe | reconcile, winners, retries, the collection). The file
system is armed to freeze after a seeded random number of changing operations (at most PER_LIFE times a run);
when it freezes, every process of the workload is killed and the power is cut (everything not fsynced forgotten,
or a random part of it kept), and the file system continues. After each cut a fresh process must see a sane run:
tau-status exits 0 (66 when the run's run.json did not survive), every visible record is valid, every winner is
whole, a collection is absent or whole. Then the life starts again (tau-init when run.json did not survive,
tau-drive --collect) and must converge: every shard won, the dataset whole with every record. Runs follow one
another until CUTS cuts have happened.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import crashcheck as cc
import lazyfs
import pyarrow.parquet as pq
import pytest
from harness import REPORT, SCALE

from helpers import BIN, env_for_tests, plan, tau

pytestmark = [pytest.mark.slow, pytest.mark.root]

CUTS = 20 * SCALE
SEED = 22
MOST = 400  # a cut comes after 1..MOST changing operations (a life makes about 600)
RECORDS = 8
PER_LIFE = 3  # cuts in one run's life at most (then it is left to finish)


class Workload:
    """The processes of the life, all marked by one environment variable, so that all can be found and killed."""

    def __init__(self, control: Path) -> None:
        self.control = control
        self.mark = f"TAU_TEST_POWER_CUT={uuid.uuid4().hex}".encode()
        self.env = env_for_tests({"TAU_TEST_POWER_CUT": self.mark.split(b"=")[1].decode()})

    def pids(self) -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if self.mark in fh.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                continue
        return found

    def run(self, *argv: str, stdin: bytes = b"", timeout: float = 300) -> int | None:
        """Run a tau command; its exit status, or None when the file system froze under it (then the power was
        cut: every process of the workload killed, the unsynced state forgotten)."""
        proc = subprocess.Popen([str(BIN / argv[0]), *argv[1:]], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=self.env, start_new_session=True)
        proc.stdin.write(stdin)
        proc.stdin.close()
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            if (self.control / "frozen").exists():
                return None
            assert time.monotonic() < deadline, f"{argv} did not end"
            time.sleep(0.02)
        self.stderr = proc.stderr.read().decode(errors="replace")
        if (self.control / "frozen").exists():  # it froze a process the command left behind (a supervisor)
            return None
        return proc.returncode

    def cut(self, seed: int) -> str:
        """Kill every process of the workload, then cut the power; what the cut kept."""
        self.kill()
        lazyfs.say(self.control / "cut", str(seed))
        deadline = time.monotonic() + 30
        while not (self.control / "cut-done").exists():
            assert time.monotonic() < deadline, "the file system did not cut the power"
            time.sleep(0.02)
        deadline = time.monotonic() + 30
        while self.kill():  # what started meanwhile, and what waited on the frozen file system, ends now
            assert time.monotonic() < deadline, "the workload's processes did not die"
            time.sleep(0.05)
        done = (self.control / "cut-done").read_text().strip()
        (self.control / "cut-done").unlink()
        lazyfs.say(self.control / "resume", "")
        return done

    def kill(self) -> list[int]:
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def arm(self, after: int) -> None:
        lazyfs.say(self.control / "arm", str(after))


def sane(run_dir: Path, dest: Path, workload: Workload) -> list[str]:
    """What a fresh process finds wrong with the run and its collection after a cut (nothing, or why)."""
    proc = tau("tau-status", str(run_dir), env=workload.env)
    exists = (run_dir / "run.json").exists()
    found = []
    if proc.returncode != (0 if exists else 66) or "Traceback" in proc.stderr:
        found.append(f"tau-status exited {proc.returncode}: {proc.stderr[-300:]}")
    return found + cc.problems_of_run(run_dir) + cc.problems_of_destination(dest)


def test_the_file_system_forgets_at_a_cut_what_was_not_made_durable_and_keeps_what_was(tmp_path):
    with lazyfs.mounted(tmp_path) as (mnt, control):
        workload = Workload(control)
        code = ("import os\n"
                "def put(name, sync):\n"
                "    fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o600)\n"
                "    os.write(fd, b'data')\n"
                "    os.fsync(fd) if sync else None\n"
                "    os.close(fd)\n"
                "put('kept', True)\n"
                "put('lost', False)\n"
                "os.fsync(os.open('.', os.O_RDONLY))\n"
                "put('unnamed', True)\n"
                "os.mkdir('last')\n")
        workload.arm(100)
        proc = subprocess.run([sys.executable, "-c", code], cwd=mnt, env=workload.env, timeout=60)
        assert proc.returncode == 0
        workload.arm(1)
        frozen = subprocess.Popen(["touch", str(mnt / "late")], env=workload.env)
        deadline = time.monotonic() + 30
        while not (control / "frozen").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert workload.cut(seed=1).startswith("1 durable")  # seed 1: only what was fsynced
        frozen.wait(timeout=30)
        assert sorted(os.listdir(mnt)) == ["kept", "lost"]
        assert (mnt / "kept").read_bytes() == b"data" and (mnt / "lost").read_bytes() == b""
        (mnt / "again").write_bytes(b"x")  # it serves on


def test_the_lifecycle_converges_across_twenty_power_cuts(tmp_path):
    rng = random.Random(SEED)
    # every cut kills the attempts it finds running, which count as failed: a budget that outlasts the cuts, and
    # windows of a second, so that an attempt that vanished is judged soon
    doc = plan(records=RECORDS, shards=2, fail_first=("shard-00001",),
               retry={"max_attempts": 3 + 2 * PER_LIFE, "max_failed_attempts": 1000, "max_failed_fraction": 1},
               windows={"accounting_lag_seconds": 1, "preemption_seconds": 1, "submission_visibility_seconds": 1})
    doc["command"][doc["command"].index("--rows-per-file") + 1] = "2"
    cuts, lives, broken, kept = 0, 0, [], []
    with lazyfs.mounted(tmp_path) as (mnt, control):
        workload = Workload(control)
        ws = mnt / "ws"
        ws.mkdir(mode=0o700)
        fd = os.open(mnt, os.O_RDONLY)
        os.fsync(fd)  # the workspace itself is durable before the first cut
        os.close(fd)
        while cuts < CUTS:
            lives += 1
            run_dir, dest = ws / f"run-{lives}", ws / f"data-{lives}"
            workload.arm(rng.randint(1, MOST))
            in_life = 0
            while True:
                code = 0
                if not (run_dir / "run.json").exists():  # (tau-init again on a driven run refuses its drive/: 73)
                    code = workload.run("tau-init", str(run_dir), stdin=json.dumps(doc).encode())
                if code is not None:
                    assert code == 0, workload.stderr
                    code = workload.run("tau-drive", str(run_dir), "--interval", "0.2", "--collect", str(dest))
                if code is not None:
                    assert code == 0, workload.stderr
                    break
                cuts += 1
                kept.append(workload.cut(seed=rng.randrange(1 << 30)))
                found = sane(run_dir, dest, workload)
                REPORT["power_cuts"] += 1
                if found:
                    REPORT["power_cuts_broken"] += 1
                    broken.append(f"life {lives}, cut {cuts} ({kept[-1]}): {found[0]}")
                in_life += 1
                workload.arm(rng.randint(1, MOST) if cuts < CUTS and in_life < PER_LIFE else 0)
            workload.arm(0)
            found = cc.problems_of_run(run_dir) + cc.problems_of_destination(dest)
            table = pq.read_table(dest)
            if found or sorted(table.column("id").to_pylist()) != list(range(RECORDS)):
                broken.append(f"life {lives} did not converge: {found or table.num_rows}")
    print(f"power cuts: {cuts} in {lives} lives, {len(broken)} broke an invariant; " + "; ".join(kept))
    assert not broken, "\n".join(broken)
