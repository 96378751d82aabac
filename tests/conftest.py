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
