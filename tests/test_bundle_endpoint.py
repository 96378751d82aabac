"""Which Blob URLs tau contacts: every refusal tau-bundle-fetch(1) "Trusted endpoints" lists, decided from the URL
alone, before any request.

The pure cases call taulib.bundle.endpoint directly. The command cases run tau-bundle-fetch, -verify and -seal as
real processes with every HTTP(S) request routed through a proxy that is a plain TCP listener owned by the test:
a refused URL must exit 77 without a single connection reaching it, while an accepted URL does reach it (so the
listener would have seen a request had one been made).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from helpers import Listener, error_of, tau
from taulib.bundle import endpoint
from taulib.errors import Refused, UsageError

AZURITE = {"TAU_TRUSTED_BLOB_ENDPOINTS": "http://127.0.0.1:10000"}

REFUSED = [
    ("https://evil.example#.blob.core.windows.net", "has a fragment"),
    ("https://evil.example#.blob.core.windows.net/box/p", "has a fragment"),
    ("https://acct.blob.core.windows.net/box/p#frag", "has a fragment"),
    ("https://user@acct.blob.core.windows.net", "carries user information"),
    ("https://user:secret@acct.blob.core.windows.net/box/p", "carries user information"),
    ("https://evil.example@acct.blob.core.windows.net/box/p", "carries user information"),
    ("http://acct.blob.core.windows.net", "does not use https"),
    ("http://acct.blob.core.windows.net/box/p", "does not use https"),
    ("ftp://acct.blob.core.windows.net/box/p", "does not use https"),
    ("https://acct.blob.core.windows.net.evil.example", "is not an Azure Blob storage endpoint"),
    ("https://acct.blob.core.windows.net.evil.example/box/p", "is not an Azure Blob storage endpoint"),
    ("https://evil.example/acct.blob.core.windows.net/box/p", "is not an Azure Blob storage endpoint"),
    ("https://evil.example\\.blob.core.windows.net/box/p", "is not an Azure Blob storage endpoint"),
    ("https://.blob.core.windows.net/box/p", "is not an Azure Blob storage endpoint"),
    ("https://ab.blob.core.windows.net/box/p", "is not an Azure Blob storage endpoint"),
    ("https://acct.blob.core.cloudapi.de/box/p", "is not an Azure Blob storage endpoint"),
    ("https://a.b.privatelink.blob.core.windows.net/box/p", "is not an Azure Blob storage endpoint"),
    ("https://acct.privatelink.evil.example/box/p", "is not an Azure Blob storage endpoint"),
    ("https://acct.privatelinkblob.core.windows.net/box/p", "is not an Azure Blob storage endpoint"),
    ("https://acct.blob.core.windows.net:443/box/p", "names a port"),
    ("https://acct.blob.core.windows.net/box/p?sv=2024-01-01&sig=abc", "has a query"),
    ("https://acct.blob.core.windows.net/box/p?", "has a query"),
    ("https://acct.blob.core.windows.net", "names no container"),
    ("https://acct.blob.core.windows.net/", "names no container"),
    ("https://acct.blob.core.windows.net/box", "has an empty or root prefix"),
    ("https://acct.blob.core.windows.net/box/", "has an empty or root prefix"),
    ("https://acct.blob.core.windows.net/box//", "has an empty or root prefix"),
    ("https://acct.blob.core.windows.net/C1/p", "which Azure would not accept"),
    ("https://acct.blob.core.windows.net/a/p", "which Azure would not accept"),
    ("https://acct.blob.core.windows.net/c1/p", "which Azure would not accept"),
    ("https://acct.blob.core.windows.net/a--b/p", "which Azure would not accept"),
    ("https://acct.blob.core.windows.net/-ab/p", "which Azure would not accept"),
    ("https://acct.blob.core.windows.net/box/a/../b", "prefix segment '..'"),
    ("https://acct.blob.core.windows.net/box/..", "prefix segment '..'"),
    ("https://acct.blob.core.windows.net/box/./p", "prefix segment '.'"),
    ("https://acct.blob.core.windows.net/box/a//b", "prefix segment ''"),
    ("https://acct.blob.core.windows.net/box/%2e%2e/p", "prefix segment '%2e%2e'"),
    ("https://acct.blob.core.windows.net/box/p q", "spaces or control characters"),
    ("https://acct.blob.core.windows.net/box/p\n", "spaces or control characters"),
    ("https://acct.blob.core.windows.ｎet/box/p", "non-ASCII characters"),
    # a trusted origin is trusted as exactly that origin, in path style, with an account
    ("http://127.0.0.1:10001/devstoreaccount1/box/p", "does not use https"),
    ("http://localhost:10000/devstoreaccount1/box/p", "does not use https"),
    ("https://127.0.0.1:10000/devstoreaccount1/box/p", "names a port"),
    ("http://127.0.0.1:10000/", "names no account"),
    ("http://127.0.0.1:10000/devstoreaccount1/box", "has an empty or root prefix"),
    ("http://127.0.0.1:10000/devstoreaccount1/box/", "has an empty or root prefix"),
    ("http://127.0.0.1:10000/Dev_Store/box/p", "which is not a storage account name"),
    ("http://127.0.0.1:10000/devstoreaccount1/box/a/../b", "prefix segment '..'"),
]


@pytest.mark.parametrize("url,why", REFUSED, ids=[u for u, _ in REFUSED])
def test_an_untrusted_or_ambiguous_url_is_refused_with_the_reason(url, why):
    with pytest.raises(Refused) as caught:
        endpoint.parse(url, AZURITE)
    assert caught.value.code == 77
    assert why in caught.value.message, caught.value.message
    assert caught.value.message.startswith("blob URL ")


ACCEPTED = [
    ("https://acct.blob.core.windows.net/box/run-1/out",
     ("https://acct.blob.core.windows.net", "acct", "box", "run-1/out")),
    ("https://acct.blob.core.usgovcloudapi.net/box/p",
     ("https://acct.blob.core.usgovcloudapi.net", "acct", "box", "p")),
    ("https://acct.blob.core.chinacloudapi.cn/box/p",
     ("https://acct.blob.core.chinacloudapi.cn", "acct", "box", "p")),
    # a private endpoint's name (the Blob CSI driver's documented `server` for one) is the same account
    ("https://acct.privatelink.blob.core.windows.net/box/p",
     ("https://acct.privatelink.blob.core.windows.net", "acct", "box", "p")),
    ("https://ACCT.Blob.Core.Windows.Net/box/p/",
     ("https://acct.blob.core.windows.net", "acct", "box", "p")),
    ("https://acct.blob.core.windows.net/my-container/a/b.c/d_e",
     ("https://acct.blob.core.windows.net", "acct", "my-container", "a/b.c/d_e")),
    ("http://127.0.0.1:10000/devstoreaccount1/bundles/run-1/out",
     ("http://127.0.0.1:10000/devstoreaccount1", "devstoreaccount1", "bundles", "run-1/out")),
]


@pytest.mark.parametrize("url,expected", ACCEPTED, ids=[u for u, _ in ACCEPTED])
def test_azure_clouds_and_a_trusted_azurite_origin_are_accepted(url, expected):
    location = endpoint.parse(url, AZURITE)
    assert tuple(location) == expected
    assert location.url() == f"{expected[0]}/{expected[2]}/{expected[3]}"


def test_a_trusted_endpoints_list_of_several_origins_trusts_each_of_them():
    env = {"TAU_TRUSTED_BLOB_ENDPOINTS": " http://127.0.0.1:10000/ , https://blob.example.test:8443"}
    assert endpoint.trusted_origins(env) == {"http://127.0.0.1:10000", "https://blob.example.test:8443"}
    assert endpoint.parse("https://blob.example.test:8443/acct1/box/p", env).account_url == \
        "https://blob.example.test:8443/acct1"


@pytest.mark.parametrize("value", ["http://127.0.0.1:10000/devstoreaccount1", "127.0.0.1:10000",
                                   "http://user@127.0.0.1:10000", "http://127.0.0.1:10000?x=1"])
def test_a_trusted_endpoint_that_is_not_an_origin_is_a_usage_error(value):
    with pytest.raises(UsageError) as caught:
        endpoint.parse("http://127.0.0.1:10000/devstoreaccount1/box/p", {"TAU_TRUSTED_BLOB_ENDPOINTS": value})
    assert caught.value.code == 2
    assert "is not an origin like http://127.0.0.1:10000" in caught.value.message


def test_nothing_is_trusted_without_the_environment_variable():
    with pytest.raises(Refused):
        endpoint.parse("http://127.0.0.1:10000/devstoreaccount1/bundles/run-1/out", {})


# -- no request is made for a refused URL -------------------------------------------------------------------------

@pytest.fixture
def listener():
    item = Listener()
    yield item
    item.close()


def proxied(listener: Listener, **extra: str) -> dict:
    proxy = f"http://127.0.0.1:{listener.port}"
    return {"HTTPS_PROXY": proxy, "HTTP_PROXY": proxy, "https_proxy": proxy, "http_proxy": proxy,
            "NO_PROXY": "", "no_proxy": "", "TAU_BLOB_RETRIES": "0",
            "TAU_TRUSTED_BLOB_ENDPOINTS": f"http://127.0.0.1:{listener.port}",
            "AZURE_STORAGE_CONNECTION_STRING": "AccountName=acct;AccountKey=a2V5;", **extra}


CLI_REFUSED = ["https://evil.example#.blob.core.windows.net", "https://user@acct.blob.core.windows.net",
               "http://acct.blob.core.windows.net", "https://acct.blob.core.windows.net.evil.example",
               "https://acct.blob.core.windows.net/box", "https://acct.blob.core.windows.net/box/p?sig=x",
               "https://acct.blob.core.windows.net/Bad_Container/p", "https://acct.blob.core.windows.net/box/a/../b"]


@pytest.mark.parametrize("url", CLI_REFUSED)
def test_tau_bundle_fetch_refuses_an_untrusted_url_fast_without_any_connection(url, listener, tmp_path):
    started = time.monotonic()
    proc = tau("tau-bundle-fetch", url, "--generation", "g1", "--destination", str(tmp_path / "dest"),
               env=proxied(listener))
    elapsed = time.monotonic() - started
    assert proc.returncode == 77, proc.stderr
    error = error_of(proc)
    assert error["error"] == "refused"
    assert error["message"].startswith(f"tau-bundle-fetch: blob URL {url!r}")
    assert proc.stdout == ""
    assert listener.connections == 0
    assert not (tmp_path / "dest").exists()
    assert elapsed < 5, f"a refusal must not wait for the network ({elapsed:.1f} s)"


def test_a_trusted_origin_with_a_root_prefix_is_refused_without_connecting_to_it(listener, tmp_path):
    url = f"http://127.0.0.1:{listener.port}/devstoreaccount1/bundles"
    proc = tau("tau-bundle-fetch", url, "--generation", "g1", "--destination", str(tmp_path / "dest"),
               env=proxied(listener))
    assert proc.returncode == 77
    assert "has an empty or root prefix; a bundle never spans a whole container" in error_of(proc)["message"]
    assert listener.connections == 0
    assert not (tmp_path / "dest").exists()


def test_an_accepted_url_does_reach_the_listener_so_the_refusals_above_prove_no_request(listener, tmp_path):
    proc = tau("tau-bundle-fetch", "https://acct.blob.core.windows.net/box/p", "--generation", "g1",
               "--destination", str(tmp_path / "dest"), env=proxied(listener))
    assert proc.returncode == 69, proc.stderr
    assert "Blob storage cannot be reached" in error_of(proc)["message"]
    assert listener.connections >= 1
    assert not (tmp_path / "dest").exists()


@pytest.mark.parametrize("url", CLI_REFUSED[:4])
def test_tau_bundle_verify_refuses_an_untrusted_url_without_any_connection(url, listener):
    proc = tau("tau-bundle-verify", url, "--generation", "g1", "--deep", env=proxied(listener))
    assert proc.returncode == 77
    assert error_of(proc)["message"].startswith(f"tau-bundle-verify: blob URL {url!r}")
    assert proc.stdout == ""
    assert listener.connections == 0


def test_tau_bundle_seal_refuses_an_untrusted_upload_before_running_the_payload(listener, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("a\n")
    ran = tmp_path / "payload-ran"
    proc = tau("tau-bundle-seal", str(out), "--generation", "g1", "--upload",
               "https://user@acct.blob.core.windows.net/box/p", "--", "touch", str(ran), env=proxied(listener))
    assert proc.returncode == 77
    assert "carries user information; credentials come from the environment only" in error_of(proc)["message"]
    assert not ran.exists()
    assert not (out / ".tau").exists()
    assert listener.connections == 0
