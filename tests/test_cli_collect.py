"""tau-collect: every shard's winner, in planned order, into one deterministic dataset at an authorised
destination; refuses existing, foreign or overlapping destinations and runs without every winner."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import module_workspace, complete_run, copy_run, error_of, init_run, settle, snapshot, tau


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """A complete run of 80 records in 4 shards (shard-00001 failed once and was retried). Copy it to collect."""
    ws = module_workspace(tmp_path_factory, "collect")
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
                                "records", "partitions", "complete", "missing")} == {
        "kind": "tau.collection", "run_id": "run", "collection_id": "collection-0001", "state": "succeeded",
        "created": True, "destination": str(dest), "format": "parquet", "records": 80, "partitions": 3,
        "complete": True, "missing": []}
    manifest = json.loads((dest / "_tau_collection.json").read_text())
    assert (manifest["complete"], manifest["missing"]) == (True, [])
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


@pytest.mark.slow
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


@pytest.mark.slow
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
                              "winner (--allow-missing collects the winners there are)")
    assert err["details"] == {"shards": ["shard-00001"]}
    assert not (workspace / "dataset").exists()
    assert snapshot(run_dir) == before


@pytest.mark.slow
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


# -- another shape, from the same winners ------------------------------------------------------------------------

def read_back(dest: Path, doc: dict):
    """The collected rows as one Arrow table, each file read with pyarrow in its own format and the winners'
    column types."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.json as pajson

    schema = pa.schema([("id", pa.int64()), ("category", pa.string()), ("value", pa.float64()),
                        ("text", pa.string())])
    tables = []
    for f in doc["files"]:
        path = dest / f["path"]
        if doc["format"] == "parquet":
            table = pq.read_table(path)
        elif doc["format"] == "csv":
            table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types=schema))
        else:
            table = pajson.read_json(path, parse_options=pajson.ParseOptions(explicit_schema=schema))
        assert table.num_rows == f["rows"], f
        tables.append(table.select(schema.names).cast(schema))
    return pa.concat_tables(tables)


SHAPES = [("parquet", None, ()), ("csv", 25, ("--format", "csv", "--rows-per-partition", "25")),
          ("jsonl", 50, ("--format", "jsonl", "--rows-per-partition", "50"))]


@pytest.mark.slow
def test_one_run_is_collected_in_all_three_formats_one_after_another_from_the_same_winners(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    docs, snapshots = {}, {}
    for fmt, _, options in SHAPES:
        dest = run_dir.parent / f"data-{fmt}"
        proc = collect(run_dir, dest, *options)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        docs[fmt] = json.loads(proc.stdout)
        for earlier, snap in snapshots.items():  # an earlier collection is never touched
            assert snapshot(run_dir.parent / f"data-{earlier}") == snap, earlier
        snapshots[fmt] = snapshot(dest)
    assert [(d["collection_id"], d["format"], d["rows_per_partition"], d["records"], d["partitions"])
            for d in docs.values()] == [("collection-0001", "parquet", 30, 80, 3),
                                        ("collection-0002", "csv", 25, 80, 4),
                                        ("collection-0003", "jsonl", 50, 80, 2)]
    tables = {fmt: read_back(run_dir.parent / f"data-{fmt}", doc) for fmt, doc in docs.items()}
    assert tables["parquet"].column("id").to_pylist() == list(range(80))
    assert tables["csv"].equals(tables["parquet"]) and tables["jsonl"].equals(tables["parquet"])
    for (fmt, rows, _), number in zip(SHAPES, ("0001", "0002", "0003"), strict=True):
        plan = json.loads((run_dir / "collections" / f"collection-{number}" / "plan.json").read_text())
        assert (plan["format"], plan["rows_per_partition"]) == (fmt, rows or 30)
        assert plan["options"] == {"format": None if fmt == "parquet" else fmt, "rows_per_partition": rows,
                                   "group_readable": None}
        assert plan["group_readable"] is False
    for fmt, _, options in SHAPES:  # each asked again: reported, whichever collection was the last
        again = collect(run_dir, run_dir.parent / f"data-{fmt}", *options)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout) == dict(docs[fmt], created=False)
    assert sorted(os.listdir(run_dir / "collections")) == ["collection-0001", "collection-0002", "collection-0003"]
    assert stage_debris(run_dir.parent) == []


def test_the_same_destination_in_another_shape_exits_73_naming_the_shape_that_is_there(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    assert collect(run_dir, dest, "--format", "csv").returncode == 0
    before, journal = snapshot(dest), sorted(os.listdir(run_dir / "collections"))
    for options in [(), ("--format", "csv", "--rows-per-partition", "31"), ("--format", "jsonl")]:
        proc = collect(run_dir, dest, *options)
        assert proc.returncode == 73, proc.stderr
        err = error_of(proc)
        asked = ("parquet", 30) if not options else ("csv", 31) if "31" in options else ("jsonl", 30)
        assert err["message"] == (
            f"tau-collect: destination {str(dest)!r} holds collection-0001 as csv in partitions of 30 rows, not "
            f"{asked[0]} in partitions of {asked[1]} as asked; tau never overwrites a dataset: collect this shape "
            "to another destination, or give --format csv --rows-per-partition 30 for that one")
        assert err["details"] == {"collection_id": "collection-0001", "destination": str(dest), "format": "csv",
                                  "rows_per_partition": 30}
    assert snapshot(dest) == before and sorted(os.listdir(run_dir / "collections")) == journal
    same = collect(run_dir, dest, "--rows-per-partition", "30", "--format", "csv")
    assert same.returncode == 0 and json.loads(same.stdout)["created"] is False


def test_the_same_winners_and_the_same_shape_give_the_same_bytes_whether_the_shape_is_the_plans_or_asked(done,
                                                                                                        tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    files = {}
    for name, options in [("plain", ()), ("explicit", ("--format", "parquet", "--rows-per-partition", "30")),
                          ("csv-a", ("--format", "csv", "--rows-per-partition", "7")),
                          ("csv-b", ("--format", "csv", "--rows-per-partition", "7"))]:
        dest = run_dir.parent / name
        proc = collect(run_dir, dest, *options)
        assert proc.returncode == 0, proc.stderr
        files[name] = {f: (dest / f).read_bytes() for f in os.listdir(dest) if f.startswith("part-")}
    assert files["plain"] == files["explicit"] and len(files["plain"]) == 3
    assert files["csv-a"] == files["csv-b"] and len(files["csv-a"]) == 12
    again = collect(run_dir, run_dir.parent / "plain", "--format", "parquet")  # the plan's shape, said out loud
    assert again.returncode == 0 and json.loads(again.stdout)["collection_id"] == "collection-0001"


@pytest.mark.parametrize("options, message", [
    (("--format", "xml"), "tau-collect: Invalid value for '--format': 'xml' is not one of 'parquet', 'csv', 'jsonl'."),
    (("--rows-per-partition", "0"), "tau-collect: Invalid value for '--rows-per-partition': 0 is not in the range "
                                     "x>=1."),
    (("--rows-per-partition", "ten"), "tau-collect: Invalid value for '--rows-per-partition': 'ten' is not a valid "
                                      "integer range."),
    (("--rows-per-partition", str(1 << 63)), f"tau-collect: --rows-per-partition {1 << 63} is not a whole number "
                                             f"from 1 to {(1 << 63) - 1}"),
], ids=["format", "zero-rows", "not-a-number", "too-many-rows"])
def test_a_shape_tau_cannot_write_exits_2_with_one_error_before_anything_is_written(done, tmp_path, options, message):
    run_dir = copy_run(done, tmp_path / "ws")
    before = snapshot(run_dir)
    proc = collect(run_dir, run_dir.parent / "data", *options)
    assert proc.returncode == 2, proc.stderr
    assert error_of(proc)["message"] == message
    assert snapshot(run_dir) == before
    assert sorted(os.listdir(run_dir.parent)) == ["run"]


@pytest.mark.parametrize("option", [["--format", "csv"], ["--tasks", "2"], ["--group-readable"]])
def test_the_worker_takes_no_shape_of_its_own(done, tmp_path, option):
    run_dir = copy_run(done, tmp_path / "ws")
    proc = tau("tau-collect", str(run_dir), "--worker", "collection-0001", *option)
    assert proc.returncode == 2
    assert error_of(proc)["message"] == ("tau-collect: --worker takes none of --destination, --format, "
                                         "--rows-per-partition, --allow-missing, --tasks, --group-readable and --wait "
                                         "(its collection's plan holds them)")


def test_an_unfinished_collection_is_resumed_in_its_own_shape_and_refused_in_another(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    crashed = tau("tau-collect", str(run_dir), "--destination", str(dest), "--format", "jsonl",
                  env={"TAU_FAILPOINTS": "tau-collect:collect.staged=crash"})
    assert crashed.returncode == -9
    assert len(stage_debris(run_dir.parent)) == 1
    other = collect(run_dir, dest)
    assert other.returncode == 73, other.stderr
    assert error_of(other)["message"].startswith(
        f"tau-collect: destination {str(dest)!r} is being collected by collection-0001 as jsonl in partitions of "
        "30 rows, not parquet in partitions of 30 as asked;")
    elsewhere = collect(run_dir, run_dir.parent / "elsewhere")
    assert elsewhere.returncode == 75
    assert error_of(elsewhere)["message"] == (
        f"tau-collect: collection collection-0001 to {str(dest)!r} is not finished; run tau-collect for that "
        "destination first (--format jsonl --rows-per-partition 30)")
    assert len(stage_debris(run_dir.parent)) == 1 and not dest.exists()
    resumed = collect(run_dir, dest, "--format", "jsonl")
    assert resumed.returncode == 0, resumed.stderr
    doc = json.loads(resumed.stdout)
    assert (doc["collection_id"], doc["created"], doc["format"], doc["records"]) == ("collection-0001", True,
                                                                                     "jsonl", 80)
    assert stage_debris(run_dir.parent) == [] and sorted(os.listdir(run_dir.parent)) == ["data", "run"]


def test_a_collection_plan_of_an_older_tau_without_options_is_still_a_valid_record(done, tmp_path):
    from taulib import schema

    run_dir = copy_run(done, tmp_path / "ws")
    assert collect(run_dir, run_dir.parent / "data").returncode == 0
    plan = json.loads((run_dir / "collections" / "collection-0001" / "plan.json").read_text())
    assert plan["options"] == {"format": None, "rows_per_partition": None, "group_readable": None}
    del plan["options"]["group_readable"]  # before tau-collect took --group-readable
    schema.validate(plan, "collection-plan")
    del plan["options"], plan["group_readable"]  # before it took any option
    schema.validate(plan, "collection-plan")


# -- progress on a terminal, and nothing without one -------------------------------------------------------------

def test_on_a_terminal_collect_shows_its_progress_on_stderr_and_stdout_keeps_its_json(done, tmp_path):
    from helpers import tau_on_terminal

    run_dir = copy_run(done, tmp_path / "ws")
    code, out, terminal = tau_on_terminal("tau-collect", str(run_dir), "--destination", str(run_dir.parent / "d"))
    assert code == 0, terminal
    assert json.loads(out)["records"] == 80
    assert terminal.startswith("\rcollecting: ") and terminal.endswith("\x1b[K\r\n")  # the terminal adds the \r
    last = terminal.split("\r")[-2]  # ... "\r" LINE "\x1b[K" "\r\n"
    assert re.fullmatch(r"collecting: 80/80 rows \(100%\), [0-9.]+ MiB, [0-9.k]+ rows/s, [0-9.]+ MiB/s, "
                        r"ETA 0:00:00\x1b\[K", last), terminal


def test_without_a_terminal_collect_writes_nothing_on_stderr_and_with_progress_it_appends_lines(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    quiet = collect(run_dir, run_dir.parent / "quiet")
    assert quiet.returncode == 0 and quiet.stderr == ""
    forced = collect(run_dir, run_dir.parent / "forced", "--progress")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["records"] == 80
    lines = forced.stderr.split("\n")
    assert lines[-1] == "" and "\r" not in forced.stderr and "\x1b" not in forced.stderr
    assert lines[-2].startswith("collecting: 80/80 rows (100%), ")


def test_no_progress_keeps_a_terminal_silent(done, tmp_path):
    from helpers import tau_on_terminal

    run_dir = copy_run(done, tmp_path / "ws")
    code, out, terminal = tau_on_terminal("tau-collect", str(run_dir), "--destination", str(run_dir.parent / "d"),
                                          "--no-progress")
    assert (code, terminal) == (0, "")
    assert json.loads(out)["records"] == 80


# -- stopped by a signal ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("failpoint", ["collect.planned", "collect.staged"])
def test_collect_stopped_by_a_signal_leaves_nothing_partial_and_the_next_call_collects(done, tmp_path, failpoint,
                                                                                       signum):
    from helpers import start_paused

    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    proc = start_paused("tau-collect", str(run_dir), "--destination", str(dest), "--format", "csv",
                        failpoint=failpoint, trace=tmp_path / "trace")
    if failpoint == "collect.staged":
        assert len(stage_debris(run_dir.parent)) == 1  # the complete stage, not yet published
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, err
    assert out == ""
    error = json.loads(err.strip())  # one error object (after Ctrl-C's newline)
    assert (error["message"], error["details"]) == (f"tau-collect: interrupted by {name}", {"signal": name})
    assert sorted(os.listdir(run_dir.parent)) == ["run"]  # no stage, no destination
    status = json.loads((run_dir / "collections" / "collection-0001" / "status.json").read_text())
    assert status["state"] == ("prepared" if failpoint == "collect.planned" else "running")  # for the next call
    again = collect(run_dir, dest, "--format", "csv")
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert (doc["collection_id"], doc["created"], doc["records"]) == ("collection-0001", True, 80)
    assert sorted(os.listdir(run_dir.parent)) == ["data", "run"]


def test_collect_stopped_between_the_claim_and_the_rename_of_the_fallback_publication_leaves_nothing(done,
                                                                                                    tmp_path):
    from helpers import start_paused

    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "data"
    proc = start_paused("tau-collect", str(run_dir), "--destination", str(dest), failpoint="publish.claimed",
                        trace=tmp_path / "trace", env={"TAU_NO_RENAMEAT2": "1"})
    assert dest.is_dir() and (run_dir.parent / ".data.tau-reserved").exists()  # the empty, claimed destination
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert sorted(os.listdir(run_dir.parent)) == ["run"]  # no stage, no reservation, no empty destination
    again = collect(run_dir, dest)
    assert again.returncode == 0, again.stderr
    assert sorted(os.listdir(dest)) == ["_tau_collection.json", "part-00000.parquet", "part-00001.parquet",
                                        "part-00002.parquet"]


def test_the_first_stop_signal_decides_and_the_ones_after_it_change_nothing(done, tmp_path):
    from helpers import start_paused

    run_dir = copy_run(done, tmp_path / "ws")
    proc = start_paused("tau-collect", str(run_dir), "--destination", str(run_dir.parent / "data"),
                        failpoint="collect.staged", trace=tmp_path / "trace")
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGTERM):  # Ctrl-C, a hang-up, a kill
        proc.send_signal(signum)  # all pending at once: Python takes them in the order of their numbers
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (129, 130, 143), err
    lines = [line for line in err.splitlines() if line.strip()]
    assert out == "" and len(lines) == 1, err  # one error object, of the one signal that decided
    name = signal.Signals(proc.returncode - 128).name
    assert json.loads(lines[0])["message"] == f"tau-collect: interrupted by {name}"
    assert sorted(os.listdir(run_dir.parent)) == ["run"]
