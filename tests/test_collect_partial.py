"""tau-collect --allow-missing: a run with a cancelled shard and an exhausted one is refused by a strict collection
and collected whole but for them with --allow-missing, which records each missing shard and why in its output, its
plan and the dataset's own _tau_collection.json; only absence is forgiven, the same winners give the same bytes, and
a collection is also the set of shards it collects (tau-collect(1) "Missing shards")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import copy_run, error_of, init_run, module_workspace, plan, settle, snapshot, tau

CANCELLED, EXHAUSTED = "shard-00001", "shard-00003"
KEPT_IDS = list(range(0, 20)) + list(range(40, 60))  # the records of shard-00000 and shard-00002


@pytest.fixture(scope="module")
def partial(tmp_path_factory) -> Path:
    """A settled run of 80 records in 4 shards: shard-00001 cancelled before it ran, shard-00003 failed its only
    attempt (a budget of one: exhausted), shard-00000 and shard-00002 won. Copy it to collect."""
    ws = module_workspace(tmp_path_factory, "partial")
    run_dir = init_run(ws, plan_doc=plan(fail_first=(EXHAUSTED,), retry={"max_attempts": 1}))
    assert tau("tau-cancel", str(run_dir), "--shard", CANCELLED).returncode == 0
    assert tau("tau-submit", str(run_dir)).returncode == 0
    doc = settle(run_dir)
    assert [s["state"] for s in doc["shards"]] == ["succeeded", "cancelled", "succeeded", "exhausted"], doc
    return run_dir


def collect(run_dir: Path, destination: Path, *options: str):
    return tau("tau-collect", str(run_dir), "--destination", str(destination), *options)


def expected_missing(run_dir: Path) -> list[dict]:
    """The shards without a winner as tau-status says of them (state and reason), which a collection records."""
    proc = tau("tau-status", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    shards = [{"shard_id": s["id"], "state": s["state"], "reason": s["reason"]}
              for s in json.loads(proc.stdout)["shards"] if s["state"] != "succeeded"]
    assert [(s["shard_id"], s["state"]) for s in shards] == [(CANCELLED, "cancelled"), (EXHAUSTED, "exhausted")]
    assert shards[0]["reason"].startswith("cancelled by the user at ")
    assert shards[1]["reason"] == ("the client exited with status 3; 1 attempts used of a budget of 1, not retried "
                                   "(tau-retry --shard grants one more)")
    return shards


def stage_debris(parent: Path) -> list[str]:
    return sorted(n for n in os.listdir(parent) if ".tau-stage-" in n or n.endswith(".tau-reserved"))


def test_a_strict_collection_of_a_run_with_a_cancelled_and_an_exhausted_shard_exits_1_and_writes_nothing(partial,
                                                                                                       tmp_path):
    run_dir = copy_run(partial, tmp_path / "ws")
    before = snapshot(run_dir)
    proc = collect(run_dir, run_dir.parent / "dataset")
    assert proc.returncode == 1
    err = error_of(proc)
    assert (err["code"], err["error"]) == (1, "check_failed")
    assert err["message"] == ("tau-collect: 2 shard(s) have no winner (shard-00001, shard-00003); collect needs "
                              "every shard's winner (--allow-missing collects the winners there are)")
    assert err["details"] == {"shards": [CANCELLED, EXHAUSTED]}
    assert not (run_dir.parent / "dataset").exists()
    assert snapshot(run_dir) == before


def test_allow_missing_collects_the_other_winners_and_records_both_missing_shards_and_why_everywhere(partial,
                                                                                                  tmp_path):
    from taulib import schema

    run_dir = copy_run(partial, tmp_path / "ws")
    dest = run_dir.parent / "dataset"
    proc = collect(run_dir, dest, "--allow-missing")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    missing = expected_missing(run_dir)
    assert {k: doc[k] for k in ("collection_id", "state", "created", "records", "partitions", "complete",
                                "missing")} == {
        "collection_id": "collection-0001", "state": "succeeded", "created": True, "records": 40, "partitions": 2,
        "complete": False, "missing": missing}
    ids = [i for f in doc["files"] for i in pq.read_table(dest / f["path"]).column("id").to_pylist()]
    assert ids == KEPT_IDS
    record = json.loads((run_dir / "collections" / "collection-0001" / "plan.json").read_text())
    schema.validate(record, "collection-plan")
    assert ([s["shard_id"] for s in record["shards"]], record["missing"], record["records"]) == (
        ["shard-00000", "shard-00002"], missing, 40)
    manifest = json.loads((dest / "_tau_collection.json").read_text())
    schema.validate(manifest, "collection-result")
    assert (manifest["complete"], manifest["missing"], manifest["records"]) == (False, missing, 40)
    assert stage_debris(run_dir.parent) == []


def test_allow_missing_refuses_a_run_in_which_no_shard_has_a_winner(workspace):
    run_dir = init_run(workspace, records=20, shards=2)
    before = snapshot(run_dir)
    proc = collect(run_dir, workspace / "dataset", "--allow-missing")
    assert proc.returncode == 1
    err = error_of(proc)
    assert (err["code"], err["error"]) == (1, "check_failed")
    assert err["message"] == ("tau-collect: no shard of run 'run' has a winner (2 of 2 missing); --allow-missing "
                              "collects the winners there are, and there are none yet")
    assert err["details"] == {"shards": ["shard-00000", "shard-00001"]}
    assert not (workspace / "dataset").exists()
    assert snapshot(run_dir) == before


def test_two_partial_collections_of_the_same_winners_are_byte_identical(partial, tmp_path):
    run_dir = copy_run(partial, tmp_path / "ws")
    one, two = run_dir.parent / "one", run_dir.parent / "two"
    first, second = collect(run_dir, one, "--allow-missing"), collect(run_dir, two, "--allow-missing")
    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert (a["collection_id"], b["collection_id"]) == ("collection-0001", "collection-0002")
    assert a["files"] == b["files"] and a["missing"] == b["missing"]
    parts = sorted(n for n in os.listdir(one) if n.startswith("part-"))
    assert parts == sorted(n for n in os.listdir(two) if n.startswith("part-")) == ["part-00000.parquet",
                                                                                   "part-00001.parquet"]
    for name in parts:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name


@pytest.mark.parametrize("damage, code, message", [
    ("malformed", 65, "shards/shard-00000/winner.json does not match schema 'winner' at /: missing required "
                      "property 'attempt_id'"),
    ("another shard's", 1, "the winner of shard-00000 names another shard or run; refusing to collect"),
])
def test_a_present_winner_that_does_not_hold_is_refused_even_with_allow_missing(partial, tmp_path, damage, code,
                                                                                message):
    run_dir = copy_run(partial, tmp_path / "ws")
    winner = run_dir / "shards" / "shard-00000" / "winner.json"
    if damage == "malformed":
        winner.write_text('{"kind": "tau.winner"}')
    else:
        winner.write_bytes((run_dir / "shards" / "shard-00002" / "winner.json").read_bytes())
    before = snapshot(run_dir)
    proc = collect(run_dir, run_dir.parent / "dataset", "--allow-missing")
    assert proc.returncode == code
    err = error_of(proc)
    assert err["code"] == code and err["message"].startswith("tau-collect: ")
    assert err["message"].endswith(message)
    assert not (run_dir.parent / "dataset").exists() and not (run_dir / "collections").exists()
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_every_format_collects_a_partial_run_and_its_manifest_says_what_is_missing(partial, tmp_path, fmt):
    run_dir = copy_run(partial, tmp_path / "ws")
    dest = run_dir.parent / "dataset"
    proc = collect(run_dir, dest, "--allow-missing", "--format", fmt, "--rows-per-partition", "25")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [(f["path"], f["rows"]) for f in doc["files"]] == [(f"part-00000.{fmt}", 25), (f"part-00001.{fmt}", 15)]
    ids = []
    for f in doc["files"]:
        path = dest / f["path"]
        if fmt == "parquet":
            ids += pq.read_table(path).column("id").to_pylist()
        elif fmt == "csv":
            ids += [int(line.split(",", 1)[0]) for line in path.read_text().splitlines()[1:]]
        else:
            ids += [json.loads(line)["id"] for line in path.read_text().splitlines()]
    assert ids == KEPT_IDS
    manifest = json.loads((dest / "_tau_collection.json").read_text())
    assert (manifest["format"], manifest["complete"], [m["shard_id"] for m in manifest["missing"]]) == (
        fmt, False, [CANCELLED, EXHAUSTED])


def test_a_partial_collection_as_a_table_names_each_missing_shard_and_why(partial, tmp_path):
    run_dir = copy_run(partial, tmp_path / "ws")
    dest = run_dir.parent / "dataset"
    proc = collect(run_dir, dest, "--allow-missing", "-o", "table")
    assert proc.returncode == 0, proc.stderr
    missing = expected_missing(run_dir)
    lines = proc.stdout.splitlines()
    assert lines[:5] == [
        f"collection collection-0001: 40 records in 2 parquet file(s) at {dest}",
        "partial: 2 shard(s) without a winner left out",
        f"missing: shard-00001 (cancelled: {missing[0]['reason']})",
        f"missing: shard-00003 (exhausted: {missing[1]['reason']})",
        ""]
    assert lines[5].split() == ["FILE", "ROWS", "BYTES", "SHA256"]


def test_a_partial_collection_asked_again_is_reported_and_strictly_asked_is_still_refused(partial, tmp_path):
    run_dir = copy_run(partial, tmp_path / "ws")
    dest = run_dir.parent / "dataset"
    first = collect(run_dir, dest, "--allow-missing")
    assert first.returncode == 0, first.stderr
    before = snapshot(dest)
    again = collect(run_dir, dest, "--allow-missing")
    assert again.returncode == 0, again.stderr
    one, two = json.loads(first.stdout), json.loads(again.stdout)
    assert (one["created"], two["created"]) == (True, False)
    assert {k: v for k, v in two.items() if k != "created"} == {k: v for k, v in one.items() if k != "created"}
    strict = collect(run_dir, dest)
    assert strict.returncode == 1 and "2 shard(s) have no winner" in error_of(strict)["message"]
    assert snapshot(dest) == before
    assert os.listdir(run_dir / "collections") == ["collection-0001"]


@pytest.mark.parametrize("failpoint", ["collect.staged", "collect.renamed"])
def test_an_interrupted_partial_collection_is_resumed_while_its_winners_are_the_ones_there_are(partial, tmp_path,
                                                                                               failpoint):
    run_dir = copy_run(partial, tmp_path / "ws")
    dest = run_dir.parent / "dataset"
    crashed = tau("tau-collect", str(run_dir), "--destination", str(dest), "--allow-missing",
                  env={"TAU_FAILPOINTS": f"tau-collect:{failpoint}=crash"})
    assert crashed.returncode == -9
    assert (len(stage_debris(run_dir.parent)), dest.exists()) == ((1, False) if failpoint == "collect.staged"
                                                                  else (0, True))
    resumed = collect(run_dir, dest, "--allow-missing")
    assert resumed.returncode == 0, resumed.stderr
    doc = json.loads(resumed.stdout)
    assert (doc["collection_id"], doc["created"], doc["complete"], doc["records"]) == (
        "collection-0001", True, False, 40)
    assert stage_debris(run_dir.parent) == [] and sorted(os.listdir(run_dir.parent)) == ["dataset", "run"]


def test_the_worker_takes_no_allow_missing_of_its_own(partial, tmp_path):
    run_dir = copy_run(partial, tmp_path / "ws")
    before = snapshot(run_dir)
    proc = tau("tau-collect", str(run_dir), "--worker", "collection-0001", "--allow-missing")
    assert proc.returncode == 2
    assert error_of(proc)["message"] == ("tau-collect: --worker takes none of --destination, --format, "
                                         "--rows-per-partition, --allow-missing, --tasks, --group-readable and --wait "
                                         "(its collection's plan holds them)")
    assert snapshot(run_dir) == before


def reopen_and_complete(run_dir: Path) -> None:
    """Lift the cancellation, grant the exhausted shard one more attempt, and let both win."""
    proc = tau("tau-retry", str(run_dir), "--shard", CANCELLED, "--shard", EXHAUSTED, "--reopen")
    assert proc.returncode == 0, proc.stderr
    assert settle(run_dir)["state"] == "succeeded"


def test_once_every_shard_has_won_a_complete_collection_is_a_new_one_and_the_partial_one_is_never_overwritten(
        partial, tmp_path):
    run_dir = copy_run(partial, tmp_path / "ws")
    part = run_dir.parent / "partial"
    assert collect(run_dir, part, "--allow-missing").returncode == 0
    before = snapshot(part)
    reopen_and_complete(run_dir)
    for options in ((), ("--allow-missing",)):
        proc = collect(run_dir, part, *options)
        assert proc.returncode == 73, proc.stderr
        err = error_of(proc)
        assert err["message"] == (
            f"tau-collect: destination {str(part)!r} holds collection-0001 of 2 of 4 shards (shard-00001, "
            "shard-00003 missing), not of every shard (4) as asked; tau never overwrites a dataset: collect to "
            "another destination")
        assert err["details"] == {"destination": str(part), "collection_id": "collection-0001",
                                  "missing": [CANCELLED, EXHAUSTED]}
    assert snapshot(part) == before
    full = run_dir.parent / "full"
    proc = collect(run_dir, full)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["collection_id"], doc["complete"], doc["missing"], doc["records"]) == (
        "collection-0002", True, [], 80)
    manifest = json.loads((full / "_tau_collection.json").read_text())
    assert (manifest["complete"], manifest["missing"]) == (True, [])
    ids = [i for f in doc["files"] for i in pq.read_table(full / f["path"]).column("id").to_pylist()]
    assert ids == list(range(80))
    again = collect(run_dir, full, "--allow-missing")  # every shard has a winner: the same collection
    assert again.returncode == 0 and json.loads(again.stdout)["collection_id"] == "collection-0002"


def test_an_interrupted_partial_collection_is_retired_and_replaced_once_more_shards_have_won(partial, tmp_path):
    run_dir = copy_run(partial, tmp_path / "ws")
    dest = run_dir.parent / "dataset"
    crashed = tau("tau-collect", str(run_dir), "--destination", str(dest), "--allow-missing",
                  env={"TAU_FAILPOINTS": "tau-collect:collect.staged=crash"})
    assert crashed.returncode == -9
    reopen_and_complete(run_dir)
    proc = collect(run_dir, dest)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["collection_id"], doc["created"], doc["complete"], doc["records"]) == (
        "collection-0002", True, True, 80)
    old = json.loads((run_dir / "collections" / "collection-0001" / "status.json").read_text())
    assert (old["state"], old["reason"]) == (
        "failed", "interrupted, and not resumed: it was planned from 2 of 4 shards (shard-00001, shard-00003 "
                  "missing), and the winners there are now are of every shard (4); a new collection replaces it")
    assert stage_debris(run_dir.parent) == [] and sorted(os.listdir(run_dir.parent)) == ["dataset", "run"]


def test_the_states_a_missing_shard_may_be_in_are_every_shard_state_but_succeeded():
    from taulib.rules import rollup

    common = json.loads((Path(__file__).resolve().parent.parent / "share" / "schemas" / "common.schema.json")
                        .read_text())
    states = common["$defs"]["missing_shards"]["items"]["properties"]["state"]["enum"]
    assert sorted(states) == sorted(set(rollup.SHARD_STATES) - {"succeeded"})


def test_a_collection_is_its_set_of_shards_and_only_a_followed_or_unfinished_one_may_have_fewer():
    from taulib.collect import shape, winners
    from taulib.errors import Conflict

    def found(*ids: str) -> winners.Found:
        kept = [winners.Winner(sid, {}, "0" * 64, {}) for sid in ids]
        absent = [{"shard_id": f"shard-0000{n}", "state": "cancelled", "reason": "cancelled by the user at T"}
                  for n in range(3) if f"shard-0000{n}" not in ids]
        return winners.Found(kept, absent)

    partial = {"collection_id": "collection-0001", "destination": "/ws/data",
               "shards": [{"shard_id": "shard-00000", "winner_sha256": "0" * 64}],
               "missing": found("shard-00000").missing}
    shape.same_shards(partial, found("shard-00000"), "holds")
    shape.same_shards(partial, found("shard-00000", "shard-00001"), "holds", lenient=True)
    with pytest.raises(Conflict) as refused:
        shape.same_shards(partial, found("shard-00000", "shard-00001", "shard-00002"), "is being collected by")
    assert refused.value.message == (
        "destination '/ws/data' is being collected by collection-0001 of 1 of 3 shards (shard-00001, shard-00002 "
        "missing), not of every shard (3) as asked; tau never overwrites a dataset: follow it with --allow-missing "
        "until it has finished, then collect to another destination")
    complete = dict(partial, shards=[{"shard_id": f"shard-0000{n}", "winner_sha256": "0" * 64} for n in range(3)],
                    missing=[])
    with pytest.raises(Conflict):  # a complete collection never stands for a partial one, lenient or not
        shape.same_shards(complete, found("shard-00000"), "holds", lenient=True)
