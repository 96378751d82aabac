"""Runs over a dataset on the local executor, end to end: every shard's TAU_INPUT_FILE holds exactly its rows in
order (checked row by row against the source), the collection keeps the input's ids one for one; a changed input
fails the shards that read it "input changed" before their client starts, never retried, while the others win;
tau-init --from adopts exactly the shards whose pieces are unchanged; crashes in tau-init and in a cut converge."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from helpers import error_of, settle, snapshot, tau
from input_fixtures import read, request, rows, write

from taulib.rules import inputs as rules
from taulib.rules.shards import shard_range

pytestmark = pytest.mark.slow

ROWS = 50_000


def init(run_dir: Path, doc: dict, *args: str, env: dict | None = None):
    return tau("tau-init", str(run_dir), *args, input=json.dumps(doc), env=env)


def run_to_the_end(run_dir: Path) -> dict:
    proc = tau("tau-submit", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    return settle(run_dir)


def attempt_dir(run_dir: Path, index: int, attempt: int = 1) -> Path:
    return run_dir / f"shards/shard-{index:05d}/attempts/attempt-{attempt:04d}"


def plan_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "plan.json").read_text())


def index_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "input.json").read_text())


@pytest.fixture(scope="module")
def data():
    return rows(ROWS)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_each_of_17_shards_gets_exactly_its_rows_in_order_and_the_collection_keeps_the_ids_one_for_one(
        workspace, data, fmt):
    source = write(workspace / "input", fmt, data)
    run_dir = workspace / "run"
    made = init(run_dir, request(source))
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["records"] == ROWS
    index = index_of(run_dir)
    assert [f["name"] for f in index["files"]] == [f"part-{k:03d}.{fmt}" for k in range(3)]
    if fmt == "parquet":  # several row groups per file, each a piece
        assert all(len(f["pieces"]) == 5 for f in index["files"])
    doc = run_to_the_end(run_dir)
    assert doc["state"] == "succeeded", doc["counts"]
    plan = plan_of(run_dir)
    assert plan["shard_count"] == 17 and plan["input"] == {"path": str(source), "format": fmt,
                                                           "piece_bytes": 64 << 20}
    for index_ in range(17):
        start, end = shard_range(plan, index_)
        got = read(attempt_dir(run_dir, index_) / f"input.{fmt}", fmt)
        assert got == data[start:end], f"shard {index_}: its input file is not rows {start}..{end} of the source"
        pieces = json.loads((attempt_dir(run_dir, index_) / "input-pieces.json").read_text())
        assert (pieces["record_start"], pieces["record_end"]) == (start, end)
        assert sum(p["take"] for f in pieces["files"] for p in f["pieces"]) == end - start
    dest = workspace / "out"
    proc = tau("tau-collect", str(run_dir), "--destination", str(dest))
    assert proc.returncode == 0, proc.stderr
    import pyarrow.dataset as ds

    table = ds.dataset(str(dest), format="parquet").to_table()
    assert table.schema.names == ["id", "seen_id", "answer"]  # the kept column first
    assert str(table.schema.field("id").type) == ("string" if fmt == "csv" else "int64")  # CSV fields as text
    assert [int(i) for i in table.column("id").to_pylist()] == list(range(ROWS))
    assert table.column("seen_id").to_pylist() == list(range(ROWS))  # joined row for row


def _one_byte_changed(path: Path, offset: int) -> None:
    """Change the byte at `offset` of `path` (its size stays the same)."""
    data = bytearray(path.read_bytes())
    data[offset] = data[offset] ^ 0x01 if data[offset] not in (0x0A, 0x22, 0x2C) else data[offset]
    if path.read_bytes() == bytes(data):
        raise AssertionError("picked a byte that cannot change")
    path.write_bytes(bytes(data))


def _inner_piece(run_dir: Path, shard: int) -> tuple[str, dict]:
    """A piece that only shard `shard` reads: (its file's name, the piece)."""
    index, plan = index_of(run_dir), plan_of(run_dir)
    start, end = shard_range(plan, shard)
    for number, pieces in rules.needed(index, start, end):
        for k in pieces:
            piece = index["files"][number]["pieces"][k]
            if start <= piece["row_start"] and piece["row_start"] + piece["rows"] <= end:
                return index["files"][number]["name"], piece
    raise AssertionError(f"shard {shard} has no piece of its own")


def _readers(run_dir: Path, name: str, piece: dict) -> list[int]:
    """The shards that read `piece` of file `name`."""
    plan, index = plan_of(run_dir), index_of(run_dir)
    number = [f["name"] for f in index["files"]].index(name)
    k = index["files"][number]["pieces"].index(piece)
    return [i for i in range(plan["shard_count"])
            if any(n == number and k in ks for n, ks in rules.needed(index, *shard_range(plan, i)))]


def _change_inside(source: Path, name: str, piece: dict, fmt: str) -> None:
    middle = piece["offset"] + piece["length"] // 2
    at = middle if fmt == "parquet" else (source / name).read_bytes().index(b"gamma", middle) + 1  # in a prompt
    assert at < piece["offset"] + piece["length"]
    _one_byte_changed(source / name, at)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_one_byte_changed_inside_a_piece_shard_3_reads_fails_it_before_its_client_starts_and_it_is_not_retried(
        workspace, data, fmt):
    source = write(workspace / "input", fmt, data, row_group=500)
    run_dir = workspace / "run"
    made = init(run_dir, request(source, input={"piece_bytes": 8192}))
    assert made.returncode == 0, made.stderr
    name, piece = _inner_piece(run_dir, 3)
    assert _readers(run_dir, name, piece) == [3]
    _change_inside(source, name, piece, fmt)
    doc = run_to_the_end(run_dir)
    result = json.loads((attempt_dir(run_dir, 3) / "result.json").read_text())
    assert result["error_code"] == "input_changed" and result["exit_code"] is None
    what = f"row group {index_of(run_dir)['files'][0]['pieces'].index(piece)}" if fmt == "parquet" else \
        f"bytes {piece['offset']}..{piece['offset'] + piece['length']}"
    assert result["error"].startswith(f"input changed: {name} ({source / name}) {what}"), result["error"]
    assert result["error"].endswith("differ from the run's index; the client was not started") or \
        result["error"].endswith("differs from the run's index; the client was not started")
    assert not (attempt_dir(run_dir, 3) / "client.log").exists()  # never started
    assert not (attempt_dir(run_dir, 3) / f"input.{fmt}").exists()  # nothing half cut is left
    shard = doc["shards"][3]
    assert shard["state"] == "exhausted" and shard["attempts"] == 1
    assert shard["reason"].endswith("not retried: the input changed since the run was made, and a run's input never "
                                    "changes (tau-init NEW --from RUN, over the new input, adopts the winners whose "
                                    "input is unchanged)")
    assert [s["state"] for i, s in enumerate(doc["shards"]) if i != 3] == ["succeeded"] * 16
    before = snapshot(run_dir)
    retry = tau("tau-retry", str(run_dir))
    assert retry.returncode == 0, retry.stderr
    said = json.loads(retry.stdout)
    assert said["submission_id"] is None and [e["shard_id"] for e in said["exhausted"]] == ["shard-00003"]
    assert snapshot(run_dir) == before
    status = json.loads(tau("tau-status", str(run_dir)).stdout)
    assert "input changed" in status["shards"][3]["reason"]


def test_init_from_after_the_input_changed_adopts_exactly_the_shards_whose_pieces_are_unchanged(workspace, data):
    source = write(workspace / "input", "jsonl", data)
    run_dir = workspace / "old"
    doc = request(source, input={"piece_bytes": 65536})
    assert init(run_dir, doc).returncode == 0
    assert run_to_the_end(run_dir)["state"] == "succeeded"
    name, piece = _inner_piece(run_dir, 5)
    readers = _readers(run_dir, name, piece)
    other = next(p for p in index_of(run_dir)["files"][2]["pieces"] if p["rows"])  # and one in the last file
    readers += _readers(run_dir, "part-002.jsonl", other)
    _change_inside(source, name, piece, "jsonl")
    _change_inside(source, "part-002.jsonl", other, "jsonl")
    new = workspace / "new"
    made = init(new, doc, "--from", str(run_dir))
    assert made.returncode == 0, made.stderr
    adopted = json.loads(made.stdout)["adopted"]
    assert sorted(int(n["shard_id"][-5:]) for n in adopted["not_adopted"]) == sorted(set(readers))
    assert all(n["reason"] == "its input pieces changed (a file's bytes or rows differ from those its winner read)"
               for n in adopted["not_adopted"])
    assert adopted["adoptable"] == adopted["tasks"] == 17 - len(set(readers))
    assert run_to_the_end(new)["state"] == "succeeded"  # the shards not adopted run over the new input
    adopted_shards = set()
    for index_ in range(17):
        winner = json.loads((new / f"shards/shard-{index_:05d}/winner.json").read_text())
        manifest = json.loads((new / winner["manifest"]["path"]).read_text())
        if "adopted_from" in manifest:
            adopted_shards.add(index_)
    assert adopted_shards == set(range(17)) - set(readers)


def test_a_deleted_input_file_fails_its_readers_saying_it_was_moved_or_deleted(workspace, data):
    source = write(workspace / "input", "csv", data[:3000])
    run_dir = workspace / "run"
    assert init(run_dir, request(source, shards=3)).returncode == 0
    (source / "part-002.csv").unlink()
    doc = run_to_the_end(run_dir)
    result = json.loads((attempt_dir(run_dir, 2) / "result.json").read_text())
    assert result["error_code"] == "input_changed"
    assert result["error"] == (f"input changed: part-002.csv ({source / 'part-002.csv'}) was moved or deleted since "
                               "the run was made; the client was not started")
    assert [s["state"] for s in doc["shards"]] == ["succeeded", "succeeded", "exhausted"]


def test_a_client_that_writes_fewer_rows_than_its_input_slice_fails_naming_both_counts(workspace, data):
    source = write(workspace / "input", "parquet", data[:400], files=1)
    run_dir = workspace / "run"
    assert init(run_dir, request(source, shards=2, env={"INPUT_CLIENT_DROP": "3"})).returncode == 0
    doc = run_to_the_end(run_dir)
    result = json.loads((attempt_dir(run_dir, 0) / "result.json").read_text())
    assert result["error"] == ("the client wrote 197 rows for the 200 rows of its input slice; output.keep_input "
                               "joins the input's columns to its rows, row for row, so it writes one row per input "
                               "row, in order")
    assert doc["shards"][0]["state"] == "failed" and result["outcome"] == "failed"


def test_a_client_that_writes_into_its_input_file_fails_and_nothing_is_joined(workspace, data):
    source = write(workspace / "input", "jsonl", data[:100], files=1)
    run_dir = workspace / "run"
    assert init(run_dir, request(source, shards=1, env={"INPUT_CLIENT_TOUCH": "1"},
                                 retry={"max_attempts": 1})).returncode == 0
    run_to_the_end(run_dir)
    result = json.loads((attempt_dir(run_dir, 0) / "result.json").read_text())
    assert result["error"] == ("the attempt's input file input.jsonl changed while its client ran; it is tau's, for "
                               "the client to read, never to write")
    import pyarrow.parquet as pq

    assert pq.read_schema(attempt_dir(run_dir, 0) / "dataset" / "a.parquet").names == ["seen_id", "answer"]


def test_without_keep_input_the_client_files_are_its_own_and_it_gets_the_input_variables(workspace, data, tmp_path):
    source = write(workspace / "input", "csv", data[:90], files=1)
    seen = tmp_path / "seen"
    seen.mkdir()
    run_dir = workspace / "run"
    assert init(run_dir, request(source, shards=3, keep=False, env={"INPUT_CLIENT_RECORD": str(seen)})).returncode == 0
    assert run_to_the_end(run_dir)["state"] == "succeeded"
    got = json.loads((seen / "shard-00001.json").read_text())
    folder = attempt_dir(run_dir, 1)
    assert got == {"TAU_INPUT_FILE": str(folder / "input.csv"), "TAU_INPUT_FORMAT": "csv",
                   "TAU_INPUT_PIECES": str(folder / "input-pieces.json")}
    import pyarrow.parquet as pq

    assert pq.read_schema(folder / "dataset" / "a.parquet").names == ["seen_id", "answer"]


@pytest.mark.parametrize("failpoint", ["init.plan_written", "init.input_written", "init.shards_written"])
def test_an_init_killed_at_each_step_leaves_no_run_and_running_it_again_makes_the_same_run(
        workspace, data, failpoint):
    source = write(workspace / "input", "jsonl", data[:500], files=2)
    doc = request(source, shards=4)
    crashed = init(workspace / "run", doc, env={"TAU_FAILPOINTS": f"{failpoint}=crash"})
    assert crashed.returncode == -9
    assert not (workspace / "run" / "run.json").exists()
    again = init(workspace / "run", doc)
    assert again.returncode == 0, again.stderr
    clean = init(workspace / "clean", doc)
    assert clean.returncode == 0
    assert index_of(workspace / "run") == {**index_of(workspace / "clean"), "run_id": "run"}
    assert plan_of(workspace / "run") == {**plan_of(workspace / "clean"), "run_id": "run"}
    assert json.loads(again.stdout)["created"] is True


def test_an_attempt_killed_after_its_cut_is_retried_and_cuts_again(workspace, data):
    source = write(workspace / "input", "parquet", data[:600], files=2, row_group=100)
    run_dir = workspace / "run"
    assert init(run_dir, request(source, shards=2)).returncode == 0
    proc = tau("tau-submit", str(run_dir), env={"TAU_FAILPOINTS": "tau-attempt:attempt.input_cut=crash"})
    assert proc.returncode == 0, proc.stderr
    doc = settle(run_dir)
    assert [s["state"] for s in doc["shards"]] == ["failed", "failed"], doc["shards"]
    assert tau("tau-retry", str(run_dir)).returncode == 0
    doc = settle(run_dir)
    assert doc["state"] == "succeeded"
    for index_ in range(2):
        start, end = shard_range(plan_of(run_dir), index_)
        assert read(attempt_dir(run_dir, index_, 2) / "input.parquet", "parquet") == data[start:end]


def test_a_changed_input_does_not_change_init_of_an_existing_run_but_a_different_row_count_conflicts(
        workspace, data):
    source = write(workspace / "input", "jsonl", data[:300], files=1)
    run_dir = workspace / "run"
    doc = request(source, shards=2)
    assert init(run_dir, doc).returncode == 0
    with open(source / "part-000.jsonl", "a") as fh:
        fh.write(json.dumps({"id": 300, "prompt": "more"}) + "\n")
    proc = init(run_dir, doc)
    assert proc.returncode == 73
    assert error_of(proc)["message"] == ("tau-init: run 'run' already exists with a different plan; choose another "
                                         "run directory")
    shutil.rmtree(source)
    assert os.path.exists(run_dir / "input.json")


def test_parquet_columns_of_any_type_are_kept_as_the_input_has_them(workspace):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = workspace / "input"
    source.mkdir()
    table = pa.table({"id": pa.array(range(300), pa.int32()),
                      "meta": pa.array([{"a": i, "b": [i, i + 1]} for i in range(300)]),
                      "ts": pa.array([1_700_000_000_000_000 + i for i in range(300)], pa.timestamp("us", tz="UTC")),
                      "prompt": [f"p{i}" for i in range(300)]})
    pq.write_table(table, source / "x.parquet", row_group_size=50)
    run_dir = workspace / "run"
    made = init(run_dir, request(source, shards=4, output={"keep_input": ["meta", "ts"]}))
    assert made.returncode == 0, made.stderr
    assert index_of(run_dir)["keep"] == [{"name": "meta", "type": "struct<a: int64, b: list<element: int64>>"},
                                         {"name": "ts", "type": "timestamp[us, tz=UTC]"}]
    assert run_to_the_end(run_dir)["state"] == "succeeded"
    dest = workspace / "out"
    assert tau("tau-collect", str(run_dir), "--destination", str(dest)).returncode == 0
    import pyarrow.dataset as ds

    got = ds.dataset(str(dest), format="parquet").to_table()
    assert got.schema.names == ["meta", "ts", "seen_id", "answer"]
    assert got.column("meta").to_pylist() == table.column("meta").to_pylist()
    assert got.column("ts").equals(table.column("ts"))


def test_a_run_over_a_dataset_with_a_model_service_cuts_each_shard_s_rows_before_its_service_starts(
        workspace, data, tmp_path):
    from services_fixtures import services_plan

    source = workspace / "input"
    source.mkdir()
    questions = [{"uid": f"q{r['id']}", "question": r["prompt"]} for r in data[:60]]
    (source / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    pids = tmp_path / "pids"
    doc = services_plan(pids, shards=2, backends=1, input={"path": str(source)}, output={"keep_input": ["uid"]})
    del doc["records"]
    run_dir = workspace / "run"
    made = init(run_dir, doc)
    assert made.returncode == 0, made.stderr
    assert run_to_the_end(run_dir)["state"] == "succeeded"
    for index in range(2):
        folder = attempt_dir(run_dir, index)
        got = [json.loads(line) for line in (folder / "input.jsonl").read_text().splitlines()]
        assert got == questions[index * 30:(index + 1) * 30]
        started = (pids / f"shard-{index:05d}-attempt-0001-generator-1.pid").stat().st_mtime  # the backend's
        assert (folder / "input.jsonl").stat().st_mtime <= started  # cut before any backend started
        readiness = json.loads((folder / "readiness.json").read_text())
        assert readiness["schema_version"] == 2 and readiness["state"] == "stopped"
    dest = workspace / "out"
    assert tau("tau-collect", str(run_dir), "--destination", str(dest)).returncode == 0
    import pyarrow.dataset as ds

    table = ds.dataset(str(dest), format="parquet").to_table()
    assert table.schema.names[0] == "uid" and table.column("uid").to_pylist() == [q["uid"] for q in questions]
