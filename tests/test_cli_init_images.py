"""tau-init with images: a reference must be pinned by digest, an image file by its sha256, a mount a runtime can
take; the runtime's program must be there; --check-image asks the runtime (or hashes the file). A refusal writes
nothing. (The images run for real in tests/test_containers.py.)"""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from helpers import error_of, plan, tau

DIGEST = "sha256:" + "ab" * 32


def init(run_dir, request, *args, env=None):
    return tau("tau-init", str(run_dir), *args, input=json.dumps(request), env=env)


def with_image(image, **extra):
    return {**plan(records=8, shards=2), "command": ["python3", "/work/client.py"], "image": image, **extra}


@pytest.fixture
def runtime_bin(tmp_path):
    """A folder holding a stand-in `podman` program (tau-init only checks that the runtime's program is there)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "podman").write_text("#!/bin/sh\nexit 0\n")
    (folder / "podman").chmod(0o755)
    return folder


def path_env(folder):
    return {"PATH": f"{folder}:{os.environ['PATH']}"}


def test_a_reference_without_a_digest_is_refused_naming_the_digest_qualified_form_and_nothing_is_written(
        workspace, runtime_bin):
    run_dir = workspace / "run"
    proc = init(run_dir, with_image("localhost/x:latest"), env=path_env(runtime_bin))
    assert proc.returncode == 65
    err = error_of(proc)
    assert err["error"] == "bad_input"
    assert "image 'localhost/x:latest' is not pinned by digest, and tau never resolves a tag: name it as " \
           "localhost/x@sha256:<64 hex digits>" in err["message"]
    assert "podman image inspect --format '{{.Digest}}' localhost/x:latest" in err["message"]
    assert not run_dir.exists()


def test_a_pinned_reference_makes_a_run_whose_program_is_looked_up_in_the_image_not_on_the_host(
        workspace, runtime_bin):
    run_dir = workspace / "run"
    proc = init(run_dir, with_image(f"localhost/x:1@{DIGEST}"), env=path_env(runtime_bin))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["program"] == "python3"  # as given: no host lookup
    stored = json.loads((run_dir / "plan.json").read_text())["image"]
    assert stored == {"ref": f"localhost/x@{DIGEST}", "file": None, "digest": DIGEST, "runtime": "podman",
                      "runtime_command": ["podman"], "runtime_args": [], "mounts": [], "workdir": None}


def test_a_runtime_whose_program_is_missing_is_refused_66_naming_it(workspace):
    run_dir = workspace / "run"
    image = {"ref": f"localhost/x@{DIGEST}", "runtime_command": ["podman-not-installed-here"]}
    proc = init(run_dir, with_image(image))
    assert proc.returncode == 66
    err = error_of(proc)
    assert err["message"] == ("tau-init: client's runtime 'podman': program 'podman-not-installed-here' is not on "
                              "PATH; give its path, or run tau-init with it on PATH")
    assert err["details"] == {"program": "podman-not-installed-here", "runtime": "podman"}
    assert not run_dir.exists()


@pytest.mark.parametrize(("image", "message"), [
    ({"ref": f"localhost/x@{DIGEST}", "mounts": [{"host": "/data,x", "container": "/in"}]},
     "image.mounts[0].host '/data,x' holds ','"),
    ({"file": "/images/x.sif"}, "image.file '/images/x.sif' has no 'sha256'"),
    ({"ref": f"localhost/x@{DIGEST}", "runtime": "docker"}, "image.runtime 'docker' is not one of"),
    ({"ref": f"localhost/x@{DIGEST}", "runtime": "slurm-oci"}, "runtime slurm-oci runs an OCI bundle folder"),
])
def test_an_image_no_runtime_can_take_is_refused_65_before_anything_is_written(workspace, runtime_bin, image,
                                                                                message):
    run_dir = workspace / "run"
    proc = init(run_dir, with_image(image), env=path_env(runtime_bin))
    assert proc.returncode == 65, proc.stderr
    assert error_of(proc)["message"].startswith(f"tau-init: plan on standard input: {message}")
    assert not run_dir.exists()


def test_collection_in_the_client_image_needs_a_client_image(workspace):
    run_dir = workspace / "run"
    proc = init(run_dir, {**plan(records=8, shards=2), "collection": {"image": "client"}})
    assert proc.returncode == 65
    assert "collection.image 'client' runs the collection in the client's image, but the plan gives the client no " \
           "image" in error_of(proc)["message"]
    assert not run_dir.exists()


def test_check_image_hashes_an_image_file_and_refuses_one_that_is_not_the_pinned_one(workspace, runtime_bin,
                                                                                   tmp_path):
    image_file = tmp_path / "client.tar"
    image_file.write_bytes(b"an image's bytes")
    pinned = hashlib.sha256(b"an image's bytes").hexdigest()
    wrong = init(workspace / "wrong", with_image({"file": str(image_file), "sha256": "0" * 64, "runtime": "apptainer",
                                                  "runtime_command": [str(runtime_bin / "podman")]}),
                 "--check-image")
    assert wrong.returncode == 65
    assert error_of(wrong)["message"] == (
        f"tau-init: client's image: image changed: {image_file} has sha256:{pinned}, the run pins sha256:{'0' * 64}; "
        "a different image is a different run (tau-init NEW --from RUN with the new sha256)")
    assert not (workspace / "wrong").exists()
    missing = init(workspace / "missing", with_image({"file": str(tmp_path / "gone.tar"), "sha256": pinned,
                                                      "runtime": "apptainer",
                                                      "runtime_command": [str(runtime_bin / "podman")]}),
                   "--check-image")
    assert missing.returncode == 66
    assert error_of(missing)["message"] == f"tau-init: client's image: image file '{tmp_path}/gone.tar' does not exist"
    right = init(workspace / "right", with_image({"file": str(image_file), "sha256": pinned, "runtime": "apptainer",
                                                  "runtime_command": [str(runtime_bin / "podman")]}),
                 "--check-image")
    assert right.returncode == 0, right.stderr
