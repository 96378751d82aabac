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
