"""taulib.rules.chain: whether an attempt, its result and its manifest make a chain that may win (or that a winner
still stands on), check by check: each broken link is named, and a whole chain has no problem."""

from __future__ import annotations

import copy

import pytest

from taulib.rules.chain import Chain, problem

IDS = ("run", "shard-00003", "attempt-0002")
PLAN = "a" * 64
REL = "shards/shard-00003/attempts/attempt-0002/manifest.json"
MANIFEST_SHA, RESULT_SHA = "b" * 64, "c" * 64


def chain() -> Chain:
    ids = dict(run_id="run", shard_id="shard-00003", attempt_id="attempt-0002")
    attempt = dict(ids, state="succeeded", terminal={"classification": "succeeded"}, plan_sha256=PLAN, ordinal=2,
                   dataset="shards/shard-00003/attempts/attempt-0002/dataset")
    result = dict(ids, outcome="complete", requested_records=20, actual_records=20,
                  manifest={"path": REL, "sha256": MANIFEST_SHA})
    manifest = dict(ids, provenance=PLAN, ordinal=2, requested_records=20, actual_records=20,
                    dataset=attempt["dataset"], files=[{"rows": 12, "size": 900}, {"rows": 8, "size": 700}])
    return Chain(attempt, result, manifest, RESULT_SHA, MANIFEST_SHA)


def winner() -> dict:
    return {"attempt_id": "attempt-0002", "ordinal": 2, "manifest": {"path": REL, "sha256": MANIFEST_SHA},
            "result": {"sha256": RESULT_SHA}}


def check(c: Chain, **kwargs) -> str | None:
    base = dict(ids=IDS, plan_sha256=PLAN, requested=20, chain=c, manifest_rel=REL)
    if "winner" not in kwargs:
        base.update(newest_attempt_id="attempt-0002", verdict=("succeeded", "done"))
    base.update(kwargs)
    return problem(**base)


def test_a_whole_chain_has_no_problem_as_a_candidate_and_as_a_winner():
    assert check(chain()) is None
    assert check(chain(), winner=winner()) is None


BREAKS = [
    ("attempt", "run_id", "other", "attempt ids do not match"),
    ("result", "shard_id", "shard-00009", "result ids do not match"),
    ("manifest", "attempt_id", "attempt-0001", "manifest ids do not match"),
    ("attempt", "state", "failed", "the attempt is failed, not succeeded"),
    ("attempt", "terminal", {"classification": "cancelled"}, "the attempt is succeeded, not succeeded"),
    ("attempt", "plan_sha256", "d" * 64, "the attempt belongs to another plan"),
    ("result", "outcome", "partial", "the result is partial, not complete"),
    ("result", "requested_records", 19, "the result requested 19 records; the shard has 20"),
    ("result", "actual_records", 19, "the result holds 19 of 20 records"),
    ("result", "manifest", {"path": REL, "sha256": "e" * 64}, "the result does not name this manifest by path and "
     "digest"),
    ("manifest", "provenance", "d" * 64, "the manifest's provenance is not the plan digest"),
    ("manifest", "ordinal", 1, "the manifest's ordinal differs from the attempt's"),
    ("manifest", "requested_records", 21, "the manifest's record counts differ from the shard's range"),
    ("manifest", "files", [{"rows": 12, "size": 900}, {"rows": 7, "size": 700}],
     "the manifest's file row counts do not add up"),
    ("manifest", "dataset", "shards/shard-00003/dataset", "the manifest names another dataset folder"),
    ("manifest", "files", [{"rows": 20, "size": 0}], "the manifest lists an empty file"),
]


@pytest.mark.parametrize("record, field, value, message", BREAKS, ids=[b[3][:40] for b in BREAKS])
def test_each_broken_link_is_named(record, field, value, message):
    c = chain()
    broken = copy.deepcopy(getattr(c, record))
    broken[field] = value
    c = c._replace(**{record: broken})
    assert check(c) == message
    assert check(c, winner=winner()) == message


def test_a_candidate_must_be_the_newest_attempt_and_not_contradicted_by_the_scheduler():
    assert check(chain(), newest_attempt_id="attempt-0003") == "a newer attempt exists; this one is stale"
    assert check(chain(), verdict=("failed", "scheduler reports node_failed")) == (
        "scheduler evidence contradicts success: scheduler reports node_failed")
    assert check(chain(), verdict=None) == "scheduler evidence contradicts success: no verdict"


@pytest.mark.parametrize("field, value, message", [
    ("attempt_id", "attempt-0001", "winner ids do not match"),
    ("ordinal", 1, "winner ids do not match"),
    ("manifest", {"path": REL, "sha256": "e" * 64}, "the winner does not name the manifest by path and digest"),
    ("result", {"sha256": "e" * 64}, "the winner does not name the result by digest"),
])
def test_a_winner_must_name_this_attempt_and_its_records_by_digest(field, value, message):
    assert check(chain(), winner=dict(winner(), **{field: value})) == message


def test_a_winner_is_not_asked_whether_it_is_the_newest_attempt():
    assert check(chain(), winner=winner(), newest_attempt_id="attempt-0009", verdict=("failed", "later")) is None


def test_an_empty_file_is_refused_wherever_it_is_among_the_manifests_files():
    for files in ([{"rows": 20, "size": 900}, {"rows": 0, "size": 0}],
                  [{"rows": 0, "size": 0}, {"rows": 20, "size": 9}],
                  [{"rows": 10, "size": 1}, {"rows": 10, "size": 0}, {"rows": 0, "size": 5}]):
        c = chain()
        c = c._replace(manifest=dict(c.manifest, files=files))
        assert check(c) == "the manifest lists an empty file", files


def test_a_file_of_one_byte_is_not_empty():
    c = chain()
    c = c._replace(manifest=dict(c.manifest, files=[{"rows": 19, "size": 1}, {"rows": 1, "size": 1}]))
    assert check(c) is None


def test_the_manifests_own_record_count_is_checked_alone():
    # it holds 19 of the 20 records its result claims, its files adding up to its own count
    c = chain()
    c = c._replace(manifest=dict(c.manifest, actual_records=19, files=[{"rows": 12, "size": 900},
                                                                       {"rows": 7, "size": 700}]))
    assert check(c) == "the manifest's record counts differ from the shard's range"
    assert check(c, winner=winner()) == "the manifest's record counts differ from the shard's range"
