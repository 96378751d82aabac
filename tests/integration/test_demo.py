"""`make demo`'s script, end to end, in a private folder: the whole story must pass on every check."""

import stat
import subprocess
from pathlib import Path

import pytest

from helpers import ROOT, env_for_tests


@pytest.mark.parametrize("scheduler", [pytest.param("local", marks=pytest.mark.slow),
                                       pytest.param("slurm", marks=pytest.mark.slurm)])
def test_the_demo_wins_every_shard_and_collects_every_record_with_private_permissions(tmp_path: Path, scheduler,
                                                                                     request):
    if scheduler == "slurm":
        request.getfixturevalue("cluster")
    work = tmp_path / "demo"
    proc = subprocess.run([str(ROOT / "contrib/demo/run-demo.sh")], capture_output=True, text=True, timeout=600,
                          env=env_for_tests({"DEMO_DIR": str(work), "SCHEDULER": scheduler}))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo: ok: 8 of 8 shards won; 800 of 800 records collected" in proc.stdout
    for path in (work / "run").rglob("*"):
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path} has mode {oct(mode)}"
    assert sorted(p.name for p in (work / "dataset").iterdir()) == [
        "_tau_collection.json", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet",
        "part-00003.parquet"]
