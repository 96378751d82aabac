"""Bundles on real Blob storage (Azurite): seal with upload, verify the Blob prefix, fetch all or nothing.

A bundle of 200 small files and one large file (24 MiB here, so ranged concurrent download and block upload are
exercised; `azurite.make_tree(big_mib=1024)` gives the 1 GiB case) round-trips byte for byte. Every refusal is a
test that also shows that nothing was written at the destination: the destination's parent is a fresh folder that
is still empty afterwards (no destination, no stage left behind). Generations share a prefix: the checkpoint index
and the metrics copies travel with theirs, an upload never replaces a blob another generation's manifest names
(refused before anything is sent, or, racing a concurrent uploader, by its conditional write), identical files are
shared, and a reader of one generation leaves the others' files alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

import azurite as az
from helpers import error_of, tau

pytestmark = pytest.mark.azurite

BIG_MIB = 24


azurite_running = az.azurite_running  # the module's fixtures, shared
box = az.box


@pytest.fixture(scope="module")
def big_bundle(tmp_path_factory, box) -> dict:
    """The 200 + 1 file bundle, sealed as generation g1 and uploaded once; tests only read it."""
    root = tmp_path_factory.mktemp("big") / "out"
    digests = az.make_tree(root, small=200, big_mib=BIG_MIB)
    prefix = "runs/run-1/out"
    proc = tau("tau-bundle-seal", str(root), "--generation", "g1", "--run", "run-1", "--upload",
               az.url(box, prefix), env=az.env())
    assert proc.returncode == 0, proc.stderr
    return {"root": root, "digests": digests, "prefix": prefix, "url": az.url(box, prefix),
            "seal": json.loads(proc.stdout)}


def small_bundle(tmp: Path, box: str, prefix: str, generation: str = "g1", big_mib: int = 0) -> dict:
    """A bundle of 5 small files (and one big one when asked), sealed and uploaded to its own prefix."""
    root = tmp / f"src-{prefix.replace('/', '-')}"
    digests = az.make_tree(root, small=5, big_mib=big_mib)
    proc = tau("tau-bundle-seal", str(root), "--generation", generation, "--upload", az.url(box, prefix),
               env=az.env())
    assert proc.returncode == 0, proc.stderr
    return {"root": root, "digests": digests, "prefix": prefix, "url": az.url(box, prefix)}


def fetch(url: str, destination: Path, *args: str, env: dict | None = None):
    return tau("tau-bundle-fetch", url, "--destination", str(destination), *args,
               env=az.env() if env is None else env)


def fresh_parent(tmp_path: Path) -> Path:
    parent = tmp_path / "fetched"
    parent.mkdir(mode=0o700)
    return parent


def assert_nothing_written(parent: Path) -> None:
    assert os.listdir(parent) == [], f"the refused fetch left {os.listdir(parent)} behind"


# -- the round trip -------------------------------------------------------------------------------------------------

def test_seal_uploads_the_manifest_every_file_the_marker_and_the_current_pointer(big_bundle, box):
    seal = big_bundle["seal"]
    assert seal["files"] == 201
    assert seal["uploaded"] == {"url": big_bundle["url"], "files": 201, "sent": 201, "skipped": 0}
    names = az.blob_names(box, big_bundle["prefix"])
    assert sorted(n for n in names if not n.startswith(".tau/")) == sorted(big_bundle["digests"])
    assert [n for n in names if n.startswith(".tau/")] == [".tau/bundles/g1.complete", ".tau/bundles/g1.json",
                                                           ".tau/current"]
    manifest_bytes = az.get(box, f"{big_bundle['prefix']}/.tau/bundles/g1.json")
    assert manifest_bytes == (big_bundle["root"] / ".tau" / "bundles" / "g1.json").read_bytes()
    digest = hashlib.sha256(manifest_bytes).hexdigest()
    assert az.get(box, f"{big_bundle['prefix']}/.tau/bundles/g1.complete") == f"complete g1 {digest}\n".encode()
    assert az.get(box, f"{big_bundle['prefix']}/.tau/current") == b"g1\n"


def test_a_bundle_of_200_small_files_and_a_large_one_round_trips_byte_for_byte(big_bundle, tmp_path):
    dest = fresh_parent(tmp_path) / "copy"
    proc = fetch(big_bundle["url"], dest, "--generation", "g1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    result = json.loads(proc.stdout)
    assert result["kind"] == "tau.bundle-fetch" and result["generation"] == "g1"
    assert (result["files"], result["destination"]) == (201, str(dest))
    assert result["manifest_sha256"] == big_bundle["seal"]["manifest_sha256"]
    assert result["bytes"] == sum(p.stat().st_size for p in big_bundle["root"].rglob("*")
                                  if p.is_file() and ".tau" not in p.parts)
    assert az.tree_digests(dest) == big_bundle["digests"]
    assert (dest / "model" / "weights.bin").stat().st_size == BIG_MIB << 20
    for name in ("g1.json", "g1.complete"):
        assert (dest / ".tau" / "bundles" / name).read_bytes() == \
            (big_bundle["root"] / ".tau" / "bundles" / name).read_bytes()
    assert os.listdir(dest.parent) == ["copy"]
    assert (dest.stat().st_mode & 0o777, (dest / "model" / "weights.bin").stat().st_mode & 0o777) == (0o700, 0o600)
    verify = tau("tau-bundle-verify", str(dest), "--generation", "g1")
    assert verify.returncode == 0 and json.loads(verify.stdout)["complete"] is True


def test_fetch_with_current_follows_the_pointer_into_an_empty_folder(big_bundle, tmp_path):
    dest = fresh_parent(tmp_path) / "latest"
    dest.mkdir()
    proc = fetch(big_bundle["url"], dest, "--current", "-o", "table")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "fetched bundle generation g1: 201 files, " \
        f"{big_bundle['seal']['bytes']} bytes, every sha256 checked"
    assert az.tree_digests(dest) == big_bundle["digests"]


def test_verify_of_the_blob_prefix_checks_the_listing_and_with_deep_every_byte(big_bundle):
    proc = tau("tau-bundle-verify", big_bundle["url"], env=az.env())
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["complete"], report["hashed"], report["generation"], report["files"]) == (True, False, "g1", 201)
    assert report["source"] == big_bundle["url"]
    proc = tau("tau-bundle-verify", big_bundle["url"], "--generation", "g1", "--deep", env=az.env())
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["complete"], report["hashed"]) == (True, True)
    assert report["digest_mismatch"] == [] and report["problems"] == []


def test_deep_verify_finds_a_blob_replaced_by_other_bytes_of_the_same_size(box, tmp_path):
    bundle = small_bundle(tmp_path, box, "verify/same-size", big_mib=10)
    big = f"{bundle['prefix']}/model/weights.bin"
    data = bytearray(az.get(box, big))
    data[-1] ^= 0xFF
    az.put(box, big, bytes(data))
    shallow = tau("tau-bundle-verify", bundle["url"], env=az.env())
    assert shallow.returncode == 0, "names and sizes alone cannot see it"
    proc = tau("tau-bundle-verify", bundle["url"], "--deep", "-o", "table", env=az.env())
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == "digest mismatch  model/weights.bin"
    assert error_of(proc)["message"].endswith("is not complete (1 finding(s)): 0 missing, 0 extra, 0 resized, "
                                              "1 digest mismatch")


def test_verify_of_a_blob_prefix_names_missing_extra_and_resized_blobs(box, tmp_path):
    bundle = small_bundle(tmp_path, box, "verify/listing")
    names = sorted(bundle["digests"])
    az.container_client(box).delete_blob(f"{bundle['prefix']}/{names[0]}")
    az.put(box, f"{bundle['prefix']}/{names[1]}", b"short")
    az.put(box, f"{bundle['prefix']}/stranger.txt", b"x")
    proc = tau("tau-bundle-verify", bundle["url"], "--generation", "g1", env=az.env())
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["missing"] == [names[0]] and report["extra"] == ["stranger.txt"]
    assert [r["path"] for r in report["resized"]] == [names[1]] and report["resized"][0]["actual"] == 5


# -- refusals: nothing at the destination ---------------------------------------------------------------------------

def test_an_untrusted_endpoint_is_refused_and_nothing_is_written(big_bundle, tmp_path):
    parent = fresh_parent(tmp_path)
    env = {k: v for k, v in az.env().items() if k != "TAU_TRUSTED_BLOB_ENDPOINTS"}
    proc = fetch(big_bundle["url"], parent / "d", "--generation", "g1", env=env)
    assert proc.returncode == 77
    assert error_of(proc)["message"] == (f"tau-bundle-fetch: blob URL {big_bundle['url']!r} does not use https; only "
                                         "Azure Blob storage over https, or an endpoint listed in "
                                         "TAU_TRUSTED_BLOB_ENDPOINTS, is contacted")
    assert_nothing_written(parent)


@pytest.mark.parametrize("prefix", ["", "/", "//"])
def test_an_empty_or_root_prefix_is_refused_and_nothing_is_written(box, prefix, tmp_path):
    parent = fresh_parent(tmp_path)
    url = f"{az.ORIGIN}/{az.ACCOUNT}/{box}{prefix}"
    proc = fetch(url, parent / "d", "--generation", "g1")
    assert proc.returncode == 77
    assert error_of(proc)["message"] == (f"tau-bundle-fetch: blob URL {url!r} has an empty or root prefix; a bundle "
                                         "never spans a whole container")
    assert_nothing_written(parent)


def test_a_missing_marker_is_refused_and_nothing_is_written(box, tmp_path):
    bundle = small_bundle(tmp_path, box, "refuse/no-marker")
    az.container_client(box).delete_blob(f"{bundle['prefix']}/.tau/bundles/g1.complete")
    parent = fresh_parent(tmp_path)
    proc = fetch(bundle["url"], parent / "d", "--generation", "g1")
    assert proc.returncode == 1
    assert error_of(proc)["message"] == (f"tau-bundle-fetch: {bundle['url']}: generation 'g1' is not acknowledged: "
                                         "it has no completion marker (its producer never sealed it, or a part the "
                                         "seal declared was absent)")
    assert_nothing_written(parent)


def test_a_marker_for_another_generation_is_refused_and_nothing_is_written(box, tmp_path):
    bundle = small_bundle(tmp_path, box, "refuse/other-marker")
    name = f"{bundle['prefix']}/.tau/bundles/g1.complete"
    az.put(box, name, az.get(box, name).replace(b"complete g1 ", b"complete g0 "))
    parent = fresh_parent(tmp_path)
    proc = fetch(bundle["url"], parent / "d", "--generation", "g1")
    assert proc.returncode == 73
    assert error_of(proc)["message"] == ("tau-bundle-fetch: completion marker acknowledges generation 'g0', not "
                                         "'g1'")
    assert_nothing_written(parent)


def test_a_generation_that_was_never_sealed_is_refused_and_nothing_is_written(big_bundle, tmp_path):
    parent = fresh_parent(tmp_path)
    proc = fetch(big_bundle["url"], parent / "d", "--generation", "g2")
    assert proc.returncode == 1
    assert "generation 'g2' is not acknowledged: it has no completion marker" in error_of(proc)["message"]
    assert_nothing_written(parent)


def test_an_extra_blob_is_refused_and_nothing_is_written(box, tmp_path):
    bundle = small_bundle(tmp_path, box, "refuse/extra")
    az.put(box, f"{bundle['prefix']}/part-0/stranger.bin", b"not in the manifest")
    parent = fresh_parent(tmp_path)
    proc = fetch(bundle["url"], parent / "d", "--generation", "g1")
    assert proc.returncode == 1
    error = error_of(proc)
    assert error["message"] == (f"tau-bundle-fetch: the blobs under {bundle['url']} do not match generation 'g1': "
                                "extra part-0/stranger.bin")
    assert error["details"]["extra"] == ["part-0/stranger.bin"]
    assert_nothing_written(parent)


def test_a_truncated_blob_is_refused_and_nothing_is_written(box, tmp_path):
    bundle = small_bundle(tmp_path, box, "refuse/truncated", big_mib=10)
    big = f"{bundle['prefix']}/model/weights.bin"
    az.put(box, big, az.get(box, big)[: 9 << 20])
    parent = fresh_parent(tmp_path)
    proc = fetch(bundle["url"], parent / "d", "--generation", "g1")
    assert proc.returncode == 1
    assert error_of(proc)["message"] == (f"tau-bundle-fetch: the blobs under {bundle['url']} do not match generation "
                                         f"'g1': resized model/weights.bin ({9 << 20} bytes, manifest {10 << 20})")
    assert_nothing_written(parent)


@pytest.mark.parametrize("which", ["small", "large"])
def test_a_blob_with_other_bytes_of_the_same_size_fails_its_sha256_and_nothing_is_written(box, tmp_path, which):
    bundle = small_bundle(tmp_path, box, f"refuse/same-size-{which}", big_mib=10)
    rel = "model/weights.bin" if which == "large" else sorted(bundle["digests"])[2]
    data = bytearray(az.get(box, f"{bundle['prefix']}/{rel}"))
    data[len(data) // 2] ^= 0x01
    az.put(box, f"{bundle['prefix']}/{rel}", bytes(data))
    parent = fresh_parent(tmp_path)
    proc = fetch(bundle["url"], parent / "d", "--generation", "g1")
    assert proc.returncode == 1
    assert error_of(proc)["message"].startswith(f"tau-bundle-fetch: {rel} does not match its sha256 in the manifest")
    assert_nothing_written(parent)


def test_a_manifest_path_that_escapes_the_destination_is_refused_and_nothing_is_written(box, tmp_path):
    bundle = small_bundle(tmp_path, box, "refuse/escape")
    record = json.loads(az.get(box, f"{bundle['prefix']}/.tau/bundles/g1.json"))
    record["files"][0]["path"] = "../escaped.txt"
    data = json.dumps(record).encode()
    az.put(box, f"{bundle['prefix']}/.tau/bundles/g1.json", data)
    az.put(box, f"{bundle['prefix']}/.tau/bundles/g1.complete",
           f"complete g1 {hashlib.sha256(data).hexdigest()}\n".encode())
    parent = fresh_parent(tmp_path)
    proc = fetch(bundle["url"], parent / "d", "--generation", "g1")
    assert proc.returncode == 77
    assert error_of(proc)["message"] == "tau-bundle-fetch: bundle path '../escaped.txt' escapes or is not normalised"
    assert_nothing_written(parent)
    assert not (tmp_path / "escaped.txt").exists()


def test_a_destination_that_exists_and_is_not_empty_is_refused_and_left_as_it_was(big_bundle, tmp_path):
    parent = fresh_parent(tmp_path)
    dest = parent / "d"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep me\n")
    proc = fetch(big_bundle["url"], dest, "--generation", "g1")
    assert proc.returncode == 73
    assert error_of(proc)["message"] == (f"tau-bundle-fetch: destination {str(dest)!r} exists and is not empty; tau "
                                         "never overwrites")
    assert os.listdir(parent) == ["d"] and os.listdir(dest) == ["mine.txt"]
    assert (dest / "mine.txt").read_text() == "keep me\n"


def test_a_destination_that_is_a_file_is_refused(big_bundle, tmp_path):
    parent = fresh_parent(tmp_path)
    (parent / "d").write_text("a file\n")
    proc = fetch(big_bundle["url"], parent / "d", "--generation", "g1")
    assert proc.returncode == 73
    assert "exists and is not a folder; tau never overwrites" in error_of(proc)["message"]
    assert (parent / "d").read_text() == "a file\n" and os.listdir(parent) == ["d"]


def test_a_missing_container_is_not_found_and_nothing_is_written(tmp_path):
    parent = fresh_parent(tmp_path)
    url = az.url("no-such-container", "p")
    proc = fetch(url, parent / "d", "--current")
    assert proc.returncode == 1
    assert error_of(proc)["message"] == (f"tau-bundle-fetch: {url} has no current pointer (.tau/current); name the "
                                         "generation with --generation")
    proc = tau("tau-bundle-verify", url, "--generation", "g1", env=az.env())
    assert proc.returncode == 66
    assert error_of(proc)["message"].startswith("tau-bundle-verify: listing p/: not found")
    assert_nothing_written(parent)


# -- upload refusals ------------------------------------------------------------------------------------------------

def test_uploading_another_manifest_of_a_sealed_generation_is_refused(box, tmp_path):
    bundle = small_bundle(tmp_path, box, "upload/immutable")
    before = az.blob_names(box, bundle["prefix"])
    other = tmp_path / "other"
    az.make_tree(other, small=3, seed=9)
    proc = tau("tau-bundle-seal", str(other), "--generation", "g1", "--upload", bundle["url"], env=az.env())
    assert proc.returncode == 73
    assert error_of(proc)["message"] == (f"tau-bundle-seal: {bundle['url']} already holds another manifest of "
                                         "generation 'g1'; a generation is immutable: choose a new one")
    assert az.blob_names(box, bundle["prefix"]) == before
    assert az.get(box, f"{bundle['prefix']}/.tau/current") == b"g1\n"


def seal_small_tree(box: str, tmp_path, prefix: str):
    """tau-bundle-seal of a fresh three-file tree as generation g1, uploaded to `prefix` of the box."""
    root = tmp_path / "src"
    az.make_tree(root, small=3)
    return tau("tau-bundle-seal", str(root), "--generation", "g1", "--upload", az.url(box, prefix), env=az.env())


def test_uploading_to_a_prefix_with_blobs_not_in_the_manifest_is_refused_before_sending_anything(box, tmp_path):
    prefix = "upload/strangers"
    az.put(box, f"{prefix}/old.txt", b"left over")
    proc = seal_small_tree(box, tmp_path, prefix)
    assert proc.returncode == 73
    assert error_of(proc)["message"] == (f"tau-bundle-seal: {az.url(box, prefix)} holds blobs that no "
                                         "generation's manifest names (old.txt); a reader would see them as extra: "
                                         "remove them or upload to a fresh prefix")
    assert az.blob_names(box, prefix) == ["old.txt"]


def test_sealing_and_uploading_again_is_idempotent(box, tmp_path):
    bundle = small_bundle(tmp_path, box, "upload/again")
    proc = tau("tau-bundle-seal", str(bundle["root"]), "--generation", "g1", "--upload", bundle["url"], env=az.env())
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["created"] is False
    assert (result["uploaded"]["sent"], result["uploaded"]["skipped"]) == (0, 5)  # every blob is already there
    assert tau("tau-bundle-verify", bundle["url"], "--deep", env=az.env()).returncode == 0


def test_a_blob_no_manifest_names_at_a_path_of_the_generation_is_replaced(box, tmp_path):
    prefix = "upload/killed-before"
    root = tmp_path / "src"
    digests = az.make_tree(root, small=3)
    first = sorted(digests)[0]
    az.put(box, f"{prefix}/{first}", b"what a killed upload of this generation left")
    proc = tau("tau-bundle-seal", str(root), "--generation", "g1", "--upload", az.url(box, prefix), env=az.env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["uploaded"]["sent"] == 3
    assert hashlib.sha256(az.get(box, f"{prefix}/{first}")).hexdigest() == digests[first]
    assert tau("tau-bundle-verify", az.url(box, prefix), "--deep", env=az.env()).returncode == 0


def test_a_declared_index_that_is_absent_uploads_nothing_and_keeps_exit_0(box, tmp_path):
    prefix = "upload/unacknowledged"
    root = tmp_path / "src"
    az.make_tree(root, small=3)
    proc = tau("tau-bundle-seal", str(root), "--generation", "g1", "--index", "ckpt/artifacts.json", "--upload",
               az.url(box, prefix), "--", "true", env=az.env())
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["acknowledged"], result["uploaded"]) == (False, None)
    assert result["absent"] == [{"option": "--index", "path": "ckpt/artifacts.json"}]
    assert az.blob_names(box, prefix) == []
    assert not (root / ".tau").exists()
    proc = tau("tau-bundle-verify", str(root), "--generation", "g1")
    assert proc.returncode == 1
    assert "generation 'g1' is not acknowledged" in error_of(proc)["message"]


# -- checkpoints and metrics travel with their generation -----------------------------------------------------------

def parts_bundle(tmp: Path, box: str, prefix: str) -> dict:
    """A bundle with checkpoints (one folder holding a 9 MiB file: block upload, ranged download) and metrics from
    outside the tree, sealed as g1 and uploaded."""
    root = tmp / "parts-src"
    digests = az.make_tree(root, small=4)
    for step in (100, 200):
        folder = root / "ckpt" / f"step-{step}"
        folder.mkdir(parents=True)
        (folder / "weights.bin").write_bytes(bytes([step % 256]) * ((9 << 20) if step == 200 else 1000))
        (folder / "config.json").write_text(f'{{"step": {step}}}\n')
    (tmp / "loss.csv").write_text("step,loss\n100,0.9\n200,0.4\n")
    proc = tau("tau-bundle-seal", str(root), "--generation", "g1", "--checkpoints", "ckpt/step-*", "--metrics",
               str(tmp / "loss.csv"), "--upload", az.url(box, prefix), env=az.env())
    assert proc.returncode == 0, proc.stderr
    return {"root": root, "digests": digests, "prefix": prefix, "url": az.url(box, prefix),
            "seal": json.loads(proc.stdout)}


PARTS = [".tau/bundles/g1.d/checkpoints.json", ".tau/bundles/g1.d/metrics/loss.csv"]


def test_the_checkpoint_index_and_the_metrics_round_trip_through_blob_byte_for_byte(box, tmp_path):
    bundle = parts_bundle(tmp_path, box, "parts/round-trip")
    assert bundle["seal"]["uploaded"]["sent"] == 4 + 4 + 2  # payload files, then the parts
    names = az.blob_names(box, bundle["prefix"])
    assert [n for n in names if n.startswith(".tau/")] == [".tau/bundles/g1.complete", *PARTS[:1],
                                                           PARTS[1], ".tau/bundles/g1.json", ".tau/current"]
    dest = fresh_parent(tmp_path) / "got"
    proc = fetch(bundle["url"], dest, "--generation", "g1")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["checkpoints"] == bundle["seal"]["checkpoints"] and result["metrics"] == bundle["seal"]["metrics"]
    assert az.tree_digests(dest) == az.tree_digests(bundle["root"])
    for rel in PARTS + [".tau/bundles/g1.json", ".tau/bundles/g1.complete"]:
        assert (dest / rel).read_bytes() == (bundle["root"] / rel).read_bytes(), rel
    assert (dest / PARTS[1]).read_bytes() == (tmp_path / "loss.csv").read_bytes()
    index = json.loads((dest / PARTS[0]).read_bytes())
    assert (index["generation"], index["latest"]) == ("g1", "ckpt/step-200")
    assert [(c["path"], c["step"], c["files"]) for c in index["checkpoints"]] == [("ckpt/step-100", 100, 2),
                                                                                  ("ckpt/step-200", 200, 2)]
    verify = tau("tau-bundle-verify", str(dest), "--generation", "g1")
    assert verify.returncode == 0, verify.stdout
    deep = tau("tau-bundle-verify", bundle["url"], "--deep", env=az.env())
    assert deep.returncode == 0, deep.stdout


@pytest.mark.parametrize("part", PARTS, ids=["checkpoint-index", "metrics"])
def test_a_tampered_part_on_blob_is_caught_by_deep_verify_and_fetch(box, tmp_path, part):
    bundle = parts_bundle(tmp_path, box, f"parts/tampered-{part.rsplit('/', 1)[-1]}")
    name = f"{bundle['prefix']}/{part}"
    data = bytearray(az.get(box, name))
    data[len(data) // 2] ^= 0x01
    az.put(box, name, bytes(data))
    proc = tau("tau-bundle-verify", bundle["url"], "--deep", env=az.env())
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["digest_mismatch"] == [part]
    assert error_of(proc)["message"].endswith("(1 finding(s)): 0 missing, 0 extra, 0 resized, 1 digest mismatch")
    parent = fresh_parent(tmp_path)
    proc = fetch(bundle["url"], parent / "d", "--generation", "g1")
    assert proc.returncode == 1
    assert error_of(proc)["message"].startswith(f"tau-bundle-fetch: {part} does not match its sha256 in the manifest")
    assert_nothing_written(parent)


# -- generations sharing a prefix ----------------------------------------------------------------------------------

def listing_with_etags(box: str, prefix: str) -> dict:
    return {b.name: (b.size, b.etag) for b in az.container_client(box).list_blobs(name_starts_with=prefix + "/")}


def test_an_upload_that_would_replace_another_generations_blob_is_refused_before_anything_is_sent(box, tmp_path):
    bundle = small_bundle(tmp_path, box, "shared/clash", big_mib=9)
    before = listing_with_etags(box, bundle["prefix"])
    second = tmp_path / "second"
    az.make_tree(second, small=5)
    (second / "model").mkdir()
    (second / "model" / "weights.bin").write_bytes(b"other weights")
    (second / "new.txt").write_text("only in g2\n")
    proc = tau("tau-bundle-seal", str(second), "--generation", "g2", "--upload", bundle["url"], env=az.env())
    assert proc.returncode == 73
    error = error_of(proc)
    g1_sha, g2_sha = bundle["digests"]["model/weights.bin"], hashlib.sha256(b"other weights").hexdigest()
    assert error["message"] == (f"tau-bundle-seal: blob {bundle['url']}/model/weights.bin belongs to generation 'g1' "
                                f"with other bytes (sha256 {g1_sha[:12]}..., generation 'g2' has {g2_sha[:12]}...); "
                                "tau never replaces a blob another generation's manifest names: upload 'g2' to "
                                "another prefix")
    assert error["details"] == {"path": "model/weights.bin", "generation": "g1"}
    assert listing_with_etags(box, bundle["prefix"]) == before  # nothing sent: not a manifest, not a byte
    parent = fresh_parent(tmp_path)
    proc = fetch(bundle["url"], parent / "g1", "--generation", "g1")
    assert proc.returncode == 0, proc.stderr
    assert az.tree_digests(parent / "g1") == bundle["digests"]
    assert tau("tau-bundle-verify", bundle["url"], "--generation", "g1", "--deep", env=az.env()).returncode == 0


def test_two_generations_with_identical_shared_files_both_upload_and_both_fetch(box, tmp_path):
    bundle = small_bundle(tmp_path, box, "shared/identical")
    second = tmp_path / "second"
    g2 = az.make_tree(second, small=5)
    dropped = sorted(g2)[0]
    (second / dropped).unlink()
    del g2[dropped]
    (second / "new.txt").write_text("only in g2\n")
    g2["new.txt"] = hashlib.sha256(b"only in g2\n").hexdigest()
    proc = tau("tau-bundle-seal", str(second), "--generation", "g2", "--upload", bundle["url"], env=az.env())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["uploaded"] == {"url": bundle["url"], "files": 5, "sent": 1, "skipped": 4}
    assert az.get(box, f"{bundle['prefix']}/.tau/current") == b"g2\n"
    parent = fresh_parent(tmp_path)
    for generation, digests in (("g1", bundle["digests"]), ("g2", g2)):
        proc = fetch(bundle["url"], parent / generation, "--generation", generation)
        assert proc.returncode == 0, proc.stderr
        assert az.tree_digests(parent / generation) == digests  # the other generation's files were left alone
        assert tau("tau-bundle-verify", str(parent / generation)).returncode == 0
        proc = tau("tau-bundle-verify", bundle["url"], "--generation", generation, "--deep", env=az.env())
        assert proc.returncode == 0, proc.stdout
        assert json.loads(proc.stdout)["ignored"] == 1  # the file only the other generation names
    az.put(box, f"{bundle['prefix']}/stranger.txt", b"named by no generation")
    proc = tau("tau-bundle-verify", bundle["url"], "--generation", "g1", env=az.env())
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["extra"] == ["stranger.txt"]


def test_a_manifest_at_the_prefix_that_cannot_be_read_refuses_the_upload_before_anything_is_sent(box, tmp_path):
    prefix = "shared/unreadable"
    az.put(box, f"{prefix}/.tau/bundles/g0.json", b"{not json")
    proc = seal_small_tree(box, tmp_path, prefix)
    assert proc.returncode == 65
    assert error_of(proc)["message"].startswith("tau-bundle-seal: the manifest of generation 'g0' there cannot be "
                                                "read (manifest of generation 'g0' is not valid JSON")
    assert error_of(proc)["message"].endswith("tau cannot tell which blobs it names: remove it or upload to a fresh "
                                              "prefix")
    assert az.blob_names(box, prefix) == [".tau/bundles/g0.json"]


def _upload_in_process(monkeypatch, root: Path, generation: str, url: str, stale: set[str]) -> dict:
    """upload.upload_bundle of a sealed tree, in this process, whose first look at the prefix (its listing and the
    other generations' manifests) misses `stale` and every manifest: as if another uploader wrote them just after."""
    from taulib.bundle import blob, upload

    for key, value in az.env().items():
        monkeypatch.setenv(key, value)
    real_listing, real_claims = upload._listing, blob.claims
    first = {"listing": True, "claims": True}

    def listing(client, prefix):
        found = real_listing(client, prefix)
        if first.pop("listing", False):
            return {p: v for p, v in found.items() if p not in stale and not p.startswith(".tau/")}
        return found

    def claims(client, prefix, listing, generation, strict=False):
        if first.pop("claims", False):
            return {}
        return real_claims(client, prefix, listing, generation, strict)

    monkeypatch.setattr(upload, "_listing", listing)
    monkeypatch.setattr(blob, "claims", claims)
    data = (root / ".tau" / "bundles" / f"{generation}.json").read_bytes()
    return upload.upload_bundle(str(root), json.loads(data), data, url)


@pytest.mark.parametrize("size", [1000, 9 << 20], ids=["put", "staged-blocks"])
def test_a_concurrent_uploader_of_another_generation_is_caught_by_the_conditional_write(box, tmp_path, monkeypatch,
                                                                                        size):
    from taulib.errors import Conflict

    prefix = f"shared/race-{size}"
    other = tmp_path / "other"
    other.mkdir()
    (other / "w.bin").write_bytes(b"o" * size)
    proc = tau("tau-bundle-seal", str(other), "--generation", "g0", "--upload", az.url(box, prefix), env=az.env())
    assert proc.returncode == 0, proc.stderr
    before = az.get(box, f"{prefix}/w.bin")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "w.bin").write_bytes(b"m" * size)
    assert tau("tau-bundle-seal", str(mine), "--generation", "g1").returncode == 0
    with pytest.raises(Conflict) as caught:
        _upload_in_process(monkeypatch, mine, "g1", az.url(box, prefix), stale={"w.bin"})
    assert caught.value.code == 73
    assert caught.value.message == (
        f"blob {az.url(box, prefix)}/w.bin belongs to generation 'g0' with other bytes (sha256 "
        f"{hashlib.sha256(b'o' * size).hexdigest()[:12]}..., generation 'g1' has "
        f"{hashlib.sha256(b'm' * size).hexdigest()[:12]}...); it was written while this upload ran; tau never "
        "replaces a blob another generation's manifest names: upload 'g1' to another prefix")
    assert az.get(box, f"{prefix}/w.bin") == before
    assert ".tau/bundles/g1.complete" not in az.blob_names(box, prefix)  # g1 is not acknowledged there
    parent = fresh_parent(tmp_path)
    proc = fetch(az.url(box, prefix), parent / "g0", "--generation", "g0")
    assert proc.returncode == 0, proc.stderr
    assert (parent / "g0" / "w.bin").read_bytes() == b"o" * size


def test_a_concurrent_uploader_of_identical_bytes_is_kept_not_replaced(box, tmp_path, monkeypatch):
    prefix = "shared/race-identical"
    first = tmp_path / "first"
    az.make_tree(first, small=3)
    proc = tau("tau-bundle-seal", str(first), "--generation", "g0", "--upload", az.url(box, prefix), env=az.env())
    assert proc.returncode == 0, proc.stderr
    before = listing_with_etags(box, prefix)
    again = tmp_path / "again"
    az.make_tree(again, small=3)
    assert tau("tau-bundle-seal", str(again), "--generation", "g1").returncode == 0
    stale = {p for p in az.blob_names(box, prefix) if not p.startswith(".tau/")}
    result = _upload_in_process(monkeypatch, again, "g1", az.url(box, prefix), stale=stale)
    assert (result["sent"], result["skipped"]) == (0, 3)
    after = listing_with_etags(box, prefix)
    assert {k: v for k, v in after.items() if k in before and "/.tau/" not in k} == \
        {k: v for k, v in before.items() if "/.tau/" not in k}  # the same blobs, never rewritten
    for generation in ("g0", "g1"):
        assert tau("tau-bundle-verify", az.url(box, prefix), "--generation", generation, "--deep",
                   env=az.env()).returncode == 0


# -- a blob replaced after it was listed ----------------------------------------------------------------------------

@pytest.mark.parametrize("size", [1000, 10 << 20], ids=["small", "ranged"])
def test_a_download_pinned_to_the_listed_etag_fails_when_the_blob_was_replaced_since(box, tmp_path, size):
    from taulib.bundle import blob, endpoint, transfer
    from taulib.errors import CheckFailed

    prefix = f"etag/{size}"
    az.put(box, f"{prefix}/f.bin", b"a" * size)
    location = endpoint.parse(az.url(box, prefix), az.env())
    client = blob.reader(location, az.env())
    listed = blob.list_prefix(client, prefix)
    az.put(box, f"{prefix}/f.bin", b"b" * size)  # same name, same size, new content: a new etag
    with open(tmp_path / "f.bin", "w+b") as fh, pytest.raises(CheckFailed) as caught:
        transfer.download(client, f"{prefix}/f.bin", fh.fileno(), size, listed["f.bin"][1])
    assert caught.value.code == 1
    assert caught.value.message == f"downloading {prefix}/f.bin: the blob changed after it was listed"
    current = blob.list_prefix(client, prefix)["f.bin"][1]
    assert transfer.download(client, f"{prefix}/f.bin", None, size, current) == hashlib.sha256(b"b" * size).hexdigest()


# -- where a bundle is: the run's own records ------------------------------------------------------------------------

def test_a_bundle_sealed_inside_a_run_is_fetched_through_the_runs_record_of_it(box, tmp_path):
    from helpers import complete_run

    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    run_dir = complete_run(ws, records=20, shards=2)
    root = tmp_path / "shard-out"
    digests = az.make_tree(root, small=5)
    sealing = az.env(TAU_RUN_DIR=str(run_dir), TAU_RUN_ID=run_dir.name, TAU_SHARD_ID="shard-00001",
                     TAU_ATTEMPT_ID="attempt-0001")
    proc = tau("tau-bundle-seal", str(root), "--generation", "sub1-s1", "--run", run_dir.name, "--upload",
               az.url(box, "records/run/s1"), "--record", str(run_dir), env=sealing)
    assert proc.returncode == 0, proc.stderr
    recorded = json.loads(proc.stdout)["recorded"]
    assert (recorded["shard_id"], recorded["attempt_id"], recorded["generation"]) == \
        ("shard-00001", "attempt-0001", "sub1-s1")
    parent = fresh_parent(tmp_path)
    proc = tau("tau-bundle-fetch", "--run", str(run_dir), "--shard", "shard-00001", "--destination",
               str(parent / "got"), env=az.env())
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["generation"], result["source"]) == ("sub1-s1", az.url(box, "records/run/s1"))
    assert az.tree_digests(parent / "got") == digests


# -- a fetch killed part way ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("failpoint, published", [("fetch.staged", False), ("fetch.published", True)])
@pytest.mark.parametrize("fallback", [False, True], ids=["renameat2", "no-renameat2"])
def test_a_fetch_killed_part_way_leaves_no_partial_destination_and_the_next_fetch_tidies_and_finishes(
        box, tmp_path, failpoint, published, fallback):
    bundle = small_bundle(tmp_path, box, f"killed/{failpoint}/{fallback}")
    parent = fresh_parent(tmp_path)
    dest = parent / "model"
    env = dict(az.env(), TAU_FAILPOINTS=f"{failpoint}=crash", **({"TAU_NO_RENAMEAT2": "1"} if fallback else {}))
    crashed = fetch(bundle["url"], dest, "--generation", "g1", env=env)
    assert crashed.returncode == -9, crashed.stderr
    assert dest.exists() == published  # never a partial destination: absent, or complete (checked below)
    stage = claimed_stage(parent, "model")  # what it left is named in its claim: removed by that name
    assert (parent / stage).is_dir() != published
    env = dict(az.env(), **({"TAU_NO_RENAMEAT2": "1"} if fallback else {}))
    again = fetch(bundle["url"], dest, "--generation", "g1", env=env)
    if published:  # it is there, whole: a second fetch to it is refused, and it is left as it was
        assert again.returncode == 73, again.stderr
        assert "exists and is not empty" in error_of(again)["message"]
    else:
        assert again.returncode == 0, again.stderr
    for name, digest in bundle["digests"].items():
        assert hashlib.sha256((dest / name).read_bytes()).hexdigest() == digest, name
    assert sorted(os.listdir(parent)) == ["model"]  # no stage, no reservation marker


def claimed_stage(parent: Path, name: str) -> str:
    """The stage that the claim beside destination `name` names (the claim a killed fetch leaves)."""
    data = (parent / f".{name}.tau-fetch.lock").read_bytes()
    assert data.endswith(b"\n") and data.startswith(f".{name}.tau-fetch-".encode()), data
    return data[:-1].decode()


def test_a_fetch_killed_by_sigkill_mid_transfer_leaves_its_stage_which_the_next_fetch_removes_by_its_recorded_name(
        box, tmp_path):
    import signal
    import subprocess
    import time

    from helpers import BIN, env_for_tests

    bundle = small_bundle(tmp_path, box, "killed/sigkill", big_mib=96)
    parent = fresh_parent(tmp_path)
    decoy = parent / ".model.tau-fetch-0123456789ab"  # named like a stage of the destination, recorded nowhere
    decoy.mkdir(mode=0o700)
    (decoy / "keep").write_text("not a stage of any fetch\n")
    proc = subprocess.Popen([str(BIN / "tau-bundle-fetch"), bundle["url"], "--generation", "g1", "--destination",
                             str(parent / "model")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env_for_tests(az.env()))
    while not any(n.startswith(".model.tau-fetch-") and n != decoy.name for n in os.listdir(parent)):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -9
    stage = claimed_stage(parent, "model")
    assert sorted(os.listdir(parent)) == sorted([decoy.name, stage, ".model.tau-fetch.lock"])
    again = fetch(bundle["url"], parent / "model", "--generation", "g1")
    assert again.returncode == 0, again.stderr
    assert sorted(os.listdir(parent)) == sorted([decoy.name, "model"])  # its stage and claim gone, the decoy kept
    assert (decoy / "keep").read_text() == "not a stage of any fetch\n"
    assert az.tree_digests(parent / "model") == bundle["digests"]


# -- a fetch stopped by a signal: nothing left ----------------------------------------------------------------------

@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("existed", [False, True], ids=["absent", "empty-folder"])
def test_a_fetch_stopped_by_a_signal_removes_its_stage_and_claim_and_leaves_the_destination_as_it_was(
        box, tmp_path, signame, existed):
    import signal

    from helpers import start_paused

    bundle = small_bundle(tmp_path, box, f"stopped/{signame}/{existed}")
    parent = fresh_parent(tmp_path)
    dest = parent / "model"
    if existed:
        dest.mkdir(mode=0o700)
    proc = start_paused("tau-bundle-fetch", bundle["url"], "--generation", "g1", "--destination", str(dest),
                        failpoint="fetch.staged", trace=tmp_path / "trace", env=az.env())
    stage = claimed_stage(parent, "model")
    assert sorted(az.tree_digests(parent / stage)) == sorted(bundle["digests"])  # the complete stage
    signum = signal.Signals[signame]
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    assert out == ""
    error = json.loads(err.strip())  # exactly one error object (Ctrl-C's newline before it aside)
    assert (error["message"], error["details"]) == (f"tau-bundle-fetch: interrupted by {signame}",
                                                    {"signal": signame})
    assert sorted(os.listdir(parent)) == (["model"] if existed else [])  # no stage, no claim
    if existed:
        assert os.listdir(dest) == []


def test_a_fetch_stopped_between_the_claim_and_the_rename_of_the_fallback_restores_the_empty_destination(
        box, tmp_path):
    import signal

    from helpers import start_paused

    bundle = small_bundle(tmp_path, box, "stopped/fallback")
    parent = fresh_parent(tmp_path)
    dest = parent / "model"
    dest.mkdir(mode=0o700)
    proc = start_paused("tau-bundle-fetch", bundle["url"], "--generation", "g1", "--destination", str(dest),
                        failpoint="publish.claimed", trace=tmp_path / "trace", env=az.env(TAU_NO_RENAMEAT2="1"))
    assert (parent / ".model.tau-reserved").exists()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert sorted(os.listdir(parent)) == ["model"] and os.listdir(dest) == []  # as it was: an empty folder


def test_a_fetch_stopped_mid_transfer_by_repeated_signals_joins_its_transfers_and_leaves_nothing(box, tmp_path):
    import signal
    import subprocess
    import time

    from helpers import BIN, env_for_tests

    bundle = small_bundle(tmp_path, box, "stopped/repeated", big_mib=96)
    parent = fresh_parent(tmp_path)
    proc = subprocess.Popen([str(BIN / "tau-bundle-fetch"), bundle["url"], "--generation", "g1", "--destination",
                             str(parent / "model")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_for_tests(az.env()))
    while not any(n.startswith(".model.tau-fetch-") for n in os.listdir(parent)):  # its stage (the claim: ".lock")
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.005)
    time.sleep(0.05)  # ranges in flight on the transfer threads
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM):  # Ctrl-C pressed again, a second kill
        proc.send_signal(signum)
        time.sleep(0.01)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (130, 143), err
    assert out == "" and "Traceback" not in err and "Exception ignored" not in err
    assert json.loads(err.strip())["error"] == "interrupted"  # one error object, nothing else
    assert os.listdir(parent) == []


def test_a_second_fetch_to_a_destination_that_one_is_fetching_into_is_busy_and_touches_nothing(box, tmp_path):
    from helpers import start_paused

    bundle = small_bundle(tmp_path, box, "busy")
    parent = fresh_parent(tmp_path)
    dest = parent / "model"
    first = start_paused("tau-bundle-fetch", bundle["url"], "--generation", "g1", "--destination", str(dest),
                         failpoint="fetch.staged", trace=tmp_path / "trace", env=az.env())
    try:
        before = sorted(os.listdir(parent))
        second = fetch(bundle["url"], dest, "--generation", "g1")
        assert second.returncode == 75, second.stderr
        assert error_of(second)["message"] == (f"tau-bundle-fetch: another tau-bundle-fetch to {str(dest)!r} is "
                                               "running; wait for it to end, or fetch to another destination")
        assert sorted(os.listdir(parent)) == before  # its stage untouched
    finally:
        first.terminate()
        first.communicate(timeout=60)
    assert first.returncode == 143 and os.listdir(parent) == []
    third = fetch(bundle["url"], dest, "--generation", "g1")
    assert third.returncode == 0, third.stderr
    assert az.tree_digests(dest) == bundle["digests"]


# -- progress on a terminal, and nothing without one -----------------------------------------------------------------

def test_on_a_terminal_a_fetch_shows_its_progress_on_stderr_and_stdout_keeps_its_json(big_bundle, tmp_path):
    from helpers import tau_on_terminal

    parent = fresh_parent(tmp_path)
    code, out, terminal = tau_on_terminal("tau-bundle-fetch", big_bundle["url"], "--generation", "g1",
                                          "--destination", str(parent / "copy"), env=az.env())
    assert code == 0, terminal
    assert json.loads(out)["files"] == 201
    assert terminal.startswith("\rfetching g1: ") and terminal.endswith("\x1b[K\r\n")
    last = terminal.split("\r")[-2]
    assert re.fullmatch(r"fetching g1: ([0-9.]+)/\1 MiB \(100%\), 201/201 files, [0-9.]+ MiB/s, ETA 0:00:00\x1b\[K",
                        last), terminal
    nothing = tau_on_terminal("tau-bundle-fetch", big_bundle["url"], "--generation", "g1", "--destination",
                              str(parent / "quiet"), "--no-progress", env=az.env())
    assert nothing[0] == 0 and nothing[2] == ""


def test_a_fetch_into_a_pipe_is_silent_unless_progress_is_asked_for(big_bundle, tmp_path):
    parent = fresh_parent(tmp_path)
    quiet = fetch(big_bundle["url"], parent / "quiet", "--generation", "g1")
    assert quiet.returncode == 0 and quiet.stderr == ""
    forced = fetch(big_bundle["url"], parent / "forced", "--generation", "g1", "--progress")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["files"] == 201
    lines = forced.stderr.split("\n")
    assert lines[-1] == "" and "\r" not in forced.stderr
    assert re.fullmatch(r"fetching g1: ([0-9.]+)/\1 MiB \(100%\), 201/201 files, [0-9.]+ MiB/s, ETA 0:00:00",
                        lines[-2]), forced.stderr


# -- without a connection string: the identity branch of the credential ----------------------------------------------

def _without_key() -> dict:
    """The tests' environment for Azurite, but no connection string: tau has no key, and this Azurite is plain http,
    where tau never sends an Azure identity's token, so requests go without credentials (what a public container or
    a SAS-free mirror gets). Tokens over https: test_azurite_identity.py."""
    environ = az.env()
    environ["AZURE_STORAGE_CONNECTION_STRING"] = ""
    return environ


def test_without_a_key_a_private_container_is_refused_with_one_clear_error_and_nothing_is_written(box, tmp_path):
    bundle = small_bundle(tmp_path, box, "identity/private")
    parent = fresh_parent(tmp_path)
    proc = fetch(bundle["url"], parent / "model", "--generation", "g1", env=_without_key())
    assert proc.returncode == 77, proc.stderr
    assert error_of(proc)["message"] == ("tau-bundle-fetch: reading identity/private/.tau/bundles/g1.json: access "
                                         "denied (403) to a request without credentials; set "
                                         "AZURE_STORAGE_CONNECTION_STRING (an Azure identity's token is never sent "
                                         "over plain http)")
    assert_nothing_written(parent)


def test_without_a_key_a_public_container_is_fetched_and_verified_anonymously(tmp_path):
    public = az.new_container()
    az.container_client(public).set_container_access_policy(signed_identifiers={}, public_access="container")
    bundle = small_bundle(tmp_path, public, "identity/public")
    parent = fresh_parent(tmp_path)
    proc = fetch(bundle["url"], parent / "model", "--generation", "g1", env=_without_key())
    assert proc.returncode == 0, proc.stderr
    for name, digest in bundle["digests"].items():
        assert hashlib.sha256((parent / "model" / name).read_bytes()).hexdigest() == digest, name
    verify = tau("tau-bundle-verify", bundle["url"], "--generation", "g1", env=_without_key())
    assert verify.returncode == 0, verify.stderr
