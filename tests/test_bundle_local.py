"""tau-bundle-seal and tau-bundle-verify on local trees: the acknowledgement, its immutability, the optional index,
refusals, the payload command, the current pointer, and verification that names what differs. Real processes,
real files; every failing case asserts the exit code and the message, and that nothing was sealed."""

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

def test_an_absent_optional_index_is_recorded_as_null_and_the_seal_succeeds(out):
    result = sealed(out, "g1", "--index", "checkpoints/artifacts.json")
    assert result["index"] is None
    assert manifest(out)["index"] is None


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
    assert report_of(proc)["problems"] == [f"{out}: generation 'g1' has no completion marker: the producer never "
                                           "acknowledged it"]
    proc = verify(out)
    assert proc.returncode == 1
    report = report_of(proc)
    assert report["generation"] is None
    assert report["problems"] == [f"{out} holds no acknowledged bundle generation (no completion marker under "
                                  ".tau/bundles/)"]


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
    assert report_of(verify(out, "--generation", "g1"))["extra"] == ["x"]


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
