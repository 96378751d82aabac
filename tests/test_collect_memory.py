"""tau-collect's allocator settings (taulib.env's `memory` variables): set for itself before its interpreter starts,
by starting itself again in the same process; a value the caller set is kept; valid for the pyarrow installed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import complete_run, copy_run, module_workspace, start_paused, tau

from taulib import env
from taulib.cli import collect as collect_cli

TUNED = {"ARROW_DEFAULT_MEMORY_POOL": "jemalloc", "JE_ARROW_MALLOC_CONF": "narenas:1",
         "MALLOC_MMAP_THRESHOLD_": "8388608", "MALLOC_TRIM_THRESHOLD_": "67108864"}


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    return complete_run(module_workspace(tmp_path_factory, "collect-memory"))


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def test_the_allocator_settings_are_the_ones_a_process_lacks():
    assert env.allocators({}) == TUNED
    assert env.allocators({"MALLOC_TRIM_THRESHOLD_": "4096"}) == {k: v for k, v in TUNED.items()
                                                                   if k != "MALLOC_TRIM_THRESHOLD_"}
    assert env.allocators(dict(TUNED)) == {}  # started again with them: nothing more to do, no second start
    assert env.allocators({"MALLOC_MMAP_THRESHOLD_": ""}) == TUNED  # an empty value is no value
    # an Arrow without jemalloc, or a caller who chose another pool: Arrow's allocator is left alone
    without_arrow = {k: v for k, v in TUNED.items() if not k.startswith(("ARROW", "JE_"))}
    assert env.allocators({}, jemalloc=False) == without_arrow
    assert env.allocators({"ARROW_DEFAULT_MEMORY_POOL": "system"}) == without_arrow


def test_a_process_started_again_once_does_not_start_itself_again(tmp_path):
    script = tmp_path / "prog.py"  # a program whose environment loses what it was given (a site hook, say)
    script.write_text("import os, sys\n"
                      "sys.path.insert(0, os.environ['ROOT'])\n"
                      "from taulib.cli import common\n"
                      "print('start', os.environ.get('TAU_RESTARTED'), flush=True)\n"
                      "os.environ.pop('X_SETTING', None)\n"
                      "common.restart_with({'X_SETTING': '1'})\n"
                      "print('ran', os.environ.get('X_SETTING'), flush=True)\n")
    environ = {k: v for k, v in os.environ.items() if k != "TAU_RESTARTED"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          env=dict(environ, ROOT=str(Path(__file__).resolve().parent.parent)))
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines() == ["start None", "start 1", "ran None"]  # started again once, then ran


def test_the_installed_pyarrow_is_found_to_have_jemalloc_and_takes_the_settings_without_a_word():
    import pyarrow as pa

    has = "jemalloc" in pa.supported_memory_backends()
    saved = {k: os.environ.pop(k) for k in TUNED if k in os.environ}
    try:
        settings = collect_cli.allocators()
    finally:
        os.environ.update(saved)
    assert ("ARROW_DEFAULT_MEMORY_POOL" in settings) == has
    proc = subprocess.run([sys.executable, "-c", "import pyarrow as pa; import pyarrow.parquet;"
                           "print(pa.default_memory_pool().backend_name)"],
                          capture_output=True, text=True, env=dict(os.environ, **settings), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout.strip(), proc.stderr) == ("jemalloc" if has else pa.default_memory_pool().backend_name, "")


def test_tau_collect_runs_with_the_settings_in_its_own_process_and_keeps_the_callers(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    proc = start_paused("tau-collect", str(run_dir), "--destination", str(run_dir.parent / "data"),
                        failpoint="collect.planned", trace=tmp_path / "trace",
                        env={"MALLOC_TRIM_THRESHOLD_": "4096"})
    try:
        seen = environ_of(proc.pid)  # the PID tau-collect was started as: it started itself again in place
        assert {k: seen.get(k) for k in TUNED} == dict(TUNED, MALLOC_TRIM_THRESHOLD_="4096")
        assert seen.get("TAU_RESTARTED") == "1"  # once: the process started again does not start itself again
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert json.loads(err)["message"] == "tau-collect: interrupted by SIGTERM"


def test_tau_collect_started_again_writes_its_one_json_document_and_nothing_on_stderr(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    proc = tau("tau-collect", str(run_dir), "--destination", str(run_dir.parent / "data"), "--format", "jsonl")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert json.loads(proc.stdout)["records"] == 80
    # `tau collect` (the porcelain's dispatch) starts itself again the same way, with its own arguments
    proc = tau("tau", "collect", str(run_dir), "--destination", str(run_dir.parent / "more"), "-o", "table")
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert proc.stdout.startswith("collection collection-0002: 80 records in ")


def test_a_file_being_written_is_handed_to_writeback_block_by_block_and_dropped_lag_blocks_later(monkeypatch):
    from taulib.fs import writeback

    calls = []
    monkeypatch.setattr(writeback, "DONTNEED", 4)
    monkeypatch.setattr(writeback.os, "posix_fadvise", lambda fd, offset, length, advice: calls.append(
        (fd, offset // writeback.STEP, length // writeback.STEP, advice)))
    behind = writeback.Behind(7)
    for end in (-5, 0, writeback.STEP - 1):
        behind.wrote(end)
    assert calls == []  # no block is complete yet
    behind.wrote(writeback.STEP)
    assert calls == [(7, 0, 1, 4)]
    calls.clear()
    behind.wrote(4 * writeback.STEP + 3)  # three more blocks at once
    assert calls == [(7, 1, 1, 4), (7, 2, 1, 4), (7, 0, 1, 4), (7, 3, 1, 4), (7, 1, 1, 4)]
    calls.clear()
    behind.wrote(4 * writeback.STEP + 100)
    assert calls == []  # nothing new is complete: nothing asked twice


def test_a_partition_written_through_the_sink_has_every_byte_and_its_sha256(tmp_path):
    import hashlib

    from taulib.collect.outputs import Sink

    data = os.urandom(3 << 20) * 9  # 27 MiB: three blocks handed to writeback, one dropped
    fd = os.open(tmp_path / "part", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    sink = Sink(fd)
    for at in range(0, len(data), 1 << 19):
        sink.write(data[at:at + (1 << 19)])
    sink.finish()
    assert (tmp_path / "part").read_bytes() == data
    assert (sink.size, sink.sha.hexdigest()) == (len(data), hashlib.sha256(data).hexdigest())
