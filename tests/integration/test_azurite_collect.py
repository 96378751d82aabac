"""tau-collect --upload on real Blob storage (Azurite): a collection sealed as one bundle generation before it is
published, uploaded once it is, recorded in the run (RUN/bundles/G.json with its collection id), and fetched back
by run and collection id (tau-bundle-fetch --run RUN --collection C) byte for byte. A tampered blob is refused by
the fetch and by a deep verify; an upload stopped by SIGTERM part way leaves the collection published and no
acknowledged generation, and the same tau-collect again finishes it, the blobs already there skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import azurite as az
from helpers import PYTHON, complete_run, copy_run, env_for_tests, error_of, module_workspace, tau

pytestmark = pytest.mark.azurite

azurite_running = az.azurite_running  # the module's fixtures, shared
box = az.box


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """A complete run of 40 records in 2 shards. Copy it to collect."""
    return complete_run(module_workspace(tmp_path_factory, "collect-upload"), records=40, shards=2)


def collect(run_dir: Path, destination: Path, *options: str):
    return tau("tau-collect", str(run_dir), "--destination", str(destination), *options, env=az.env())


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under root, .tau/ included, with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def uploaded(run_dir: Path, box: str, prefix: str, *options: str) -> tuple[Path, dict]:
    """A collection of `run_dir` with --upload to `prefix` of `box`: (its destination, its output)."""
    dest = run_dir.parent / "dataset"
    proc = collect(run_dir, dest, "--upload", az.url(box, prefix), *options)
    assert proc.returncode == 0, proc.stderr
    return dest, json.loads(proc.stdout)


# -- the round trip -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [(), ("--format", "csv", "--rows-per-partition", "15"), ("--format", "jsonl")],
                         ids=["parquet", "csv", "jsonl"])
def test_a_collection_uploaded_and_fetched_back_by_run_and_collection_id_is_byte_identical(done, box, tmp_path,
                                                                                         options):
    run_dir = copy_run(done, tmp_path / "ws")
    prefix = f"round-trip/{options[1] if options else 'parquet'}"
    dest, doc = uploaded(run_dir, box, prefix, *options)
    run_digest = hashlib.sha256((run_dir / "run.json").read_bytes()).hexdigest()[:8]
    generation = f"run-{run_digest}-collection-0001"  # the run's id, its run.json's digest, the collection's id
    assert doc["bundle"] == {"url": az.url(box, prefix), "generation": generation, "uploaded": True,
                             "manifest_sha256": doc["bundle"]["manifest_sha256"]}
    ref = json.loads((run_dir / "bundles" / f"{generation}.json").read_text())
    assert (ref["collection_id"], ref["url"], ref["manifest_sha256"], ref["shard_id"]) == (
        "collection-0001", az.url(box, prefix), doc["bundle"]["manifest_sha256"], None)
    names = sorted(f["path"] for f in doc["files"]) + ["_tau_collection.json"]
    assert sorted(n for n in az.blob_names(box, prefix) if not n.startswith(".tau/")) == sorted(names)

    got = tmp_path / "fetched"
    proc = tau("tau-bundle-fetch", "--run", str(run_dir), "--collection", "collection-0001", "--destination",
               str(got), env=az.env())
    assert proc.returncode == 0, proc.stderr
    fetched = json.loads(proc.stdout)
    assert (fetched["generation"], fetched["source"], fetched["files"]) == (generation, az.url(box, prefix),
                                                                           len(names))
    published = files_of(dest)
    assert published.pop(".tau/current") == f"{generation}\n".encode()  # the pointer is the tree's, not fetched
    assert files_of(got) == published  # every file, its manifest and its marker, byte for byte
    for source in (str(got), az.url(box, prefix)):
        verify = tau("tau-bundle-verify", source, "--generation", generation, "--deep", env=az.env())
        assert verify.returncode == 0, verify.stderr
        assert json.loads(verify.stdout)["complete"] is True


def test_the_collection_is_found_by_its_number_and_the_report_says_it_is_uploaded(done, box, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest, first = uploaded(run_dir, box, "by-number")
    again = collect(run_dir, dest, "--upload", az.url(box, "by-number") + "/", "-o", "table")  # the same prefix
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[1] == (f"uploaded: generation {first['bundle']['generation']} to "
                                            f"{az.url(box, 'by-number')}")
    proc = tau("tau-bundle-fetch", "--run", str(run_dir), "--collection", "1", "--destination",
               str(tmp_path / "got"), env=az.env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["generation"] == first["bundle"]["generation"]


# -- a tampered blob ------------------------------------------------------------------------------------------------

def test_a_tampered_part_blob_is_refused_by_fetch_and_by_deep_verify_and_nothing_is_written(done, box, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    _, doc = uploaded(run_dir, box, "tampered")
    name = f"tampered/{doc['files'][0]['path']}"
    data = bytearray(az.get(box, name))
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    az.put(box, name, bytes(data))
    parent = tmp_path / "fetched"
    parent.mkdir(mode=0o700)
    proc = tau("tau-bundle-fetch", "--run", str(run_dir), "--collection", "collection-0001", "--destination",
               str(parent / "got"), env=az.env())
    assert proc.returncode == 1, proc.stderr
    assert error_of(proc)["message"].startswith(f"tau-bundle-fetch: {doc['files'][0]['path']} does not match its "
                                                "sha256 in the manifest (got ")
    assert os.listdir(parent) == []  # no destination, no stage
    proc = tau("tau-bundle-verify", az.url(box, "tampered"), "--deep", env=az.env())
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["digest_mismatch"] == [doc["files"][0]["path"]]
    assert error_of(proc)["message"].endswith("is not complete (1 finding(s)): 0 missing, 0 extra, 0 resized, "
                                              "1 digest mismatch")
    az.put(box, name, b"short")  # another size: named by the listing, before any download
    proc = tau("tau-bundle-fetch", "--run", str(run_dir), "--collection", "collection-0001", "--destination",
               str(parent / "got"), env=az.env())
    assert proc.returncode == 1, proc.stderr
    assert f"resized {doc['files'][0]['path']} (5 bytes, manifest {doc['files'][0]['size']})" in \
        error_of(proc)["message"]
    assert os.listdir(parent) == []


# -- an upload stopped part way -------------------------------------------------------------------------------------

# tau-collect itself, its upload held after the manifest and one payload blob are sent (the uploader's small blobs
# go through `run_all`): the moment a SIGTERM finds an upload under way
SLOWED = """
import os, sys, time
from taulib.bundle import upload
real = upload.run_all
def slowed(items, fn, workers, stop=None):
    fn(items[0])
    with open(os.environ["HELD_AT"], "w") as fh:
        fh.write(items[0]["path"])
    time.sleep(120)
    real(items[1:], fn, workers, stop)
upload.run_all = slowed
from taulib.cli.collect import main
main()
"""


def test_an_upload_stopped_by_sigterm_leaves_no_acknowledged_generation_and_the_same_call_finishes_it(
        done, box, tmp_path):
    run_dir = copy_run(done, tmp_path / "ws")
    dest, url, held = run_dir.parent / "dataset", az.url(box, "stopped"), tmp_path / "held"
    proc = subprocess.Popen([PYTHON, "-c", SLOWED, str(run_dir), "--destination", str(dest), "--upload", url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_for_tests(az.env(HELD_AT=str(held), TAU_RESTARTED="1")))
    deadline = time.monotonic() + 120
    while not held.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the upload never started"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert out == "" and json.loads(err.strip())["message"] == "tau-collect: interrupted by SIGTERM"
    status = json.loads((run_dir / "collections" / "collection-0001" / "status.json").read_text())
    assert status["state"] == "succeeded"  # published, and stays so
    assert not (run_dir / "bundles").exists() or os.listdir(run_dir / "bundles") == []  # nothing recorded
    plan = json.loads((run_dir / "collections" / "collection-0001" / "plan.json").read_text())
    generation = plan["upload"]["generation"]
    sent = held.read_text()
    assert az.blob_names(box, "stopped") == sorted([f".tau/bundles/{generation}.json", sent])  # no marker
    first_etag = az.container_client(box).get_blob_client(f"stopped/{sent}").get_blob_properties().etag
    verify = tau("tau-bundle-verify", url, env=az.env())
    assert verify.returncode == 1
    assert json.loads(verify.stdout)["problems"] == [
        f"{url} holds no acknowledged bundle generation: not acknowledged without a completion marker under "
        ".tau/bundles/ (none was sealed, or a part its seal declared was absent)"]
    fetch = tau("tau-bundle-fetch", "--run", str(run_dir), "--collection", "collection-0001", "--destination",
                str(tmp_path / "early"), env=az.env())
    assert fetch.returncode == 66
    assert error_of(fetch)["message"] == ("tau-bundle-fetch: run 'run' records no bundle of collection-0001; "
                                          "tau-collect --upload records it once the upload is complete")
    assert not (tmp_path / "early").exists()

    again = collect(run_dir, dest, "--upload", url)
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert (doc["collection_id"], doc["created"], doc["bundle"]["uploaded"]) == ("collection-0001", False, True)
    assert az.container_client(box).get_blob_client(f"stopped/{sent}").get_blob_properties().etag == first_etag
    got = tmp_path / "got"
    fetch = tau("tau-bundle-fetch", "--run", str(run_dir), "--collection", "collection-0001", "--destination",
                str(got), env=az.env())
    assert fetch.returncode == 0, fetch.stderr
    published = files_of(dest)
    published.pop(".tau/current")
    assert files_of(got) == published

