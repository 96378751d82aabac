"""tau-bundle-seal and tau-bundle-verify on local trees: the acknowledgement, its immutability, the declared parts
(an artifact index, the checkpoint index tau builds, metrics copies) whose absence means no acknowledgement at all,
refusals, the payload command, the current pointer, and verification that names what differs and leaves other
generations' files alone. Real processes, real files; every failing case asserts the exit code and the message,
and that nothing was sealed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from helpers import PYTHON, env_for_tests, error_of, snapshot, tau


def make_out(root: Path) -> Path:
    out = root / "out"
    (out / "sub" / "deeper").mkdir(parents=True)
    (out / "a.txt").write_text("alpha\n")
    (out / "sub" / "b.bin").write_bytes(bytes(range(256)) * 40)
    (out / "sub" / "deeper" / "c.json").write_text('{"c": 1}\n')
    (out / "empty.dat").write_bytes(b"")
    return out


@pytest.fixture
def out(workspace: Path) -> Path:
    return make_out(workspace)


def seal(out: Path, generation: str = "g1", *args: str, env: dict | None = None):
    return tau("tau-bundle-seal", str(out), "--generation", generation, *args, env=env)


def verify(source: Path | str, *args: str):
    return tau("tau-bundle-verify", str(source), *args)


def sealed(out: Path, generation: str = "g1", *args: str) -> dict:
    proc = seal(out, generation, *args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return json.loads(proc.stdout)


def manifest(out: Path, generation: str = "g1") -> dict:
    return json.loads((out / ".tau" / "bundles" / f"{generation}.json").read_text())


# -- sealing --------------------------------------------------------------------------------------------------------

def test_sealing_writes_a_manifest_of_every_file_then_a_marker_naming_its_digest(out):
    result = sealed(out, "g1", "--run", "demo")
    data = (out / ".tau" / "bundles" / "g1.json").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    assert (out / ".tau" / "bundles" / "g1.complete").read_bytes() == f"complete g1 {digest}\n".encode()
    record = json.loads(data)
    assert record["kind"] == "tau.bundle-manifest" and record["generation"] == "g1"
    assert [f["path"] for f in record["files"]] == ["a.txt", "empty.dat", "sub/b.bin", "sub/deeper/c.json"]
    assert record["files"][0] == {"path": "a.txt", "size": 6, "sha256": hashlib.sha256(b"alpha\n").hexdigest()}
    assert record["totals"] == {"files": 4, "bytes": 6 + 0 + 10240 + 9}
    assert record["run"] == {"run_id": "demo", "shard_id": None, "attempt_id": None}
    assert record["index"] is None and record["producer"]["command"] is None
    assert result["created"] is True and result["manifest_sha256"] == digest and result["files"] == 4
    assert result["uploaded"] is None


def test_sealing_replaces_the_current_pointer_with_the_generation_sealed_last(out):
    sealed(out, "g1")
    assert (out / ".tau" / "current").read_bytes() == b"g1\n"
    (out / "new.txt").write_text("new\n")
    sealed(out, "g2")
    assert (out / ".tau" / "current").read_bytes() == b"g2\n"
    assert sorted(os.listdir(out / ".tau")) == ["bundles", "current", "locks"]  # no temporary file left behind
    assert os.listdir(out / ".tau" / "locks") == ["seal.lock"]


def test_sealing_the_same_tree_again_is_idempotent(out):
    first = sealed(out)
    before = snapshot(out / ".tau" / "bundles")
    again = sealed(out)
    assert again["created"] is False
    assert again["manifest_sha256"] == first["manifest_sha256"]
    assert snapshot(out / ".tau" / "bundles") == before


def test_a_different_manifest_for_a_sealed_generation_is_refused_with_73(out):
    sealed(out)
    before = snapshot(out / ".tau")
    (out / "a.txt").write_text("changed\n")
    proc = seal(out)
    assert proc.returncode == 73
    error = error_of(proc)
    assert error["error"] == "conflict"
    assert error["message"] == ("tau-bundle-seal: generation 'g1' is already sealed with another manifest; a "
                                "generation is immutable: choose a new one")
    assert proc.stdout == ""
    assert snapshot(out / ".tau") == before


def test_another_run_identity_for_a_sealed_generation_is_refused_with_73(out):
    sealed(out, "g1", "--run", "demo")
    proc = seal(out, "g1", "--run", "other")
    assert proc.returncode == 73
    assert "is already sealed with another manifest" in error_of(proc)["message"]


def test_the_run_identity_takes_shard_and_attempt_from_that_runs_environment(out):
    env = {"TAU_RUN_ID": "demo", "TAU_SHARD_ID": "shard-00003", "TAU_ATTEMPT_ID": "attempt-0002"}
    proc = seal(out, "g1", "--run", "demo", env=env)
    assert proc.returncode == 0, proc.stderr
    assert manifest(out)["run"] == {"run_id": "demo", "shard_id": "shard-00003", "attempt_id": "attempt-0002"}
    (out / "x").write_text("x")
    proc = seal(out, "g2", "--run", "other", env=env)  # another run's environment is not this run's identity
    assert proc.returncode == 0, proc.stderr
    assert manifest(out, "g2")["run"] == {"run_id": "other", "shard_id": None, "attempt_id": None}


def test_a_malformed_run_id_is_bad_input_and_nothing_is_sealed(out):
    proc = seal(out, "g1", "--run", "../x")
    assert proc.returncode == 65
    assert error_of(proc)["message"] == "tau-bundle-seal: --run '../x' is not a run id"
    assert not (out / ".tau").exists()


@pytest.mark.parametrize("generation", ["", "../g", "a/b", ".hidden", "g" * 129, "g 1"])
def test_a_generation_that_is_not_one_safe_path_segment_is_refused(out, generation):
    proc = seal(out, generation)
    assert proc.returncode == 65
    assert error_of(proc)["message"] == (f"tau-bundle-seal: generation {generation!r} must be one path segment of "
                                         "letters, digits and ._-")
    assert not (out / ".tau").exists()


def test_a_missing_folder_is_not_found(workspace):
    proc = seal(workspace / "nope")
    assert proc.returncode == 66
    assert error_of(proc)["message"] == f"tau-bundle-seal: bundle folder {str(workspace / 'nope')!r} does not exist"


def test_a_symlink_in_the_tree_is_refused_with_77_and_nothing_is_sealed(out, workspace):
    (workspace / "elsewhere.txt").write_text("secret\n")
    os.symlink(workspace / "elsewhere.txt", out / "sub" / "link.txt")
    proc = seal(out)
    assert proc.returncode == 77
    assert error_of(proc)["message"] == ("tau-bundle-seal: the bundle tree holds a symlink 'sub/link.txt'; tau never "
                                         "follows one: replace it by the file")
    assert not (out / ".tau").exists()


def test_a_fifo_in_the_tree_is_refused_with_77(out):
    os.mkfifo(out / "pipe")
    proc = seal(out)
    assert proc.returncode == 77
    assert "holds 'pipe', which is not a regular file or folder" in error_of(proc)["message"]
    assert not (out / ".tau").exists()


# -- the optional artifact index ------------------------------------------------------------------------------------

NOT_SEALED = ("{where}: generation {g!r} is not acknowledged: it has no completion marker (its producer never "
              "sealed it, or a part the seal declared was absent)")


def unacknowledged(proc: subprocess.CompletedProcess) -> dict:
    """The result of a seal that acknowledged nothing: exit 0 (the payload's status), nothing on stderr."""
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    result = json.loads(proc.stdout)
    assert result["acknowledged"] is False and result["created"] is False
    assert (result["manifest_sha256"], result["files"], result["bytes"], result["index"], result["checkpoints"],
            result["metrics"], result["uploaded"]) == (None, None, None, None, None, [], None)
    return result


def test_an_absent_declared_index_means_no_acknowledgement_at_all_and_exit_0(out):
    result = unacknowledged(seal(out, "g1", "--index", "checkpoints/artifacts.json"))
    assert result["absent"] == [{"option": "--index", "path": "checkpoints/artifacts.json"}]
    assert result["reason"] == ("generation 'g1' is not acknowledged: the artifact index 'checkpoints/artifacts.json' "
                                "(--index) is absent; nothing was written or uploaded")
    assert not (out / ".tau").exists()  # no manifest, no marker, no current pointer
    proc = verify(out, "--generation", "g1")
    assert proc.returncode == 1
    assert report_of(proc)["problems"] == [NOT_SEALED.format(where=out, g="g1")]
    assert error_of(proc)["message"] == (f"tau-bundle-verify: bundle {out} generation 'g1' is not complete (1 "
                                         f"finding(s)): {NOT_SEALED.format(where=out, g='g1')}")
    proc = verify(out)
    assert proc.returncode == 1
    assert "not acknowledged" in error_of(proc)["message"]


def test_an_absent_index_leaves_the_earlier_generation_and_the_current_pointer_as_they_were(out):
    sealed(out, "g1")
    before = snapshot(out / ".tau")
    (out / "new.txt").write_text("new\n")
    unacknowledged(seal(out, "g2", "--index", "artifacts.json"))
    assert snapshot(out / ".tau") == before
    assert (out / ".tau" / "current").read_bytes() == b"g1\n"
    proc = verify(out, "--generation", "g2")
    assert proc.returncode == 1
    assert report_of(proc)["problems"] == [NOT_SEALED.format(where=out, g="g2")]


def test_a_payload_that_succeeds_without_its_declared_index_keeps_exit_0_and_is_not_acknowledged(out):
    result = unacknowledged(seal(out, "g1", "--index", "artifacts.json", "--", PYTHON, "-c", "pass"))
    assert result["absent"] == [{"option": "--index", "path": "artifacts.json"}]
    assert not (out / ".tau").exists()


def test_a_payload_that_fails_with_a_declared_index_exits_with_its_own_status(out):
    proc = seal(out, "g1", "--index", "artifacts.json", "--", PYTHON, "-c", "import sys; sys.exit(5)")
    assert proc.returncode == 5
    assert error_of(proc)["message"] == f"tau-bundle-seal: the payload {PYTHON!r} exited with status 5; nothing sealed"
    assert not (out / ".tau").exists()


def test_an_unacknowledged_seal_uploads_nothing(out):
    # a trusted endpoint where nothing listens: any request would fail with 69
    env = {"TAU_TRUSTED_BLOB_ENDPOINTS": "http://127.0.0.1:9", "TAU_BLOB_RETRIES": "0",
           "AZURE_STORAGE_CONNECTION_STRING": "AccountName=devstoreaccount1;AccountKey=a2V5"}
    proc = seal(out, "g1", "--index", "artifacts.json", "--upload", "http://127.0.0.1:9/devstoreaccount1/box/p",
                env=env)
    result = unacknowledged(proc)
    assert result["uploaded"] is None
    assert not (out / ".tau").exists()


def test_an_unacknowledged_seal_records_nothing_in_the_run(out, workspace):
    from helpers import init_run

    run_dir = init_run(workspace, "run", records=10, shards=1)
    env = {"TAU_TRUSTED_BLOB_ENDPOINTS": "http://127.0.0.1:9", "TAU_BLOB_RETRIES": "0"}
    proc = seal(out, "g1", "--index", "artifacts.json", "--upload", "http://127.0.0.1:9/devstoreaccount1/box/p",
                "--record", str(run_dir), env=env)
    assert unacknowledged(proc)["recorded"] is None
    assert not (run_dir / "bundles").exists()


def test_every_declared_part_that_is_absent_is_named(out, workspace):
    proc = seal(out, "g1", "--index", "artifacts.json", "--checkpoints", "sub/*", "--checkpoints", "ckpt/*",
                "--metrics", str(workspace / "loss.csv"))
    result = unacknowledged(proc)
    assert result["absent"] == [{"option": "--index", "path": "artifacts.json"},
                                {"option": "--checkpoints", "path": "ckpt/*"},
                                {"option": "--metrics", "path": str(workspace / "loss.csv")}]
    assert result["reason"] == (
        "generation 'g1' is not acknowledged: the artifact index 'artifacts.json' (--index) is absent; the "
        f"checkpoint glob 'ckpt/*' (--checkpoints) matches nothing; the metrics file {str(workspace / 'loss.csv')!r} "
        "(--metrics) is absent; nothing was written or uploaded")


def test_an_index_naming_the_generation_is_recorded_by_path_and_digest(out):
    data = json.dumps({"bundle_id": "g1", "artifacts": []}).encode()
    (out / "sub" / "artifacts.json").write_bytes(data)
    result = sealed(out, "g1", "--index", "sub/artifacts.json")
    expected = {"path": "sub/artifacts.json", "sha256": hashlib.sha256(data).hexdigest(), "generation": "g1"}
    assert result["index"] == expected and manifest(out)["index"] == expected


def test_a_malformed_index_is_refused_with_65_and_nothing_is_sealed(out):
    (out / "artifacts.json").write_text("{not json")
    proc = seal(out, "g1", "--index", "artifacts.json")
    assert proc.returncode == 65
    assert error_of(proc)["message"].startswith("tau-bundle-seal: artifact index 'artifacts.json' is not valid JSON")
    assert not (out / ".tau").exists()


def test_an_index_without_a_generation_is_refused_with_65(out):
    (out / "artifacts.json").write_text('{"artifacts": []}')
    proc = seal(out, "g1", "--index", "artifacts.json")
    assert proc.returncode == 65
    assert error_of(proc)["message"] == ("tau-bundle-seal: artifact index 'artifacts.json' names no generation "
                                         "(bundle_id)")
    assert not (out / ".tau").exists()


def test_an_index_of_another_generation_is_refused_with_73_and_nothing_is_sealed(out):
    (out / "artifacts.json").write_text('{"bundle_id": "g0"}')
    proc = seal(out, "g1", "--index", "artifacts.json")
    assert proc.returncode == 73
    assert error_of(proc)["message"] == ("tau-bundle-seal: artifact index 'artifacts.json' belongs to generation "
                                         "'g0', not 'g1'")
    assert not (out / ".tau").exists()


def test_an_index_path_outside_the_tree_is_refused_with_77(out):
    proc = seal(out, "g1", "--index", "../artifacts.json")
    assert proc.returncode == 77
    assert error_of(proc)["message"] == "tau-bundle-seal: bundle path '../artifacts.json' escapes or is not normalised"
    assert not (out / ".tau").exists()


# -- checkpoints: the index tau builds ------------------------------------------------------------------------------

def make_checkpoints(out: Path) -> None:
    for step in ("step-100", "step-1200"):
        (out / "ckpt" / step / "shard").mkdir(parents=True)
        (out / "ckpt" / step / "model.bin").write_bytes(step.encode() * 100)
        (out / "ckpt" / step / "shard" / "opt.bin").write_bytes(b"o" + step.encode())
    (out / "ckpt" / "epoch_3.h5").write_bytes(b"epoch three")
    (out / "ckpt" / "final.pt").write_bytes(b"final")


def folder_sha256(folder: Path) -> str:
    """The documented folder digest, computed independently: per file in byte order of its relative path,
    `SHA256 SIZE PATH` and a NUL byte."""
    h = hashlib.sha256()
    files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: os.fsencode(p.relative_to(folder)))
    for path in files:
        data = path.read_bytes()
        h.update(f"{hashlib.sha256(data).hexdigest()} {len(data)} ".encode() + os.fsencode(path.relative_to(folder))
                 + b"\0")
    return h.hexdigest()


def test_checkpoints_are_indexed_with_path_kind_step_size_and_sha256_bound_to_the_generation(out):
    make_checkpoints(out)
    result = sealed(out, "g1", "--checkpoints", "ckpt/*")
    index_path = out / ".tau" / "bundles" / "g1.d" / "checkpoints.json"
    data = index_path.read_bytes()
    index = json.loads(data)
    ckpt = out / "ckpt"
    assert index == {
        "kind": "tau.checkpoint-index", "schema_version": 1, "generation": "g1", "globs": ["ckpt/*"],
        "latest": "ckpt/step-1200",
        "checkpoints": [
            {"path": "ckpt/epoch_3.h5", "kind": "file", "step": 3, "size": 11, "files": 1,
             "sha256": hashlib.sha256(b"epoch three").hexdigest()},
            {"path": "ckpt/final.pt", "kind": "file", "step": None, "size": 5, "files": 1,
             "sha256": hashlib.sha256(b"final").hexdigest()},
            {"path": "ckpt/step-100", "kind": "folder", "step": 100, "size": 800 + 9, "files": 2,
             "sha256": folder_sha256(ckpt / "step-100")},
            {"path": "ckpt/step-1200", "kind": "folder", "step": 1200, "size": 900 + 10, "files": 2,
             "sha256": folder_sha256(ckpt / "step-1200")}]}
    entry = {"path": ".tau/bundles/g1.d/checkpoints.json", "size": len(data),
             "sha256": hashlib.sha256(data).hexdigest(), "count": 4}
    assert manifest(out)["checkpoints"] == entry and result["checkpoints"] == entry
    assert ".tau/bundles/g1.d/checkpoints.json" not in [f["path"] for f in manifest(out)["files"]]
    assert result["acknowledged"] is True and result["absent"] == [] and result["reason"] is None
    proc = verify(out)
    assert proc.returncode == 0, proc.stderr
    assert sealed(out, "g1", "--checkpoints", "ckpt/*")["created"] is False  # the same index: idempotent


def test_a_folder_digest_is_the_same_wherever_the_folder_is(out, workspace):
    make_checkpoints(out)
    sealed(out, "g1", "--checkpoints", "ckpt/step-100")
    other = make_out(workspace / "elsewhere")
    (other / "models").mkdir()
    import shutil

    shutil.copytree(out / "ckpt" / "step-100", other / "models" / "s100")
    sealed(other, "g9", "--checkpoints", "models/s*")
    ours = json.loads((out / ".tau" / "bundles" / "g1.d" / "checkpoints.json").read_bytes())["checkpoints"]
    theirs = json.loads((other / ".tau" / "bundles" / "g9.d" / "checkpoints.json").read_bytes())["checkpoints"]
    assert [(c["sha256"], c["size"], c["files"], c["step"]) for c in ours] == \
        [(c["sha256"], c["size"], c["files"], c["step"]) for c in theirs]


@pytest.mark.parametrize("path, kind, step", [
    ("ckpt/step-1200", "folder", 1200), ("checkpoint-1200", "folder", 1200), ("epoch_3", "folder", 3),
    ("global_step0450", "folder", 450), ("ckpt-100.h5", "file", 100), ("step-7.tar.gz", "file", 7),
    ("run2/final", "folder", None), ("model.pt", "file", None), ("v1.2", "folder", 2), (".5", "file", 5),
    ("s" + "9" * 19, "folder", None)])
def test_the_step_is_the_last_run_of_digits_of_the_last_name_without_a_files_extension(path, kind, step):
    from taulib.bundle import manifest as mf

    assert mf.checkpoint_step(path, kind) == step


def test_a_checkpoint_glob_that_matches_nothing_means_no_acknowledgement(out):
    make_checkpoints(out)
    result = unacknowledged(seal(out, "g1", "--checkpoints", "ckpt/*", "--checkpoints", "ckpt/step-9*"))
    assert result["absent"] == [{"option": "--checkpoints", "path": "ckpt/step-9*"}]
    assert not (out / ".tau").exists()


def test_an_empty_folder_is_no_checkpoint(out):
    (out / "ckpt" / "step-1").mkdir(parents=True)
    result = unacknowledged(seal(out, "g1", "--checkpoints", "ckpt/*"))
    assert result["absent"] == [{"option": "--checkpoints", "path": "ckpt/*"}]


@pytest.mark.parametrize("glob, message", [
    ("../ckpt/*", "checkpoint glob '../ckpt/*' is not a relative path inside the bundle (no empty, . or .. segment)"),
    ("/abs/*", "checkpoint glob '/abs/*' is not a relative path inside the bundle (no empty, . or .. segment)"),
    (".tau/*", "checkpoint glob '.tau/*' is inside .tau/, which belongs to tau")])
def test_a_checkpoint_glob_outside_the_tree_is_refused_with_77_before_the_payload_runs(out, workspace, glob, message):
    ran = workspace / "ran"
    proc = seal(out, "g1", "--checkpoints", glob, "--", "touch", str(ran))
    assert proc.returncode == 77
    assert error_of(proc)["message"] == f"tau-bundle-seal: {message}"
    assert not ran.exists() and not (out / ".tau").exists()


def test_a_tampered_checkpoint_index_is_caught_by_verify(out):
    make_checkpoints(out)
    sealed(out, "g1", "--checkpoints", "ckpt/*")
    path = out / ".tau" / "bundles" / "g1.d" / "checkpoints.json"
    path.write_bytes(path.read_bytes().replace(b'"step":1200', b'"step":9200'))  # same size, other bytes
    proc = verify(out, "--generation", "g1")
    assert proc.returncode == 1
    assert report_of(proc)["digest_mismatch"] == [".tau/bundles/g1.d/checkpoints.json"]
    assert error_of(proc)["message"] == (f"tau-bundle-verify: bundle {out} generation 'g1' is not complete (1 "
                                         "finding(s)): 0 missing, 0 extra, 0 resized, 1 digest mismatch")
    path.unlink()
    proc = verify(out, "--generation", "g1")
    assert proc.returncode == 1
    assert report_of(proc)["missing"] == [".tau/bundles/g1.d/checkpoints.json"]


def test_a_tampered_checkpoint_index_is_refused_when_the_generation_is_sealed_again(out):
    make_checkpoints(out)
    sealed(out, "g1", "--checkpoints", "ckpt/*")
    path = out / ".tau" / "bundles" / "g1.d" / "checkpoints.json"
    path.write_bytes(b"{}")
    proc = seal(out, "g1", "--checkpoints", "ckpt/*")
    assert proc.returncode == 73
    assert error_of(proc)["message"] == ("tau-bundle-seal: .tau/bundles/g1.d/checkpoints.json differs from what the "
                                         "manifest of its generation names; a generation's acknowledgement is "
                                         "immutable: choose a new generation")
    assert path.read_bytes() == b"{}"


# -- metrics: copies owned by the generation -----------------------------------------------------------------------

def test_metrics_files_from_anywhere_are_copied_into_the_generation_and_named_in_the_manifest(out, workspace):
    (workspace / "logs").mkdir()
    (workspace / "logs" / "loss.csv").write_text("step,loss\n1,0.5\n")
    result = sealed(out, "g1", "--metrics", str(workspace / "logs" / "loss.csv"), "--metrics",
                    str(out / "sub" / "deeper" / "c.json"))
    copies = out / ".tau" / "bundles" / "g1.d" / "metrics"
    assert sorted(os.listdir(copies)) == ["c.json", "loss.csv"]
    assert (copies / "loss.csv").read_bytes() == b"step,loss\n1,0.5\n"
    assert (copies / "c.json").read_bytes() == (out / "sub" / "deeper" / "c.json").read_bytes()
    assert (copies / "loss.csv").stat().st_mode & 0o777 == 0o600
    expected = [{"name": name, "path": f".tau/bundles/g1.d/metrics/{name}", "size": len(data),
                 "sha256": hashlib.sha256(data).hexdigest()}
                for name, data in (("c.json", b'{"c": 1}\n'), ("loss.csv", b"step,loss\n1,0.5\n"))]
    assert manifest(out)["metrics"] == expected and result["metrics"] == expected
    assert verify(out).returncode == 0
    (workspace / "logs" / "loss.csv").write_text("changed later\n")
    assert verify(out).returncode == 0  # the generation owns its copy


def test_an_absent_metrics_file_means_no_acknowledgement(out, workspace):
    result = unacknowledged(seal(out, "g1", "--metrics", str(workspace / "nope.csv")))
    assert result["absent"] == [{"option": "--metrics", "path": str(workspace / "nope.csv")}]
    assert not (out / ".tau").exists()


def test_a_metrics_symlink_is_refused_with_77_and_nothing_is_sealed(out, workspace):
    (workspace / "real.csv").write_text("x\n")
    os.symlink(workspace / "real.csv", workspace / "link.csv")
    proc = seal(out, "g1", "--metrics", str(workspace / "link.csv"))
    assert proc.returncode == 77
    assert error_of(proc)["message"] == (f"tau-bundle-seal: metrics file {str(workspace / 'link.csv')!r} is a "
                                         "symlink; tau never follows one: name the file itself")
    assert not (out / ".tau").exists()


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_metrics_file_that_is_not_a_regular_file_is_refused_with_77(out, workspace, kind):
    path = workspace / "special"
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    proc = seal(out, "g1", "--metrics", str(path))
    assert proc.returncode == 77
    assert error_of(proc)["message"] == f"tau-bundle-seal: metrics file {str(path)!r} is not a regular file"
    assert not (out / ".tau").exists()


def test_two_metrics_files_of_one_name_are_a_usage_error_before_the_payload_runs(out, workspace):
    ran = workspace / "ran"
    proc = seal(out, "g1", "--metrics", "a/loss.csv", "--metrics", "b/loss.csv", "--", "touch", str(ran))
    assert proc.returncode == 2
    assert error_of(proc)["message"] == ("tau-bundle-seal: --metrics: two files are named 'loss.csv' ('a/loss.csv' and "
                                         "'b/loss.csv'); each is copied as .tau/bundles/G.d/metrics/NAME: rename one")
    assert not ran.exists()


def test_a_tampered_or_extra_metrics_copy_is_caught_by_verify(out, workspace):
    (workspace / "loss.csv").write_text("1,0.5\n")
    sealed(out, "g1", "--metrics", str(workspace / "loss.csv"))
    copies = out / ".tau" / "bundles" / "g1.d" / "metrics"
    (copies / "loss.csv").write_text("1,0.1\n")
    (copies / "planted.csv").write_text("x")
    proc = verify(out, "--generation", "g1", "-o", "table")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-2:] == ["extra            .tau/bundles/g1.d/metrics/planted.csv",
                                             "digest mismatch  .tau/bundles/g1.d/metrics/loss.csv"]
    assert error_of(proc)["message"].endswith("is not complete (2 finding(s)): 0 missing, 1 extra, 0 resized, 1 "
                                              "digest mismatch")


def test_sealing_a_generation_again_with_other_metrics_is_refused_with_73(out, workspace):
    (workspace / "loss.csv").write_text("1,0.5\n")
    sealed(out, "g1", "--metrics", str(workspace / "loss.csv"))
    before = snapshot(out / ".tau")
    (workspace / "loss.csv").write_text("1,0.4\n")
    proc = seal(out, "g1", "--metrics", str(workspace / "loss.csv"))
    assert proc.returncode == 73
    assert "generation 'g1' is already sealed with another manifest" in error_of(proc)["message"]
    assert snapshot(out / ".tau") == before


# -- the payload command --------------------------------------------------------------------------------------------

def test_a_payload_that_fails_exits_with_its_status_and_leaves_nothing_sealed(out):
    proc = seal(out, "g1", "--", PYTHON, "-c", "import sys; print('working'); sys.exit(3)")
    assert proc.returncode == 3
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines[0] == "working"  # the payload's stdout goes to stderr: stdout carries only tau's JSON
    error = json.loads(lines[-1])
    assert error["code"] == 3 and error["details"] == {"payload_status": 3}
    assert error["message"] == f"tau-bundle-seal: the payload {PYTHON!r} exited with status 3; nothing sealed"
    assert not (out / ".tau").exists()


def test_a_payload_ended_by_a_signal_exits_128_plus_the_signal(out):
    proc = seal(out, "g1", "--", "sh", "-c", "kill -TERM $$")
    assert proc.returncode == 128 + 15
    assert "the payload 'sh' exited with status 143; nothing sealed" in proc.stderr
    assert not (out / ".tau").exists()


def test_a_payload_that_succeeds_is_sealed_with_its_command_recorded(workspace):
    out = workspace / "made"
    script = "import os, sys; os.mkdir(sys.argv[1]); open(sys.argv[1] + '/r.txt', 'w').write('r'); print('done')"
    proc = seal(out, "g1", "--", PYTHON, "-c", script, str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "done\n"
    result = json.loads(proc.stdout)
    assert result["files"] == 1 and result["created"] is True
    assert manifest(out)["producer"]["command"] == [PYTHON, "-c", script, str(out)]


def test_a_payload_command_that_does_not_exist_is_not_found_and_nothing_is_sealed(out):
    proc = seal(out, "g1", "--", "/nonexistent/payload")
    assert proc.returncode == 66
    assert error_of(proc)["message"] == ("tau-bundle-seal: the payload command '/nonexistent/payload' was not found; "
                                         "nothing sealed")
    assert not (out / ".tau").exists()


# -- verifying ------------------------------------------------------------------------------------------------------

def report_of(proc: subprocess.CompletedProcess) -> dict:
    return json.loads(proc.stdout)


def test_verify_of_a_sealed_tree_is_complete_and_exits_0(out):
    digest = sealed(out)["manifest_sha256"]
    proc = verify(out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    report = report_of(proc)
    assert report["complete"] is True and report["hashed"] is True
    assert (report["generation"], report["manifest_sha256"], report["files"]) == ("g1", digest, 4)
    assert report["missing"] == report["extra"] == report["resized"] == report["digest_mismatch"] == []
    assert report["problems"] == []


def test_verify_names_missing_extra_resized_and_digest_mismatched_files_and_exits_1(out):
    sealed(out)
    (out / "a.txt").unlink()
    (out / "sub" / "new.txt").write_text("new\n")
    (out / "empty.dat").write_bytes(b"grew")
    (out / "sub" / "b.bin").write_bytes(b"\xff" * 10240)  # same size, other bytes
    proc = verify(out, "--generation", "g1")
    assert proc.returncode == 1
    report = report_of(proc)
    assert report["complete"] is False
    assert report["missing"] == ["a.txt"]
    assert report["extra"] == ["sub/new.txt"]
    assert report["resized"] == [{"path": "empty.dat", "expected": 0, "actual": 4}]
    assert report["digest_mismatch"] == ["sub/b.bin"]
    assert error_of(proc)["message"] == (f"tau-bundle-verify: bundle {str(out)} generation 'g1' is not complete "
                                         "(4 finding(s)): 1 missing, 1 extra, 1 resized, 1 digest mismatch")


def test_verify_as_a_table_names_each_finding(out):
    sealed(out)
    (out / "a.txt").unlink()
    proc = verify(out, "-o", "table")
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"bundle {out} generation g1: NOT complete (4 files, 10255 bytes, sizes and sha256 checked)", "",
        "FINDING  DETAIL", "missing  a.txt"]


def test_a_marker_for_another_generation_is_not_complete(out):
    sealed(out)
    marker = out / ".tau" / "bundles" / "g1.complete"
    marker.write_text(marker.read_text().replace("complete g1 ", "complete g0 "))
    proc = verify(out, "--generation", "g1")
    assert proc.returncode == 1
    report = report_of(proc)
    assert report["complete"] is False and report["files"] is None
    assert report["problems"] == ["completion marker acknowledges generation 'g0', not 'g1'"]
    assert "completion marker acknowledges generation 'g0', not 'g1'" in error_of(proc)["message"]


def test_a_missing_marker_is_not_complete(out):
    sealed(out)
    (out / ".tau" / "bundles" / "g1.complete").unlink()
    proc = verify(out, "--generation", "g1")
    assert proc.returncode == 1
    assert report_of(proc)["problems"] == [NOT_SEALED.format(where=out, g="g1")]
    proc = verify(out)
    assert proc.returncode == 1
    report = report_of(proc)
    assert report["generation"] is None
    assert report["problems"] == [f"{out} holds no acknowledged bundle generation: not acknowledged without a "
                                  "completion marker under .tau/bundles/ (none was sealed, or a part its seal "
                                  "declared was absent)"]
    assert error_of(proc)["message"] == (f"tau-bundle-verify: bundle {out} generation None is not complete (1 "
                                         f"finding(s)): {report['problems'][0]}")


def test_a_manifest_edited_after_its_marker_is_not_complete(out):
    sealed(out)
    path = out / ".tau" / "bundles" / "g1.json"
    record = json.loads(path.read_text())
    record["files"] = record["files"][1:]
    record["totals"] = {"files": 3, "bytes": record["totals"]["bytes"] - 6}
    path.write_text(json.dumps(record))
    proc = verify(out)
    assert proc.returncode == 1
    assert report_of(proc)["problems"][0].startswith(f"{out}: the completion marker of generation 'g1' acknowledges "
                                                     "manifest ")


def test_a_manifest_with_an_escaping_path_is_not_complete(out):
    sealed(out)
    path = out / ".tau" / "bundles" / "g1.json"
    record = json.loads(path.read_text())
    record["files"][0]["path"] = "../outside.txt"
    data = json.dumps(record).encode()
    path.write_bytes(data)
    (out / ".tau" / "bundles" / "g1.complete").write_text(f"complete g1 {hashlib.sha256(data).hexdigest()}\n")
    proc = verify(out)
    assert proc.returncode == 1
    assert report_of(proc)["problems"] == ["bundle path '../outside.txt' escapes or is not normalised"]


def test_a_tree_with_several_generations_needs_one_named(out):
    sealed(out, "g1")
    (out / "x").write_text("x")
    sealed(out, "g2")
    proc = verify(out)
    assert proc.returncode == 2
    assert error_of(proc)["message"] == f"tau-bundle-verify: {out} holds several generations (g1, g2); name one " \
                                        "with --generation"
    assert verify(out, "--generation", "g2").returncode == 0


def test_a_file_another_generation_names_is_not_extra_to_this_one_and_an_unnamed_file_is(out):
    sealed(out, "g1")
    (out / "x").write_text("x")
    sealed(out, "g2")
    proc = verify(out, "--generation", "g1")
    assert proc.returncode == 0, proc.stderr
    report = report_of(proc)
    assert (report["complete"], report["extra"], report["ignored"]) == (True, [], 1)
    assert report_of(verify(out, "--generation", "g2"))["ignored"] == 0
    (out / "stray").write_text("named by no generation")
    proc = verify(out, "--generation", "g1")
    assert proc.returncode == 1
    assert (report_of(proc)["extra"], report_of(proc)["ignored"]) == (["stray"], 1)


def test_verify_of_a_missing_folder_is_not_found(workspace):
    proc = verify(workspace / "nope")
    assert proc.returncode == 66
    assert error_of(proc)["message"] == f"tau-bundle-verify: bundle folder {str(workspace / 'nope')!r} does not exist"


def test_verify_names_a_symlink_that_appeared_in_a_sealed_tree(out):
    sealed(out)
    os.symlink("/etc/passwd", out / "sub" / "link")
    proc = verify(out)
    assert proc.returncode == 1
    assert report_of(proc)["problems"] == ["the bundle tree holds a symlink 'sub/link'; tau never follows one: "
                                           "replace it by the file"]


# -- conventions ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["tau-bundle-seal", "tau-bundle-verify", "tau-bundle-fetch"])
def test_help_shows_an_example_and_imports_no_azure_module(command):
    module = "taulib.cli." + command[4:].replace("-", "_")
    code = ("import sys, importlib\n"
            "from taulib.cli import common\n"
            f"m = importlib.import_module({module!r})\n"
            f"code = common.run_command({command!r}, m.cli, ['--help'])\n"
            "assert code == 0, code\n"
            "loaded = sorted(n for n in sys.modules if n.split('.')[0] in ('azure', 'requests', 'urllib3'))\n"
            "print('LOADED', loaded)\n")
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env_for_tests())
    assert proc.returncode == 0, proc.stderr
    assert "Example:" in proc.stdout and command in proc.stdout.split("Example:", 1)[1]
    assert proc.stdout.splitlines()[-1] == "LOADED []"


@pytest.mark.parametrize("words", [["bundle-verify"], ["bundle", "verify"]])
def test_the_front_command_runs_the_bundle_commands(out, words):
    sealed(out)
    proc = tau("tau", *words, str(out), "-o", "table")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"bundle {out} generation g1: complete (4 files")


def test_a_wrong_option_is_a_usage_error_with_one_json_line(out):
    proc = tau("tau-bundle-fetch", "https://acct.blob.core.windows.net/box/p", "--destination", str(out / "d"),
               "--generation", "g1", "--current")
    assert proc.returncode == 2
    assert error_of(proc)["message"] == "tau-bundle-fetch: --generation and --current exclude each other"
    proc = tau("tau-bundle-fetch", "https://acct.blob.core.windows.net/box/p", "--destination", str(out / "d"))
    assert proc.returncode == 2
    assert error_of(proc)["message"].startswith("tau-bundle-fetch: name the generation (--generation G")
    proc = tau("tau-bundle-seal", str(out))
    assert proc.returncode == 2
    assert error_of(proc)["message"] == "tau-bundle-seal: Missing option '--generation'."


def test_a_stray_argument_without_the_double_dash_is_never_run_as_a_payload(out, workspace):
    ran = workspace / "ran"
    proc = seal(out, "g1", "touch", str(ran))
    assert proc.returncode == 2
    assert error_of(proc)["message"] == ("tau-bundle-seal: unexpected argument 'touch'; put the payload COMMAND "
                                         "after '--'")
    assert not ran.exists() and not (out / ".tau").exists()
