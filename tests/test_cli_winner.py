"""tau-winner: validates each shard's candidate chain, publishes one immutable winner, re-validates existing ones,
and exits 1 (with the reason of each shard on stdout) when a shard has no winner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import copy_run, error_of, init_run, settle, snapshot, tau



@pytest.fixture(scope="module")
def done(settled, tmp_path_factory) -> Path:
    """The settled run, copied, with shard-00001 retried: every shard has its winner."""
    run_dir = copy_run(settled, tmp_path_factory.mktemp("winner-done") / "ws")
    assert tau("tau-retry", str(run_dir)).returncode == 0
    assert settle(run_dir)["state"] == "succeeded"
    return run_dir


def test_a_shard_without_a_winner_exits_1_and_prints_its_reason(settled):
    before = snapshot(settled)
    proc = tau("tau-winner", str(settled))
    assert proc.returncode == 1
    err = error_of(proc)
    assert (err["code"], err["error"]) == (1, "check_failed")
    assert err["message"] == "tau-winner: 1 shard(s) have no winner; see the reason of each on standard output"
    doc = json.loads(proc.stdout)
    assert (doc["kind"], doc["run_id"], doc["counts"]) == ("tau.winners", "run", {"won": 3, "without_winner": 1})
    by_shard = {s["shard_id"]: s for s in doc["shards"]}
    assert by_shard["shard-00001"] == {"shard_id": "shard-00001", "winner": None, "published": False,
                                      "reason": "shard-00001/attempt-0001 has no candidate manifest"}
    for sid in ("shard-00000", "shard-00002", "shard-00003"):
        assert (by_shard[sid]["winner"], by_shard[sid]["published"], by_shard[sid]["reason"]) == (
            "attempt-0001", False, None)
    assert snapshot(settled) == before


def test_selecting_only_shards_that_won_exits_0(settled):
    proc = tau("tau-winner", str(settled), "--shard", "shard-00000", "--shard", "shard-00003")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [s["shard_id"] for s in doc["shards"]] == ["shard-00000", "shard-00003"]
    assert doc["counts"] == {"won": 2, "without_winner": 0}


def test_shards_selected_by_their_numbers_are_reported_by_their_ids(settled):
    proc = tau("tau-winner", str(settled), "--shard", "0", "--shard", "shard-3")
    assert (proc.returncode, proc.stderr) == (0, "")
    doc = json.loads(proc.stdout)
    assert [s["shard_id"] for s in doc["shards"]] == ["shard-00000", "shard-00003"]


@pytest.mark.parametrize(("name", "named"), [("4", "shard-00004"), ("-1", "-1"), ("three", "three")])
def test_a_shard_number_past_the_run_a_negative_or_junk_is_66_and_publishes_nothing(settled, name, named):
    before = snapshot(settled)
    proc = tau("tau-winner", str(settled), "--shard", "0", "--shard", name)
    assert proc.returncode == 66
    assert error_of(proc)["message"] == f"tau-winner: run 'run' has no shard '{named}'"
    assert proc.stdout == ""
    assert snapshot(settled) == before


def test_a_run_whose_shards_all_won_exits_0_and_reports_each_winner_as_already_published(done):
    before = snapshot(done)
    proc = tau("tau-winner", str(done))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    doc = json.loads(proc.stdout)
    assert doc["counts"] == {"won": 4, "without_winner": 0}
    assert [(s["shard_id"], s["winner"], s["published"]) for s in doc["shards"]] == [
        ("shard-00000", "attempt-0001", False), ("shard-00001", "attempt-0002", False),
        ("shard-00002", "attempt-0001", False), ("shard-00003", "attempt-0001", False)]
    assert snapshot(done) == before


def test_winner_as_a_table_has_the_expected_columns(settled):
    proc = tau("tau-winner", str(settled), "-o", "table")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["SHARD", "WINNER", "PUBLISHED", "REASON"]
    assert lines[1].split() == ["shard-00000", "attempt-0001", "no", "-"]
    assert lines[2].split()[:3] == ["shard-00001", "-", "no"]
    assert lines[2].endswith("shard-00001/attempt-0001 has no candidate manifest")
    assert len(lines) == 5


def test_a_run_that_was_never_submitted_has_no_winners(workspace):
    run_dir = init_run(workspace, records=20, shards=2)
    proc = tau("tau-winner", str(run_dir))
    assert proc.returncode == 1
    assert error_of(proc)["message"] == ("tau-winner: 2 shard(s) have no winner; see the reason of each on standard "
                                         "output")
    assert [s["reason"] for s in json.loads(proc.stdout)["shards"]] == ["shard-00000 has no attempt yet",
                                                                        "shard-00001 has no attempt yet"]


def test_a_winner_whose_manifest_was_altered_is_no_longer_reported_as_a_winner(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "copy")
    manifest = run_dir / "shards/shard-00002/attempts/attempt-0001/manifest.json"
    doc = json.loads(manifest.read_text())
    doc["files"][0]["rows"] += 1
    manifest.write_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    proc = tau("tau-winner", str(run_dir))
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["counts"] == {"won": 3, "without_winner": 1}
    altered = [s for s in result["shards"] if s["shard_id"] == "shard-00002"][0]
    assert altered["winner"] is None
    assert altered["reason"] == "shard-00002/attempt-0001: the result does not name this manifest by path and digest"


def test_what_a_crashed_writer_left_in_an_ended_attempts_folder_is_removed_when_the_shard_is_sealed(settled, tmp_path):
    run_dir = copy_run(settled, tmp_path / "copy")
    ended = run_dir / "shards/shard-00001/attempts/attempt-0001"
    debris = ended / ".tau.0123456789abcdef.tmp"  # a tau-reconcile killed while it replaced observation.json
    debris.write_bytes(b'{"kind":"tau.observation"')
    other = run_dir / "shards/shard-00000/attempts/attempt-0001/.tau.fedcba9876543210.tmp"
    other.write_bytes(b"{")  # a shard sealed before: nothing seals it again, nothing is touched there
    assert tau("tau-retry", str(run_dir)).returncode == 0
    doc = settle(run_dir)  # attempt-0002 of shard-00001 wins: its publisher seals the shard
    assert doc["state"] == "succeeded", doc
    assert not debris.exists()
    assert sorted(p.name for p in ended.iterdir() if p.name.startswith(".tau.")) == []
    assert other.exists()
