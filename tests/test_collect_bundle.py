"""tau-collect --upload without Blob storage (tests/integration/test_azurite_collect.py has the uploads): the URL
refused before anything is written, the stage sealed from the digests the collection computed, a collection
without --upload unchanged (`bundle` null, no .tau/), an upload that cannot reach its storage leaving the
collection published and sealed, a collection uploaded to one prefix only, and tau-bundle-fetch --collection's
command line."""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import complete_run, copy_run, error_of, module_workspace, snapshot, tau
from taulib import jsonio
from taulib.bundle import manifest as mf
from taulib.bundle import where
from taulib.collect import bundle, report
from taulib.errors import Conflict, Internal, NotFound, Refused
from taulib.fs.tree import Tree


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """A complete run of 40 records in 2 shards. Copy it to collect."""
    return complete_run(module_workspace(tmp_path_factory, "collect-bundle"), records=40, shards=2)


def dead_endpoint() -> str:
    """A trusted loopback origin where nothing listens: every request is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def collect(run_dir: Path, destination: Path, *options: str, env: dict | None = None):
    return tau("tau-collect", str(run_dir), "--destination", str(destination), *options, env=env)


# -- without --upload -----------------------------------------------------------------------------------------------

def test_without_upload_the_summary_says_bundle_null_and_the_dataset_is_what_it_was(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    proc = collect(run_dir, run_dir.parent / "plain")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert "bundle" in doc and doc["bundle"] is None
    assert sorted(os.listdir(run_dir.parent / "plain")) == ["_tau_collection.json", "part-00000.parquet",
                                                            "part-00001.parquet"]
    assert "upload" not in json.loads((run_dir / "collections" / "collection-0001" / "plan.json").read_text())
    assert not (run_dir / "bundles").exists()
    origin = dead_endpoint()  # the same winners with --upload: the same part files, byte for byte
    proc = collect(run_dir, run_dir.parent / "sealed", "--upload", f"{origin}/devstoreaccount1/box/p",
                   env={"TAU_TRUSTED_BLOB_ENDPOINTS": origin, "TAU_BLOB_RETRIES": "0"})
    assert proc.returncode == 69, proc.stderr
    for f in doc["files"]:
        sealed = run_dir.parent / "sealed" / f["path"]
        assert sealed.read_bytes() == (run_dir.parent / "plain" / f["path"]).read_bytes()


# -- the URL, checked before anything is written --------------------------------------------------------------------

@pytest.mark.parametrize("url, message", [
    ("https://acct.blob.core.windows.net/box/p?sv=2024-01-01&sig=SECRET",
     "blob URL 'https://acct.blob.core.windows.net/box/p?(query not shown)' has a query (a SAS token?); credentials "
     "come from the environment only"),
    ("https://user:SECRET@acct.blob.core.windows.net/box/p",
     "blob URL 'https://(user information not shown)@acct.blob.core.windows.net/box/p' carries user information; "
     "credentials come from the environment only"),
    ("https://acct.blob.core.windows.net.evil.example/box/p",
     "blob URL 'https://acct.blob.core.windows.net.evil.example/box/p' is not an Azure Blob storage endpoint "
     "(ACCOUNT.blob.core.windows.net, or the government or China cloud); list a trusted endpoint in "
     "TAU_TRUSTED_BLOB_ENDPOINTS"),
    ("http://acct.blob.core.windows.net/box/p",
     "blob URL 'http://acct.blob.core.windows.net/box/p' does not use https; only Azure Blob storage over https, or "
     "an endpoint listed in TAU_TRUSTED_BLOB_ENDPOINTS, is contacted"),
    ("https://acct.blob.core.windows.net/box/",
     "blob URL 'https://acct.blob.core.windows.net/box/' has an empty or root prefix; a bundle never spans a whole "
     "container"),
], ids=["sas-query", "userinfo", "untrusted-host", "plain-http", "root-prefix"])
def test_a_bad_upload_url_is_refused_before_anything_is_written(done, tmp_path, url, message):
    run_dir = copy_run(done, tmp_path / "ws")
    before = snapshot(run_dir)
    proc = collect(run_dir, run_dir.parent / "dataset", "--upload", url)
    assert proc.returncode == 77, proc.stderr
    assert error_of(proc)["message"] == f"tau-collect: {message}"
    assert "SECRET" not in proc.stderr and proc.stdout == ""
    assert snapshot(run_dir) == before  # no journal entry, no lock file made
    assert sorted(os.listdir(run_dir.parent)) == ["run"]  # no destination, no stage


def test_the_url_is_normalised_and_a_credential_never_shown():
    assert bundle.asked(None) is None
    assert bundle.asked("https://ACCT.blob.core.windows.net/box/a/b//") == "https://acct.blob.core.windows.net/box/a/b"
    with pytest.raises(Refused) as caught:
        bundle.asked("https://acct.blob.core.windows.net/box/p#sig=SECRET")
    assert caught.value.code == 77 and "SECRET" not in caught.value.message


# -- an upload that cannot reach its storage ------------------------------------------------------------------------

def test_an_upload_that_cannot_reach_storage_leaves_the_collection_published_and_sealed_and_exits_69(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    origin = dead_endpoint()
    url, dest = f"{origin}/devstoreaccount1/box/run", run_dir.parent / "dataset"
    env = {"TAU_TRUSTED_BLOB_ENDPOINTS": origin, "TAU_BLOB_RETRIES": "0"}
    proc = collect(run_dir, dest, "--upload", url + "/", env=env)
    assert proc.returncode == 69, proc.stderr
    run_digest = hashlib.sha256((run_dir / "run.json").read_bytes()).hexdigest()[:8]
    generation = f"run-{run_digest}-collection-0001"
    error = error_of(proc)
    assert error["message"].startswith(f"tau-collect: collection collection-0001 is published at {str(dest)!r}, but "
                                       f"its upload to {url} did not finish: listing run/: Blob storage cannot be "
                                       "reached")
    assert error["message"].endswith("; the collection stays as it is, and tau-collect with the same destination "
                                     "and --upload finishes the upload")
    assert (error["details"]["collection_id"], error["details"]["generation"]) == ("collection-0001", generation)
    folder = run_dir / "collections" / "collection-0001"
    assert json.loads((folder / "status.json").read_text())["state"] == "succeeded"
    assert json.loads((folder / "plan.json").read_text())["upload"] == {"url": url, "generation": generation}
    assert not (run_dir / "bundles").exists()
    verify = tau("tau-bundle-verify", str(dest))  # the dataset appeared sealed
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["generation"] == generation

    again = collect(run_dir, dest, "--upload", url, env=env)  # the same call tries the upload again
    assert again.returncode == 69 and "its upload to" in error_of(again)["message"]
    for options, said in [(("--upload", url + "/elsewhere"), f"with --upload {url + '/elsewhere'!r}"),
                          ((), "without --upload")]:
        before = snapshot(run_dir)
        other = collect(run_dir, dest, *options, env=env)
        assert other.returncode == 73, other.stderr
        assert error_of(other)["message"] == (
            f"tau-collect: destination {str(dest)!r} holds collection-0001 with --upload {url!r}, not {said} as "
            f"asked; a collection is uploaded to one prefix: give --upload {url} for that one (which also finishes "
            "an upload that did not), or collect to another destination to upload elsewhere")
        assert error_of(other)["details"]["upload"] == url
        assert snapshot(run_dir) == before


def test_upload_for_a_collection_made_without_it_is_a_conflict(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest = run_dir.parent / "plain"
    assert collect(run_dir, dest).returncode == 0
    proc = collect(run_dir, dest, "--upload", "https://acct.blob.core.windows.net/box/p")
    assert proc.returncode == 73, proc.stderr
    assert error_of(proc)["message"] == (
        f"tau-collect: destination {str(dest)!r} holds collection-0001 without --upload, not with --upload "
        "'https://acct.blob.core.windows.net/box/p' as asked; its dataset was published unsealed and is never "
        f"changed: collect with --upload to another destination, or seal and upload it yourself (tau-bundle-seal "
        f"{dest} --generation G --upload URL)")
    assert not (dest / ".tau").exists()


# -- the seal -------------------------------------------------------------------------------------------------------

def staged(tmp_path: Path) -> tuple[Path, dict]:
    """A stage as a collection leaves it before publication: its parts and its _tau_collection.json."""
    stage = tmp_path / ".dataset.tau-stage-0123456789abcdef"
    stage.mkdir(parents=True, mode=0o700)
    files = []
    for i, data in enumerate([b"a" * 100, b"b" * 7]):
        (stage / f"part-{i:05d}.csv").write_bytes(data)
        files.append({"path": f"part-{i:05d}.csv", "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                      "rows": 1})
    result = {"collection_id": "collection-0001", "files": files}
    (stage / "_tau_collection.json").write_bytes(jsonio.canonical(result))
    return stage, result


PLAN = {"collection_id": "collection-0001", "upload": {"url": "https://acct.blob.core.windows.net/b/p",
                                                       "generation": "run-0a1b2c3d-collection-0001"}}


def test_the_stage_is_sealed_with_the_digests_the_collection_computed(tmp_path):
    stage, result = staged(tmp_path)
    result["files"][0]["sha256"] = "f" * 64  # what the writer said; the seal does not read the part again
    with Tree.open(str(tmp_path), label="parent") as parent:
        bundle.seal(SimpleNamespace(run_id="run"), PLAN, result, parent, stage.name)
    record = json.loads((stage / ".tau" / "bundles" / "run-0a1b2c3d-collection-0001.json").read_bytes())
    own = (stage / "_tau_collection.json").read_bytes()
    assert record["files"] == [
        {"path": "_tau_collection.json", "size": len(own), "sha256": hashlib.sha256(own).hexdigest()},
        {"path": "part-00000.csv", "size": 100, "sha256": "f" * 64},
        {"path": "part-00001.csv", "size": 7, "sha256": result["files"][1]["sha256"]}]
    assert record["run"] == {"run_id": "run", "shard_id": None, "attempt_id": None}
    manifest_bytes = (stage / ".tau" / "bundles" / "run-0a1b2c3d-collection-0001.json").read_bytes()
    marker = (stage / ".tau" / "bundles" / "run-0a1b2c3d-collection-0001.complete").read_bytes()
    assert mf.load_ack("run-0a1b2c3d-collection-0001", manifest_bytes, marker, "stage") == record
    assert (stage / ".tau" / "current").read_bytes() == b"run-0a1b2c3d-collection-0001\n"


def test_without_upload_the_stage_is_not_sealed(tmp_path):
    stage, result = staged(tmp_path)
    with Tree.open(str(tmp_path), label="parent") as parent:
        bundle.seal(SimpleNamespace(run_id="run"), {"collection_id": "collection-0001"}, result, parent, stage.name)
    assert not (stage / ".tau").exists()


@pytest.mark.parametrize("change, message", [
    (lambda stage: (stage / "stray.txt").write_text("x"), "holds 'stray.txt' (1 bytes)"),
    (lambda stage: (stage / "part-00001.csv").write_bytes(b"b" * 8), "holds 'part-00001.csv' (8 bytes)"),
    (lambda stage: (stage / "part-00001.csv").unlink(), "lacks 'part-00001.csv'"),
], ids=["stray-file", "other-size", "missing-file"])
def test_a_stage_that_does_not_match_its_collection_result_is_never_sealed(tmp_path, change, message):
    stage, result = staged(tmp_path)
    change(stage)
    with Tree.open(str(tmp_path), label="parent") as parent, pytest.raises(Internal) as caught:
        bundle.seal(SimpleNamespace(run_id="run"), PLAN, result, parent, stage.name)
    assert caught.value.code == 70 and message in caught.value.message
    assert not (stage / ".tau").exists()


def test_the_report_key_is_null_without_upload_and_says_whether_it_is_uploaded():
    assert report.bundle({}) is None
    assert report.bundle(PLAN) == {"url": PLAN["upload"]["url"], "generation": PLAN["upload"]["generation"],
                                   "manifest_sha256": None, "uploaded": False}
    assert report.bundle(PLAN, {"manifest_sha256": "a" * 64})["uploaded"] is True


def test_a_different_upload_is_a_conflict_naming_the_recorded_prefix():
    plan = {**PLAN, "destination": "/d"}
    bundle.same_upload(plan, PLAN["upload"]["url"], "holds")
    with pytest.raises(Conflict) as caught:
        bundle.same_upload(plan, None, "holds")
    assert caught.value.details["upload"] == PLAN["upload"]["url"]


# -- the run's records ----------------------------------------------------------------------------------------------

def test_a_collection_record_is_found_by_its_collection_and_recording_it_again_is_idempotent(done, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    from taulib.rundir import locks
    from taulib.rundir.run import Run

    with Run(str(run_dir)) as run, locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "bundles"):
        first = where.record_collection(run, "gc1", "https://acct.blob.core.windows.net/b/c", "a" * 64,
                                        "collection-0001")
        assert where.record_collection(run, "gc1", "https://acct.blob.core.windows.net/b/c", "a" * 64,
                                       "collection-0001") == first
        assert where.recorded(run, "gc1") == first and where.recorded(run, "nope") is None
    where.record(str(run_dir), "shard-gen", "https://acct.blob.core.windows.net/b/s", "b" * 64, "shard-00000", None)
    assert where.resolve(str(run_dir), None, None, "collection-0001")["generation"] == "gc1"
    assert "collection_id" not in where.resolve(str(run_dir), "shard-00000", None)  # a seal's record is as it was
    with pytest.raises(NotFound) as caught:
        where.resolve(str(run_dir), None, None, "collection-0002")
    assert caught.value.message == ("run 'run' records no bundle of collection-0002; tau-collect --upload records it "
                                    "once the upload is complete")


# -- command lines --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["https://acct.blob.core.windows.net/b/p", "--run", "RUN", "--collection", "1"],
    ["--run", "RUN", "--collection", "1", "--shard", "0"],
    ["--run", "RUN", "--collection", "1", "--current"],
    ["--collection", "1"],
    ["--kubernetes", "job", "--collection", "1"],
], ids=["source", "shard", "current", "no-run", "kubernetes"])
def test_fetch_collection_takes_the_run_alone(done, tmp_path, args):
    args = [str(done) if a == "RUN" else a for a in args]
    proc = tau("tau-bundle-fetch", *args, "--destination", str(tmp_path / "d"))
    assert proc.returncode == 2, proc.stderr
    assert error_of(proc)["message"] == (
        "tau-bundle-fetch: --collection goes with --run alone: the run's records name the prefix and the generation "
        "(give none of SOURCE, --shard, --kubernetes and --current)")
    assert not (tmp_path / "d").exists()


def test_the_worker_takes_no_upload(done):
    proc = tau("tau-collect", str(done), "--worker", "collection-0001", "--upload",
               "https://acct.blob.core.windows.net/b/p")
    assert proc.returncode == 2
    assert error_of(proc)["message"] == "tau-collect: --worker takes no --upload (its collection's plan holds it)"
