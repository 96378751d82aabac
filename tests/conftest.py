import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A private workspace folder (0700), as a run's parent should be."""
    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    os.chmod(ws, 0o700)
    return ws


@pytest.fixture(scope="module")
def settled(request, tmp_path_factory) -> Path:
    """A settled local run of 4 shards whose shard-00001 failed its first attempt (not retried), one per test
    module. Copy it (helpers.copy_run) to change it."""
    from helpers import init_run, settle, tau

    ws = tmp_path_factory.mktemp(request.module.__name__.removeprefix("test_cli_")) / "ws"
    ws.mkdir(mode=0o700)
    run_dir = init_run(ws, fail_first=("shard-00001",))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    settle(run_dir)
    return run_dir


@pytest.fixture(scope="session")
def nolink_fs(tmp_path_factory):
    """A real FUSE filesystem without hard links and without renameat2's flags (tests/fusefs.py), mounted once for
    the session; yields its mount point. Tests make their own folders in it."""
    import fusefs

    with fusefs.mounted(tmp_path_factory.mktemp("fuse")) as mountpoint:
        yield mountpoint


@pytest.fixture
def nolink_workspace(nolink_fs, request) -> Path:
    """A private workspace folder on the filesystem without hard links."""
    import re

    ws = nolink_fs / re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:100]
    ws.mkdir(mode=0o700)
    return ws
