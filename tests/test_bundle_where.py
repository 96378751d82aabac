"""Where a run's bundles went: RUN/bundles/G.json records, and tau-bundle-fetch --run reading them."""

import json

import pytest

from helpers import complete_run, copy_run, error_of, module_workspace, snapshot, tau
from taulib.bundle import where
from taulib.errors import Conflict, NotFound, UsageError

SHA = "a" * 64
URL = "https://acct.blob.core.windows.net/bundles/run/out"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    ws = module_workspace(tmp_path_factory, "where")
    return complete_run(ws, records=20, shards=2)


def test_a_recorded_bundle_is_found_by_its_shard_and_recording_it_again_is_idempotent(run_dir):
    first = where.record(str(run_dir), "w1", URL + "/s0", SHA, "shard-00000", "attempt-0001")
    again = where.record(str(run_dir), "w1", URL + "/s0", SHA, "shard-00000", "attempt-0001")
    assert again == first
    found = where.resolve(str(run_dir), "shard-00000", None)
    assert (found["url"], found["generation"], found["attempt_id"]) == (URL + "/s0", "w1", "attempt-0001")
    assert (run_dir / "bundles" / "w1.json").stat().st_mode & 0o777 == 0o600


def test_another_record_for_a_recorded_generation_is_a_conflict(run_dir):
    where.record(str(run_dir), "w2", URL + "/a", SHA, None, None)
    with pytest.raises(Conflict, match="already exists with different content"):
        where.record(str(run_dir), "w2", URL + "/b", SHA, None, None)


def test_several_matching_records_ask_for_a_generation_and_none_is_not_found(run_dir):
    where.record(str(run_dir), "w3", URL + "/c", SHA, "shard-00001", None)
    where.record(str(run_dir), "w4", URL + "/d", SHA, "shard-00001", None)
    with pytest.raises(UsageError, match="name one with --generation"):
        where.resolve(str(run_dir), "shard-00001", None)
    assert where.resolve(str(run_dir), "shard-00001", "w4")["url"] == URL + "/d"
    with pytest.raises(NotFound, match="records no bundle"):
        where.resolve(str(run_dir), None, "nope")


def test_a_recorded_url_is_checked_like_any_other_before_any_request(run_dir, tmp_path):
    where.record(str(run_dir), "evil", "https://acct.blob.core.windows.net.evil.example/c/p", SHA, None, None)
    before = snapshot(run_dir)
    proc = tau("tau-bundle-fetch", "--run", str(run_dir), "--generation", "evil", "--destination",
               str(tmp_path / "dest"))
    assert proc.returncode == 77, proc.stderr
    assert "is not an Azure Blob storage endpoint" in error_of(proc)["message"]
    assert not (tmp_path / "dest").exists()
    assert snapshot(run_dir) == before


def test_fetch_run_finds_the_bundle_of_a_shard_named_by_its_number(run_dir, tmp_path):
    run_dir = copy_run(run_dir, tmp_path / "copy")
    where.record(str(run_dir), "by-number", "https://acct.blob.core.windows.net.evil.example/c/p", SHA, "shard-00001",
                 None)
    before = snapshot(run_dir)
    argv = ["--run", str(run_dir), "--generation", "by-number", "--destination", str(tmp_path / "dest")]
    proc = tau("tau-bundle-fetch", *argv, "--shard", "1")
    assert proc.returncode == 77, proc.stderr  # found, then its URL checked before any request
    assert "is not an Azure Blob storage endpoint" in error_of(proc)["message"]
    proc = tau("tau-bundle-fetch", *argv, "--shard", "0")
    assert proc.returncode == 66
    assert error_of(proc)["message"] == ("tau-bundle-fetch: run 'run' records no bundle of shard-00000 of "
                                         "generation 'by-number'")
    assert not (tmp_path / "dest").exists()
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("args, message", [
    (["SOURCE-AND-RUN"], "give neither SOURCE nor --current"),
    (["--shard", "shard-00000"], "--shard goes with --run"),
    ([], "missing SOURCE"),
])
def test_fetch_refuses_a_source_that_is_named_twice_or_not_at_all(run_dir, tmp_path, args, message):
    argv = ["--destination", str(tmp_path / "d")]
    if args == ["SOURCE-AND-RUN"]:
        argv = [URL, "--run", str(run_dir)] + argv
    elif args and args[0] == "--shard":
        argv = [URL] + args + argv
    proc = tau("tau-bundle-fetch", *argv)
    assert proc.returncode == 2, proc.stderr
    assert message in error_of(proc)["message"]


def test_seal_record_needs_upload_and_an_existing_run(run_dir, tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("a")
    proc = tau("tau-bundle-seal", str(tree), "--generation", "g1", "--record", str(run_dir))
    assert proc.returncode == 2 and "--record needs --upload" in error_of(proc)["message"], proc.stderr
    proc = tau("tau-bundle-seal", str(tree), "--generation", "g1", "--upload", URL + "/x", "--record",
               str(tmp_path / "no-run"))
    assert proc.returncode == 66, proc.stderr
    assert not (tree / ".tau").exists()
    assert json.loads(json.dumps(error_of(proc)))["error"] == "not_found"
