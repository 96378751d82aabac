"""The container runtimes' table and command lines: every runtime of the table has golden command lines
(tests/golden/runtimes/NAME.json), podman's are also run for real (tests/test_containers.py), and the checks every
runtime shares (an image file's sha256, an OCI bundle's tree, podman's answers) are tested here without a runtime.

Accept an intended change with: TAU_ACCEPT_GOLDEN=1 .venv/bin/python -m pytest tests/test_runtimes.py
"""

import hashlib
import json
import os
import pathlib

import pytest
from helpers import GOLDEN, check_golden

from taulib import runtimes
from taulib.errors import BadInput
from taulib.rules import image as image_rules
from taulib.runtimes import ImageChanged, ImageUnavailable, Launch, Mount
from taulib.runtimes.podman import _loaded
from taulib.runtimes.slurm_oci import tree_sha256

BUNDLE = str(pathlib.Path(__file__).parent / "fixtures" / "oci-bundle")
DIGEST = "sha256:" + "ab" * 32
REF = f"registry.example.org:5000/team/vllm-serve:0.6@{DIGEST}"


def image_of(runtime: str, **given) -> dict:
    spec = {"runtime": runtime, "mounts": [{"host": "/data/prompts", "container": "/in"},
                                           {"host": "/scratch/out", "container": "/out", "writable": True}],
            "workdir": "/work", **given}
    if "file" not in spec and "ref" not in spec:
        spec["ref"] = REF
    return image_rules.resolve(spec, runtimes.programs())


def launch_of(image: dict, target: str, scratch: str = "/run/t/shards/s/attempts/a/containers/x") -> Launch:
    return Launch(image, target, ["python3", "/work/client.py", "--rows", "10"],
                  {"TAU_SHARD_ID": "shard-00001", "HF_TOKEN": "secret-value", "CUDA_VISIBLE_DEVICES": "1,3"},
                  [Mount("/run/t", "/run/t", False), Mount("/run/t/shards/s/attempts/a", "/run/t/shards/s/attempts/a",
                                                           True),
                   *[Mount(m["host"], m["container"], m["writable"]) for m in image["mounts"]]],
                  ["1", "3"], "tau-t-shard-00001-attempt-0001-client", image["workdir"], scratch)


def cases(name: str) -> dict[str, dict]:
    """Each runtime's cases: a reference (where it takes one) and an image file (or slurm-oci's bundle)."""
    runtime = runtimes.get(name)
    out = {}
    if name == "slurm-oci":
        image = image_of(name, file=BUNDLE, sha256="cd" * 32, runtime_args=["--export=ALL"])
        out["bundle"] = launch_of(image, BUNDLE)
    else:
        ref = image_of(name, runtime_args=["--site-flag"], runtime_command=[runtimes.RUNTIMES[name].program,
                                                                            "--global-option"])
        out["reference"] = launch_of(ref, runtime.reference(ref))
        file = image_of(name, file="/images/client.img", sha256="cd" * 32)
        out["file"] = launch_of(file, "/images/client.img")
    return out


def rendered(name: str) -> str:
    runtime = runtimes.get(name)
    doc = {}
    for case, launch in cases(name).items():
        made = runtime.command(launch)
        files = {k: json.loads(v) for k, v in made.files.items()}
        doc[case] = {"argv": made.argv, "env": made.env, "files": files}
    return json.dumps(doc, indent=2, sort_keys=True).replace(BUNDLE, "BUNDLE") + "\n"


@pytest.mark.parametrize("name", list(runtimes.RUNTIMES))
def test_every_runtime_of_the_table_renders_its_golden_command_lines(name):
    check_golden(f"runtimes/{name}.json", rendered(name))


def test_every_runtime_of_the_table_has_a_golden_file_and_no_golden_file_is_left_over():
    files = {p.stem for p in (GOLDEN / "runtimes").glob("*.json")}
    assert files == set(runtimes.RUNTIMES)


@pytest.mark.parametrize("name", list(runtimes.RUNTIMES))
def test_no_value_of_the_environment_is_ever_on_a_runtimes_command_line(name):
    for launch in cases(name).values():
        made = runtimes.get(name).command(launch)
        assert not any("secret-value" in arg for arg in made.argv), made.argv
        assert "secret-value" in made.env.values()  # handed to the runtime's own process instead


def test_podman_runs_by_digest_with_the_mounts_read_only_unless_writable_and_the_names_of_the_variables():
    argv = runtimes.get("podman").command(cases("podman")["reference"]).argv
    assert argv[:4] == ["podman", "--global-option", "run", "--rm"]
    assert argv[argv.index("--site-flag") - 1] == "--http-proxy=false"  # site flags right after tau's own
    assert "type=bind,src=/data/prompts,dst=/in,ro=true" in argv and "type=bind,src=/scratch/out,dst=/out" in argv
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--env"] == sorted(
        ["TAU_SHARD_ID", "HF_TOKEN", "CUDA_VISIBLE_DEVICES"])
    target = argv.index(f"registry.example.org:5000/team/vllm-serve@{DIGEST}")  # the tag is never sent
    assert argv[target + 1:] == ["python3", "/work/client.py", "--rows", "10"]
    assert ["--device", "nvidia.com/gpu=1"] == argv[argv.index("--device"):argv.index("--device") + 2]
    made = runtimes.get("podman").command(cases("podman")["reference"])
    assert made.env["CUDA_VISIBLE_DEVICES"] == "0,1"  # only the two given are inside, numbered from 0


def test_pyxis_names_the_image_in_enroots_own_form_by_digest_and_every_variable_tau_sets():
    launch = cases("enroot")["reference"]
    argv = runtimes.get("enroot").command(launch).argv
    assert f"--container-image=registry.example.org:5000#team/vllm-serve:{DIGEST}" in argv
    assert "--container-env=CUDA_VISIBLE_DEVICES,HF_TOKEN,TAU_SHARD_ID" in argv
    assert "--container-mounts=/run/t:/run/t:ro,/run/t/shards/s/attempts/a:/run/t/shards/s/attempts/a," \
           "/data/prompts:/in:ro,/scratch/out:/out" in argv
    hub = image_rules.resolve(f"python:3.11@{DIGEST}", runtimes.programs())
    assert runtimes.get("enroot").reference(hub) == f"python:{DIGEST}"


def test_apptainer_hands_the_values_through_its_own_variables_and_singularity_through_its():
    for name, prefix in (("apptainer", "APPTAINERENV_"), ("singularity", "SINGULARITYENV_")):
        made = runtimes.get(name).command(cases(name)["reference"])
        assert made.env == {f"{prefix}TAU_SHARD_ID": "shard-00001", f"{prefix}HF_TOKEN": "secret-value",
                            f"{prefix}CUDA_VISIBLE_DEVICES": "1,3"}
        assert made.argv[1:6] == ["--global-option", "exec", "--containall", "--cleanenv", "--no-eval"]
        assert made.argv[made.argv.index("--site-flag") + 1] == "--nv"  # GPUs were given
        assert f"docker://registry.example.org:5000/team/vllm-serve@{DIGEST}" in made.argv


def test_slurm_oci_writes_a_config_whose_root_is_the_bundles_read_only_with_tau_s_mounts_and_folder():
    made = runtimes.get("slurm-oci").command(cases("slurm-oci")["bundle"])
    config = json.loads(made.files["config.json"])
    assert config["root"] == {"path": os.path.join(BUNDLE, "rootfs"), "readonly": True}
    assert config["process"]["cwd"] == "/work"
    assert {"destination": "/in", "type": "bind", "source": "/data/prompts",
            "options": ["rbind", "ro", "nosuid", "nodev"]} in config["mounts"]
    assert config["mounts"][0] == {"destination": "/proc", "type": "proc", "source": "proc"}  # the bundle's own kept
    assert made.argv[3] == "--container=/run/t/shards/s/attempts/a/containers/x"


def test_slurm_oci_refuses_a_reference_and_a_bundle_without_a_config(tmp_path):
    ref = image_of("slurm-oci")
    assert "runs an OCI bundle folder" in runtimes.get("slurm-oci").problem(ref)
    image = image_of("slurm-oci", file=str(tmp_path), sha256="cd" * 32)
    with pytest.raises(ImageUnavailable, match="has no readable config.json"):
        runtimes.get("slurm-oci").command(launch_of(image, str(tmp_path)))


def test_a_runtime_outside_the_table_is_refused_by_name():
    with pytest.raises(BadInput, match="runtime 'docker' is not one of podman, apptainer"):
        runtimes.get("docker")
    with pytest.raises(ValueError, match="image.runtime 'docker' is not one of"):
        image_rules.resolve({"ref": REF, "runtime": "docker"}, runtimes.programs())


def test_an_image_files_sha256_is_checked_and_a_rewritten_file_is_an_image_that_changed(tmp_path):
    path = tmp_path / "client.sif"
    path.write_bytes(b"image bytes")
    pinned = hashlib.sha256(b"image bytes").hexdigest()
    image = image_of("apptainer", file=str(path), sha256=pinned)
    checked = runtimes.get("apptainer").check(image, {})
    assert checked == (str(path), "sha256:" + pinned, "the sha256 of the file")
    path.write_bytes(b"other bytes")
    with pytest.raises(ImageChanged) as caught:
        runtimes.get("apptainer").check(image, {})
    assert caught.value.message.startswith(f"image changed: {path} has sha256:") and pinned in caught.value.message


def test_an_image_file_that_is_a_symlink_or_missing_is_unavailable_not_followed(tmp_path):
    real = tmp_path / "real.sif"
    real.write_bytes(b"x")
    (tmp_path / "link.sif").symlink_to(real)
    image = image_of("apptainer", file=str(tmp_path / "link.sif"), sha256=hashlib.sha256(b"x").hexdigest())
    with pytest.raises(ImageUnavailable, match="is a symlink; tau never follows one"):
        runtimes.get("apptainer").check(image, {})
    with pytest.raises(ImageUnavailable, match="does not exist"):
        runtimes.get("apptainer").check(dict(image, file=str(tmp_path / "gone.sif")), {})


def test_a_reference_is_trusted_to_the_runtimes_pull_by_digest_where_it_cannot_say_which_digest_it_holds():
    image = image_of("apptainer")
    assert runtimes.get("apptainer").check(image, {}) == (
        f"docker://registry.example.org:5000/team/vllm-serve@{DIGEST}", DIGEST, "apptainer's pull by digest")


def test_a_bundles_tree_digest_covers_every_path_mode_content_and_link_and_follows_none(tmp_path):
    root = tmp_path / "bundle"
    (root / "rootfs" / "bin").mkdir(parents=True)
    (root / "config.json").write_text("{}")
    (root / "rootfs" / "bin" / "tool").write_text("#!/bin/sh\n")
    (root / "rootfs" / "bin" / "alias").symlink_to("tool")
    first = tree_sha256(str(root))
    assert first == tree_sha256(str(root))
    changes = [lambda: (root / "rootfs" / "bin" / "tool").write_text("#!/bin/sh\nexit 1\n"),
               lambda: (root / "rootfs" / "bin" / "tool").chmod(0o755),
               lambda: ((root / "rootfs" / "bin" / "alias").unlink(), (root / "rootfs" / "bin" / "alias")
                        .symlink_to("/etc/passwd")),
               lambda: (root / "rootfs" / "new").mkdir()]
    seen = {first}
    for change in changes:
        change()
        now = tree_sha256(str(root))
        assert now not in seen
        seen.add(now)
    with pytest.raises(ImageUnavailable, match="is not a folder"):
        tree_sha256(str(root / "config.json"))


def test_podman_loads_say_which_image_they_loaded():
    assert _loaded("Loaded image: localhost/tau-test-client:latest\n") == "localhost/tau-test-client:latest"
    assert _loaded("Loaded image(s): sha256:abc,localhost/x:1") == "sha256:abc"
    assert _loaded("Getting image source signatures\nWriting manifest") is None


def test_the_lookup_finds_the_program_and_an_interpreters_script_inside_the_image():
    launch = cases("podman")["reference"]
    looking = runtimes.get("podman").lookup(launch)
    assert looking.argv == ["/bin/sh", "-c", runtimes.base.LOOKUP, "sh", "python3", "/work/client.py"]
    assert looking.env == {} and looking.name.endswith("-lookup")
    assert runtimes.get("enroot").lookup(launch) is None  # pyxis cannot look before it runs: its start says
    assert runtimes.get("podman").cleanup(launch) == ["podman", "--global-option", "rm", "--force", "--ignore",
                                                      "--time", "0", launch.name]


def tar_of(path, members: dict[str, bytes]) -> None:
    import io
    import tarfile

    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_an_archive_is_hashed_and_read_for_its_images_config_digest_in_one_pass(tmp_path):
    from taulib.runtimes import archive

    config = b'{"architecture": "amd64"}'
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = json.dumps({"config": {"digest": config_digest}, "layers": []}).encode()
    manifest_digest = hashlib.sha256(manifest).hexdigest()
    oci = tmp_path / "oci.tar"
    tar_of(oci, {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}',
                 f"blobs/sha256/{config_digest[7:]}": config, f"blobs/sha256/{manifest_digest}": manifest,
                 "index.json": json.dumps({"manifests": [{"digest": f"sha256:{manifest_digest}"}]}).encode()})
    assert archive.read(str(oci)) == ("sha256:" + hashlib.sha256(oci.read_bytes()).hexdigest(), config_digest)
    docker = tmp_path / "docker.tar"
    tar_of(docker, {f"{config_digest[7:]}.json": config,
                    "manifest.json": json.dumps([{"Config": f"{config_digest[7:]}.json", "Layers": []}]).encode()})
    assert archive.read(str(docker))[1] == config_digest
    newer = tmp_path / "newer.tar"
    tar_of(newer, {"manifest.json": json.dumps([{"Config": f"blobs/sha256/{config_digest[7:]}"}]).encode()})
    assert archive.read(str(newer))[1] == config_digest
    for name, data in (("squashfs.img", b"hsqs" + b"\0" * 5000), ("cut.tar", oci.read_bytes()[:700])):
        path = tmp_path / name
        path.write_bytes(data)
        assert archive.read(str(path)) == ("sha256:" + hashlib.sha256(data).hexdigest(), None)
    bad = tmp_path / "bad.tar"
    tar_of(bad, {"index.json": b'{"manifests": [{"digest": "sha256:../../etc"}]}'})
    assert archive.read(str(bad))[1] is None
    with pytest.raises(ImageUnavailable, match="does not exist"):
        archive.read(str(tmp_path / "gone.tar"))
