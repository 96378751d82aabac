"""tau-collect: every shard's winner, in planned order, into one deterministic dataset at an authorised
destination; refuses existing, foreign or overlapping destinations and runs without every winner."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import complete_run, copy_run, error_of, init_run, settle, snapshot, tau


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """A complete run of 80 records in 4 shards (shard-00001 failed once and was retried). Copy it to collect."""
    ws = tmp_path_factory.mktemp("collect") / "ws"
    ws.mkdir(mode=0o700)
    return complete_run(ws, fail_first=("shard-00001",))


def collect(run_dir: Path, destination: Path, *options: str):
    return tau("tau-collect", str(run_dir), "--destination", str(destination), *options)


def stage_debris(parent: Path) -> list[str]:
    return sorted(n for n in os.listdir(parent) if ".tau-stage-" in n or n.endswith(".tau-reserved"))


def without_locks(snap: dict) -> dict:
    return {k: v for k, v in snap.items() if not k.startswith("locks/")}


def test_collect_writes_every_record_in_planned_order_into_fixed_size_partitions(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "dataset"
    proc = collect(run_dir, dest)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {k: doc[k] for k in ("kind", "run_id", "collection_id", "state", "created", "destination", "format",
                                "records", "partitions")} == {
        "kind": "tau.collection", "run_id": "run", "collection_id": "collection-0001", "state": "succeeded",
        "created": True, "destination": str(dest), "format": "parquet", "records": 80, "partitions": 3}
    assert [(f["path"], f["rows"]) for f in doc["files"]] == [
        ("part-00000.parquet", 30), ("part-00001.parquet", 30), ("part-00002.parquet", 20)]
    assert sorted(os.listdir(dest)) == ["_tau_collection.json", "part-00000.parquet", "part-00001.parquet",
                                        "part-00002.parquet"]
    ids = []
    for f in doc["files"]:
        path = dest / f["path"]
        assert path.stat().st_size == f["size"]
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        ids += pq.read_table(path).column("id").to_pylist()
    assert ids == list(range(80))
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    assert stage_debris(dest.parent) == []


def test_collecting_twice_to_the_same_destination_reports_the_first_collection(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "dataset"
    first = collect(run_dir, dest)
    assert first.returncode == 0, first.stderr
    before = snapshot(dest)
    second = collect(run_dir, dest)
    assert second.returncode == 0, second.stderr
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert (one["created"], two["created"]) == (True, False)
    assert {k: v for k, v in two.items() if k != "created"} == {k: v for k, v in one.items() if k != "created"}
    assert snapshot(dest) == before
    assert os.listdir(run_dir / "collections") == ["collection-0001"]


def test_two_identical_runs_collect_to_byte_identical_files(done, tmp_path):
    first_run = copy_run(done, tmp_path / "one")
    (tmp_path / "two").mkdir(mode=0o700)
    second_run = complete_run(tmp_path / "two", fail_first=("shard-00001",))
    first, second = first_run.parent / "dataset", second_run.parent / "dataset"
    assert collect(first_run, first).returncode == 0
    assert collect(second_run, second).returncode == 0
    parts = sorted(n for n in os.listdir(first) if n.startswith("part-"))
    assert parts == sorted(n for n in os.listdir(second) if n.startswith("part-")) and len(parts) == 3
    for name in parts:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_an_existing_destination_exits_73_and_is_left_alone(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "dataset"
    dest.mkdir(mode=0o700)
    (dest / "precious.txt").write_text("keep me\n")
    before_run, before_dest = snapshot(run_dir), snapshot(dest)
    proc = collect(run_dir, dest)
    assert proc.returncode == 73
    err = error_of(proc)
    assert (err["code"], err["error"]) == (73, "conflict")
    assert err["message"] == f"tau-collect: destination {str(dest)!r} already exists; tau never overwrites a dataset"
    assert snapshot(dest) == before_dest
    assert without_locks(snapshot(run_dir)) == without_locks(before_run)  # at most a sidecar lock file is new
    assert stage_debris(dest.parent) == []


def test_a_destination_outside_the_workspace_exits_77_and_creates_nothing(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = tmp_path / "elsewhere" / "dataset"
    before = snapshot(run_dir)
    proc = collect(run_dir, dest)
    assert proc.returncode == 77
    err = error_of(proc)
    assert (err["code"], err["error"]) == (77, "refused")
    assert err["message"] == (f"tau-collect: destination {str(dest)!r} is not below the run's workspace "
                              f"{str(run_dir.parent)!r} or an allowed root (plan collection.allowed_roots)")
    assert not (tmp_path / "elsewhere").exists()
    assert snapshot(run_dir) == before


def test_a_destination_that_climbs_out_of_the_workspace_exits_77(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    proc = collect(run_dir, Path(f"{run_dir.parent}/../escaped"))
    assert proc.returncode == 77
    assert "is not below the run's workspace" in error_of(proc)["message"]
    assert not (tmp_path / "escaped").exists()


def test_a_destination_inside_the_run_directory_exits_77(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    before = snapshot(run_dir)
    for dest in (run_dir / "dataset", run_dir / "shards" / "out", run_dir):
        proc = collect(run_dir, dest)
        assert proc.returncode == 77
        assert error_of(proc)["message"] == f"tau-collect: destination {str(dest)!r} overlaps the run directory"
    assert snapshot(run_dir) == before


def test_a_destination_whose_parent_others_can_write_exits_77(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    shared = run_dir.parent / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    proc = collect(run_dir, shared / "dataset")
    assert proc.returncode == 77
    assert error_of(proc)["message"] == (f"tau-collect: the destination's parent {str(shared)!r} is writable by "
                                         "group or others; another user could replace the dataset")
    assert os.listdir(shared) == []


def test_a_run_with_a_shard_without_a_winner_exits_1_and_collects_nothing(workspace):
    run_dir = init_run(workspace, records=20, shards=2, fail_first=("shard-00001",))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    assert settle(run_dir)["retryable"] == ["shard-00001"]
    before = snapshot(run_dir)
    proc = collect(run_dir, workspace / "dataset")
    assert proc.returncode == 1
    err = error_of(proc)
    assert (err["code"], err["error"]) == (1, "check_failed")
    assert err["message"] == ("tau-collect: 1 shard(s) have no winner (shard-00001); collect needs every shard's "
                              "winner")
    assert err["details"] == {"shards": ["shard-00001"]}
    assert not (workspace / "dataset").exists()
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_text_formats_collect_the_right_row_counts(workspace, fmt):
    run_dir = complete_run(workspace, records=40, shards=2, output={"format": fmt, "rows_per_partition": 15})
    dest = workspace / "dataset"
    proc = collect(run_dir, dest)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["format"], doc["records"]) == (fmt, 40)
    assert [(f["path"], f["rows"]) for f in doc["files"]] == [
        (f"part-00000.{fmt}", 15), (f"part-00001.{fmt}", 15), (f"part-00002.{fmt}", 10)]
    ids = []
    for f in doc["files"]:
        lines = (dest / f["path"]).read_text().splitlines()
        if fmt == "csv":
            assert lines[0] == '"id","category","value","text"'
            lines = lines[1:]
            ids += [int(line.split(",", 1)[0]) for line in lines]
        else:
            rows = [json.loads(line) for line in lines]
            assert all(set(row) == {"id", "category", "value", "text"} for row in rows)
            ids += [row["id"] for row in rows]
        assert len(lines) == f["rows"]
    assert ids == list(range(40))


def test_collect_as_a_table_lists_each_file(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    proc = collect(run_dir, run_dir.parent / "dataset", "-o", "table")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == (f"collection collection-0001: 80 records in 3 parquet file(s) at "
                        f"{run_dir.parent / 'dataset'}")
    assert lines[2].split() == ["FILE", "ROWS", "BYTES", "SHA256"]
    assert [line.split()[:2] for line in lines[3:]] == [
        ["part-00000.parquet", "30"], ["part-00001.parquet", "30"], ["part-00002.parquet", "20"]]
