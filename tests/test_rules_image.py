"""taulib.rules.image: an OCI reference is read by the distribution grammar, must be pinned by sha256, and is handed
on by digest alone; a reference without one is refused with the form to use; an image file's sha256 is checked."""

from __future__ import annotations

import pytest

from taulib.rules.image import Reference, file_digest, parse

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
