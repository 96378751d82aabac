"""tau-collect --group-readable on the real Slurm test cluster: the stage tau-collect makes before it submits the
collection's job, and every file the array tasks write into it and the last task publishes, have the dataset's
modes (folders 0750, files 0640) from the moment the dataset appears; a private collection stays 0700 and 0600
(tau-collect(1) "Modes")."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from helpers import tau
from slurm import finished_run

pytestmark = pytest.mark.slurm


def modes_below(folder: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(folder.lstat().st_mode)}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            found[str(path.relative_to(folder))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def test_the_collection_jobs_tasks_publish_a_group_readable_dataset_with_its_final_modes(cluster, workspace,
                                                                                         extra_jobs):
    run_dir = finished_run(workspace, records=80, shards=4)
    dest = workspace / "shared"
    proc = tau("tau-collect", str(run_dir), "--destination", str(dest), "--group-readable", "--tasks", "3",
               "--rows-per-partition", "10")
    assert proc.returncode == 0, proc.stderr
    submitted = json.loads(proc.stdout)
    assert (submitted["state"], submitted["group_readable"], submitted["tasks"]) == ("submitted", True, 3)
    stages = [p for p in workspace.iterdir() if ".tau-stage-" in p.name]
    assert len(stages) == 1, sorted(os.listdir(workspace))
    if not dest.exists():  # made by tau-collect before the job was submitted, with the dataset's folder mode
        assert stat.S_IMODE(stages[0].stat().st_mode) == 0o750
    seen: list[dict[str, int]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                seen.append(modes_below(dest))
            except FileNotFoundError:
                continue

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        waited = tau("tau-collect", str(run_dir), "--destination", str(dest), "--group-readable",
                     "--rows-per-partition", "10", "--wait")
    finally:
        stop.set()
        watcher.join(timeout=10)
    assert waited.returncode == 0, waited.stderr
    doc = json.loads(waited.stdout)
    assert (doc["collection_id"], doc["state"], doc["partitions"], doc["group_readable"]) == (
        "collection-0001", "succeeded", 8, True)
    folder = run_dir / "collections" / "collection-0001"
    assert sorted(n for n in os.listdir(folder) if n.startswith("task-")) == [f"task-{k:05d}.json" for k in range(3)]
    final = modes_below(dest)
    assert final == {".": 0o750, "_tau_collection.json": 0o640, **{f"part-{k:05d}.parquet": 0o640 for k in range(8)}}
    assert seen and all(look == final for look in seen), [look for look in seen if look != final][:3]
    assert not [p for p in workspace.iterdir() if ".tau-stage-" in p.name]

    private = workspace / "own"
    proc = tau("tau-collect", str(run_dir), "--destination", str(private), "--tasks", "2", "--wait")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["group_readable"] is False
    assert set(modes_below(private).items()) == {(".", 0o700), ("_tau_collection.json", 0o600),
                                                 ("part-00000.parquet", 0o600), ("part-00001.parquet", 0o600),
                                                 ("part-00002.parquet", 0o600), ("part-00003.parquet", 0o600)}
    refused = tau("tau-collect", str(run_dir), "--destination", str(private), "--group-readable", "--wait")
    assert refused.returncode == 73, refused.stderr
    assert json.loads(refused.stderr.strip().splitlines()[-1])["message"] == (
        f"tau-collect: destination {str(private)!r} holds collection-0002 private (folders 0700, files 0600), not "
        "group-readable (folders 0750, files 0640) as asked; tau never overwrites a dataset, nor changes its modes: "
        "collect to another destination, or leave out --group-readable for that one")
