"""taulib.rules.image: an OCI reference is read by the distribution grammar, must be pinned by sha256, and is handed
on by digest alone; a reference without one is refused with the form to use; an image file's sha256 is checked."""

from __future__ import annotations

import pytest

from taulib.rules.image import Reference, file_digest, parse, path_problem, resolve, writable_mount

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize("text, registry, path, tag", [
    (f"localhost/x@{DIGEST}", "localhost", "x", None),
    (f"localhost/tau-client:1.0@{DIGEST}", "localhost", "tau-client", "1.0"),
    (f"nvcr.io/nvidia/pytorch:24.01-py3@{DIGEST}", "nvcr.io", "nvidia/pytorch", "24.01-py3"),
    (f"registry.example.com:5000/team/vllm@{DIGEST}", "registry.example.com:5000", "team/vllm", None),
    (f"host:5000/a@{DIGEST}", "host:5000", "a", None),
    (f"[::1]:5000/a@{DIGEST}", "[::1]:5000", "a", None),
    (f"Registry/a@{DIGEST}", "Registry", "a", None),  # not a path: a path component is lowercase
    (f"library/ubuntu:24.04@{DIGEST}", None, "library/ubuntu", "24.04"),
    (f"ubuntu@{DIGEST}", None, "ubuntu", None),
    (f"a.b__c-d---e/f_g@{DIGEST}", None, "a.b__c-d---e/f_g", None),  # "_" is in no host name: a path
    (f"a.b-c/f_g@{DIGEST}", "a.b-c", "f_g", None),
    (f"team__x/y.z-w@{DIGEST}", None, "team__x/y.z-w", None),
])
def test_a_reference_pinned_by_digest_is_read_into_its_parts_and_handed_on_by_digest_alone(text, registry, path, tag):
    ref = parse(text)
    assert ref == Reference(registry, path, tag, DIGEST)
    assert ref.name == (path if registry is None else f"{registry}/{path}")
    assert ref.pinned() == f"{ref.name}@{DIGEST}"
    assert tag is None or f":{tag}" not in ref.pinned()


def test_a_reference_without_a_digest_is_refused_with_the_digest_qualified_form_to_use():
    with pytest.raises(ValueError) as err:
        parse("localhost/x:latest")
    assert str(err.value) == (
        "image 'localhost/x:latest' is not pinned by digest, and tau never resolves a tag: name it as "
        "localhost/x@sha256:<64 hex digits>, the digest your runtime gives for it (podman image inspect --format "
        "'{{.Digest}}' localhost/x:latest)")
    with pytest.raises(ValueError, match=r"name it as ubuntu@sha256:<64 hex digits>"):
        parse("ubuntu")


@pytest.mark.parametrize("digest", ["sha512:" + "0" * 128, "sha256:" + "0" * 63, "sha256:" + "A" * 64,
                                    "sha256:" + "0" * 65])
def test_a_digest_other_than_sha256_with_64_lowercase_hex_digits_is_refused(digest):
    with pytest.raises(ValueError) as err:
        parse(f"localhost/x@{digest}")
    assert str(err.value) == (f"image 'localhost/x@{digest}': its digest must be sha256: and 64 lowercase hex "
                              f"digits, not {digest!r}")


@pytest.mark.parametrize("text", ["", "Localhost", "x y", "x@sha256", "/x", "x/", "x//y", "x:-tag", f"x:{'t' * 129}",
                                  "x_/y", "-x", "x@" + DIGEST + "@" + DIGEST, "a/" + "b" * 254 + "@" + DIGEST,
                                  "UPPER", "x:tag:tag2", "x\n@" + DIGEST, "x@sha256:" + "\u0661" * 64])
def test_what_is_no_reference_is_refused_as_such(text):
    with pytest.raises(ValueError) as err:
        parse(text)
    assert str(err.value) == f"{text!r} is not an OCI image reference (registry/name[:tag]@sha256:<64 hex digits>)"


def test_the_longest_name_the_grammar_allows_is_read():
    name = "a/" + "b" * 253
    assert parse(f"{name}@{DIGEST}").path == name


def test_an_image_files_sha256_is_64_lowercase_hex_digits():
    assert file_digest("ab" * 32) == "ab" * 32
    for bad in ("AB" * 32, "ab" * 31, "ab" * 33, "sha256:" + "ab" * 32, ""):
        with pytest.raises(ValueError) as err:
            file_digest(bad)
        assert str(err.value) == f"an image file's sha256 is 64 lowercase hex digits, not {bad!r}"


PROGRAMS = {"podman": "podman", "apptainer": "apptainer", "enroot": "srun"}
REF = f"localhost/client:1.0@{DIGEST}"


def test_a_reference_alone_is_an_image_run_by_podman_by_digest_with_nothing_else():
    assert resolve(REF, PROGRAMS) == {
        "ref": f"localhost/client@{DIGEST}", "file": None, "digest": DIGEST, "runtime": "podman",
        "runtime_command": ["podman"], "runtime_args": [], "mounts": [], "workdir": None}


def test_an_image_file_is_pinned_by_its_sha256_and_its_runtime_gives_the_default_command():
    got = resolve({"file": "/images/c.sif", "sha256": "cd" * 32, "runtime": "apptainer", "workdir": "/w",
                   "mounts": [{"host": "/data", "container": "/in"}, {"host": "/out", "container": "/o",
                                                                       "writable": True}]}, PROGRAMS)
    assert got == {"ref": None, "file": "/images/c.sif", "digest": "sha256:" + "cd" * 32, "runtime": "apptainer",
                   "runtime_command": ["apptainer"], "runtime_args": [], "workdir": "/w",
                   "mounts": [{"host": "/data", "container": "/in", "writable": False},
                              {"host": "/out", "container": "/o", "writable": True}]}


def test_a_services_image_takes_the_clients_runtime_command_flags_and_mounts_unless_it_names_its_own_runtime():
    client = resolve({"ref": REF, "runtime_command": ["podman", "--runtime", "runc"], "runtime_args": ["--x"],
                      "mounts": [{"host": "/m", "container": "/m"}]}, PROGRAMS)
    service = resolve(f"localhost/serve@{DIGEST}", PROGRAMS, client, "services[0].image")
    assert (service["runtime_command"], service["runtime_args"], service["mounts"]) == (
        ["podman", "--runtime", "runc"], ["--x"], [{"host": "/m", "container": "/m", "writable": False}])
    own = resolve({"ref": f"localhost/serve@{DIGEST}", "runtime": "enroot"}, PROGRAMS, client)
    assert (own["runtime_command"], own["runtime_args"], own["mounts"]) == (["srun"], [], [])
    mounts = resolve({"ref": REF, "mounts": []}, PROGRAMS, client)
    assert mounts["mounts"] == [] and mounts["runtime_args"] == ["--x"]
    apptainer = resolve({"file": "/c.sif", "sha256": "cd" * 32, "runtime": "apptainer"}, PROGRAMS)
    assert resolve(f"localhost/serve@{DIGEST}", PROGRAMS, apptainer)["runtime"] == "apptainer"


@pytest.mark.parametrize(("spec", "message"), [
    ({"ref": REF, "runtime": "docker"}, "image.runtime 'docker' is not one of apptainer, enroot, podman"),
    ({"runtime": "podman"}, "image names neither or both of 'ref' and 'file'; give one: a reference pinned by digest, "
                            "or an image file with its sha256"),
    ({"ref": REF, "file": "/x"}, "image names neither or both of 'ref' and 'file'; give one: a reference pinned by "
                                 "digest, or an image file with its sha256"),
    ({"ref": REF, "sha256": "cd" * 32}, "image gives 'sha256' beside 'ref'; a reference is pinned by its own @sha256: "
                                        "digest"),
    ({"file": "/x.sif"}, "image.file '/x.sif' has no 'sha256': an image file is pinned by the sha256 of its bytes "
                         "(sha256sum FILE)"),
    ({"file": "x.sif", "sha256": "cd" * 32}, "image.file 'x.sif' is not an absolute path"),
    ({"file": "/x.sif", "sha256": "CD" * 32}, f"an image file's sha256 is 64 lowercase hex digits, not {'CD' * 32!r}"),
    ({"ref": "localhost/x:latest"}, "image 'localhost/x:latest' is not pinned by digest, and tau never resolves a "
                                    "tag: name it as localhost/x@sha256:<64 hex digits>, the digest your runtime "
                                    "gives for it (podman image inspect --format '{{.Digest}}' localhost/x:latest)"),
    ({"ref": REF, "mounts": [{"host": "/a b", "container": "/a"}]},
     "image.mounts[0].host '/a b' holds ' ', which some runtime reads as a separator: give a path without whitespace "
     "or any of : , \" ' \\ $ ` + #"),
    ({"ref": REF, "mounts": [{"host": "/a", "container": "/a:b"}]},
     "image.mounts[0].container '/a:b' holds ':', which some runtime reads as a separator: give a path without "
     "whitespace or any of : , \" ' \\ $ ` + #"),
    ({"ref": REF, "mounts": [{"host": "/a", "container": "/c"}, {"host": "/b", "container": "/c"}]},
     "image.mounts[1] mounts onto '/c' a second time"),
    ({"ref": REF, "workdir": "/w/../x"}, "image.workdir '/w/../x' is not a normal path (no '.', '..', doubled or "
                                         "trailing '/')"),
])
def test_an_image_that_cannot_be_one_is_refused_saying_why(spec, message):
    with pytest.raises(ValueError) as err:
        resolve(spec, PROGRAMS)
    assert str(err.value) == message


@pytest.mark.parametrize(("path", "problem"), [
    ("/", None), ("/data/x", None), ("/a-b_c.d/e", None),
    ("rel", "is not an absolute path"), ("/a/", "is not a normal path"), ("/a//b", "is not a normal path"),
    ("/a/./b", "is not a normal path"), ("/a/..", "is not a normal path"),
    *[(f"/a{c}b", "which some runtime reads as a separator") for c in ":,\"'\\$`+# \t\n\x01\x7f"],
])
def test_a_path_handed_to_a_runtime_is_absolute_normal_and_free_of_every_runtimes_separators(path, problem):
    found = path_problem(path, "mount")
    assert (found is None) if problem is None else (found is not None and problem in found
                                                    and found.startswith(f"mount {path!r}"))


def test_a_host_path_is_found_below_its_deepest_mount_with_its_container_side():
    mounts = [{"host": "/data", "container": "/in", "writable": False},
              {"host": "/data/out", "container": "/out", "writable": True},
              {"host": "/", "container": "/host", "writable": False}]
    assert writable_mount("/data/out/run-1", mounts) == (mounts[1], "/out/run-1")
    assert writable_mount("/data/out", mounts) == (mounts[1], "/out")
    assert writable_mount("/data/outer", mounts) == (mounts[0], "/in/outer")
    assert writable_mount("/srv/x", mounts) == (mounts[2], "/host/srv/x")
    assert writable_mount("/srv/x", mounts[:2]) == (None, None)
    assert writable_mount("/data/Xfile", mounts) == (mounts[0], "/in/Xfile")  # only its '/' is cut off the rest
    assert writable_mount("/tmp/bo/x", [{"host": "/tmp/boX", "container": "/b", "writable": True}]) == (None, None)
    root = {"host": "/srv", "container": "/", "writable": True}
    assert writable_mount("/srv/a", [root]) == (root, "/a")
    under = {"host": "/srv", "container": "/mnt/X", "writable": True}
    assert writable_mount("/srv/a", [under]) == (under, "/mnt/X/a")
    twice = [{"host": "/o", "container": "/r", "writable": False}, {"host": "/o", "container": "/w", "writable": True}]
    assert writable_mount("/o/d", twice) == (twice[1], "/w/d") == writable_mount("/o/d", twice[::-1])
    alike = [{"host": "/o", "container": "/w1", "writable": True}, {"host": "/o", "container": "/w2", "writable": True}]
    assert writable_mount("/o/d", alike) == (alike[0], "/w1/d")  # of two alike, the first the plan lists
