"""Bundles on Blob storage with an Azure identity instead of a key: a real Azurite in its OAuth mode, and a real
DefaultAzureCredential getting its token from an identity endpoint this module serves.

Azurite takes bearer tokens over https only (`azurite-blob --oauth basic` with `--cert/--key`), so the module makes
a self-signed certificate for 127.0.0.1 (the `cryptography` package, which azure-storage-blob already needs) and
starts an Azurite of its own on TAU_TEST_AZURITE_OAUTH_PORT (default 10102; contrib/azure/azurite-up.sh with
AZURITE_CERT, AZURITE_KEY and AZURITE_OAUTH=basic), stopped by its PID file at the end. The commands trust the
certificate through REQUESTS_CA_BUNDLE, the variable the requests transport of azure-core reads.

The identity is a managed identity of the App Service kind: IDENTITY_ENDPOINT (a loopback HTTP server in this
process) and IDENTITY_HEADER (its secret). The secret also says which token the endpoint issues: a good one, an
expired one (the endpoint says it is good for an hour), one for another audience, none, or one good for two minutes
and then none. The tokens are JWTs with the claims Azurite's basic check reads (an issuer under
https://sts.windows.net/, audience https://storage.azure.com, iat, nbf and exp; it checks no signature). The
commands run with an environment built from nothing, so that no identity of the machine's (a developer's `az login`,
an AZURE_CLIENT_ID) takes part. Every test greps what the commands wrote and printed for every token the endpoint
issued, and for the endpoint's secret.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import json
import os
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

import azurite as az
from helpers import BIN, error_of

pytestmark = pytest.mark.azurite

PORT = int(os.environ.get("TAU_TEST_AZURITE_OAUTH_PORT", str(az.PORT + 2)))
ORIGIN = f"https://127.0.0.1:{PORT}"
ACCOUNT_URL = f"{ORIGIN}/{az.ACCOUNT}"
TENANT = "72f988bf-0000-4000-8000-000000000001"
SECRETS = {kind: f"{kind}-{uuid.uuid4().hex}" for kind in ("good", "expired", "audience", "none", "once")}
DENIED = ("access denied (403): Blob storage refused the Azure identity's token (expired, for another tenant or "
          "audience, or the identity has no Storage Blob Data role on the container: Reader to fetch, Contributor "
          "to upload); grant the role, or set AZURE_STORAGE_CONNECTION_STRING")
NO_IDENTITY = (f"no Azure identity gave a token for {ACCOUNT_URL} (tried a service principal in the environment, "
               "workload identity, managed identity and the Azure CLI); set AZURE_STORAGE_CONNECTION_STRING, or "
               "provide an Azure identity: AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_FEDERATED_TOKEN_FILE "
               "(workload identity), a managed identity, or `az login`")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(audience: str, lifetime: int) -> str:
    """A token shaped like Entra ID's for Blob storage (`lifetime` seconds from now; negative: already expired)."""
    now = int(time.time())
    claims = {"aud": audience, "iss": f"https://sts.windows.net/{TENANT}/", "iat": now - 120,
              "nbf": now - 120, "exp": now + lifetime, "tid": TENANT, "oid": str(uuid.uuid4()),
              "sub": str(uuid.uuid4()), "appid": str(uuid.uuid4()), "jti": uuid.uuid4().hex, "ver": "1.0"}
    header = {"alg": "RS256", "typ": "JWT", "kid": "tau-test"}
    return ".".join((_b64(json.dumps(header).encode()), _b64(json.dumps(claims).encode()), _b64(os.urandom(64))))


class IdentityEndpoint:
    """The App Service managed identity protocol (GET IDENTITY_ENDPOINT?api-version=2019-08-01&resource=R with the
    header X-IDENTITY-HEADER), on 127.0.0.1, in a thread of this process. `issued` is every token handed out."""

    def __init__(self) -> None:
        self.issued: list[str] = []
        self.requests: list[str] = []  # the kind of each request, in order
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                kind = next((k for k, s in SECRETS.items() if s == self.headers.get("X-IDENTITY-HEADER")), None)
                resource = parse_qs(urlsplit(self.path).query).get("resource", [""])[0]
                endpoint.requests.append(kind or "unknown")
                if kind is None:
                    return self.answer(401, {"error": "unauthorized", "message": "bad X-IDENTITY-HEADER"})
                if kind == "none" or (kind == "once" and endpoint.requests.count("once") > 1):
                    return self.answer(400, {"statusCode": 400, "message": "No managed identity is assigned"})
                lifetime = 120 if kind == "once" else 3600
                token = jwt("https://vault.azure.net" if kind == "audience" else resource,
                            -600 if kind == "expired" else lifetime)
                endpoint.issued.append(token)
                self.answer(200, {"access_token": token, "expires_on": str(int(time.time()) + lifetime),
                                  "resource": resource, "token_type": "Bearer"})

            def answer(self, status: int, doc: dict) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/msi/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for IP 127.0.0.1 that is its own CA (so REQUESTS_CA_BUNDLE can trust it), and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tau test Azurite")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture(scope="module")
def oauth(tmp_path_factory) -> dict:
    """The https, OAuth-mode Azurite of this module (started and stopped here) and the identity endpoint."""
    folder = tmp_path_factory.mktemp("oauth")
    cert, key = self_signed(folder)
    server = az.Dedicated(PORT, folder / "data", AZURITE_CERT=str(cert), AZURITE_KEY=str(key), AZURITE_OAUTH="basic")
    endpoint = IdentityEndpoint()
    try:
        home = folder / "home"
        home.mkdir()
        yield {"cert": cert, "endpoint": endpoint, "home": home}
    finally:
        endpoint.stop()
        server.stop()


def storage(oauth: dict):
    """The test's own client of the OAuth Azurite, with the account key (to set up and to look)."""
    from azure.storage.blob import BlobServiceClient

    connection = (f"DefaultEndpointsProtocol=https;AccountName={az.ACCOUNT};AccountKey={az.KEY};"
                  f"BlobEndpoint={ACCOUNT_URL};")
    return BlobServiceClient.from_connection_string(connection, connection_verify=str(oauth["cert"]))


@pytest.fixture
def box(oauth) -> str:
    name = f"t{uuid.uuid4().hex[:20]}"
    storage(oauth).create_container(name)  # private: nothing is read or written without credentials
    return name


def identity_env(oauth: dict, kind: str | None = "good", **extra: str) -> dict:
    """An environment from nothing: tau's variables, the CA bundle, and (unless kind is None) the managed identity.
    PATH holds the venv only, so no Azure CLI of the machine's is found; HOME is a folder of this module's."""
    environ = {"PATH": str(BIN), "HOME": str(oauth["home"]), "LANG": "C.UTF-8", "NO_PROXY": "127.0.0.1",
               "TAU_TRUSTED_BLOB_ENDPOINTS": ORIGIN, "TAU_BLOB_RETRIES": "1", "TAU_LOCK_TIMEOUT": "10",
               "REQUESTS_CA_BUNDLE": str(oauth["cert"])}
    if kind is not None:
        environ.update(IDENTITY_ENDPOINT=oauth["endpoint"].url, IDENTITY_HEADER=SECRETS[kind])
    environ.update(extra)
    return environ


def run(command: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / command), *args], capture_output=True, text=True, env=env, timeout=120,
                          stdin=subprocess.DEVNULL)


def url(container: str, prefix: str) -> str:
    return f"{ACCOUNT_URL}/{container}/{prefix}"


def blob_names(oauth: dict, container: str) -> list[str]:
    return sorted(b.name for b in storage(oauth).get_container_client(container).list_blobs())


def assert_no_secret(oauth: dict, roots: list[Path], procs: list[subprocess.CompletedProcess]) -> None:
    """No token the endpoint issued, nor the endpoint's secret, is in any file under `roots` or in any output."""
    secrets = [*oauth["endpoint"].issued, *SECRETS.values()]
    secrets += [t.rsplit(".", 1)[1] for t in oauth["endpoint"].issued]  # the signature alone, too
    texts = [(f"{p.args[0]} stdout", p.stdout) for p in procs] + [(f"{p.args[0]} stderr", p.stderr) for p in procs]
    for root in roots:
        for path in [root, *root.rglob("*")] if root.exists() else []:
            if path.is_file():
                texts.append((str(path), path.read_bytes().decode("latin-1")))
    leaks = [(where, s[:12]) for where, text in texts for s in secrets if s in text]
    assert not leaks, f"a credential appears in {leaks}"


def seal(oauth: dict, root: Path, target: str, kind: str | None = "good", *args: str, **extra: str):
    return run("tau-bundle-seal", str(root), "--generation", "g1", "--upload", target, *args,
               env=identity_env(oauth, kind, **extra))


def fetch(oauth: dict, target: str, dest: Path, kind: str | None = "good"):
    return run("tau-bundle-fetch", target, "--generation", "g1", "--destination", str(dest),
               env=identity_env(oauth, kind))


def fresh_parent(tmp_path: Path) -> Path:
    parent = tmp_path / "fetched"
    parent.mkdir(mode=0o700)
    return parent


# -- with a token Blob storage accepts ------------------------------------------------------------------------------

def test_seal_uploads_and_fetch_downloads_byte_for_byte_with_a_managed_identity_token(oauth, box, tmp_path):
    from helpers import complete_run

    endpoint = oauth["endpoint"]
    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    run_dir = complete_run(ws, records=20, shards=2)
    root = tmp_path / "shard-out"
    digests = az.make_tree(root, small=20, big_mib=10)  # 10 MiB: ranged download and block upload on threads
    odd = os.urandom((33 << 20) + 12345)  # three ranges over TLS, the last a short one read to its last byte
    (root / "model" / "odd.bin").write_bytes(odd)
    digests["model/odd.bin"] = hashlib.sha256(odd).hexdigest()
    asked = len(endpoint.requests)
    sealed = seal(oauth, root, url(box, "runs/r1/s1"), "good", "--run", run_dir.name, "--record", str(run_dir),
                  TAU_RUN_DIR=str(run_dir), TAU_RUN_ID=run_dir.name, TAU_SHARD_ID="shard-00001",
                  TAU_ATTEMPT_ID="attempt-0001")
    assert sealed.returncode == 0, sealed.stderr
    assert sealed.stderr == ""
    uploaded = json.loads(sealed.stdout)["uploaded"]
    assert (uploaded["url"], uploaded["files"]) == (url(box, "runs/r1/s1"), 22)
    assert endpoint.requests[asked:] == ["good"], "one token for the whole upload"
    names = [n for n in blob_names(oauth, box) if "/.tau/" not in n]
    assert names == sorted(f"runs/r1/s1/{p}" for p in digests)

    parent = fresh_parent(tmp_path)
    fetched = run("tau-bundle-fetch", "--run", str(run_dir), "--shard", "shard-00001", "--destination",
                  str(parent / "got"), env=identity_env(oauth))
    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stderr == ""
    result = json.loads(fetched.stdout)
    assert (result["generation"], result["source"], result["files"]) == ("g1", url(box, "runs/r1/s1"), 22)
    assert az.tree_digests(parent / "got") == digests
    assert (parent / "got" / ".tau" / "bundles" / "g1.json").read_bytes() == \
        (root / ".tau" / "bundles" / "g1.json").read_bytes()
    verify = run("tau-bundle-verify", url(box, "runs/r1/s1"), "--deep", env=identity_env(oauth))
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["complete"] is True
    assert endpoint.requests[asked:] == ["good"] * 3 and len(endpoint.issued) >= 3
    assert_no_secret(oauth, [root, parent, run_dir, oauth["home"]], [sealed, fetched, verify])


# -- refused: no identity, a token the storage does not accept, an endpoint that gives none -------------------------

def test_without_any_identity_a_private_container_is_refused_saying_what_to_set(oauth, box, tmp_path):
    parent = fresh_parent(tmp_path)
    root = tmp_path / "src"
    az.make_tree(root, small=3)
    started = time.monotonic()
    sealed = seal(oauth, root, url(box, "none/p"), None)
    fetched = fetch(oauth, url(box, "none/p"), parent / "model", None)
    assert time.monotonic() - started < 30, "no retries and no waiting: the missing identity is known at once"
    assert sealed.returncode == 77, sealed.stderr
    assert error_of(sealed) == {"error": "refused", "code": 77, "command": "tau-bundle-seal",
                                "message": f"tau-bundle-seal: {NO_IDENTITY}"}
    assert fetched.returncode == 77, fetched.stderr
    assert error_of(fetched)["message"] == f"tau-bundle-fetch: {NO_IDENTITY}"
    assert blob_names(oauth, box) == [] and os.listdir(parent) == []
    assert_no_secret(oauth, [root, parent], [sealed, fetched])


def test_an_identity_endpoint_that_gives_no_token_is_refused_saying_what_to_set(oauth, box, tmp_path):
    parent = fresh_parent(tmp_path)
    asked = len(oauth["endpoint"].requests)
    fetched = fetch(oauth, url(box, "none/p"), parent / "model", "none")
    assert fetched.returncode == 77, fetched.stderr
    assert error_of(fetched)["message"] == f"tau-bundle-fetch: {NO_IDENTITY}"
    assert "No managed identity is assigned" not in fetched.stderr, "the endpoint's own words are not passed on"
    assert oauth["endpoint"].requests[asked:] == ["none"]
    assert os.listdir(parent) == []
    assert_no_secret(oauth, [parent], [fetched])


def test_an_identity_that_cannot_renew_its_token_is_refused_saying_what_to_set(oauth, box, tmp_path):
    """A token that expires within five minutes is renewed before a request; when the endpoint then gives none,
    the command stops with one error (no traceback, no partial destination)."""
    parent = fresh_parent(tmp_path)
    asked = len(oauth["endpoint"].requests)
    fetched = fetch(oauth, url(box, "once/p"), parent / "model", "once")
    assert fetched.returncode == 77, fetched.stderr
    assert error_of(fetched)["message"] == (
        "tau-bundle-fetch: reading once/p/.tau/bundles/g1.json: the Azure identity gave no new token; set "
        "AZURE_STORAGE_CONNECTION_STRING, or provide an Azure identity: AZURE_CLIENT_ID, AZURE_TENANT_ID and "
        "AZURE_FEDERATED_TOKEN_FILE (workload identity), a managed identity, or `az login`")
    assert oauth["endpoint"].requests[asked] == "once" and len(oauth["endpoint"].requests) - asked >= 2
    assert os.listdir(parent) == []
    assert_no_secret(oauth, [parent], [fetched])


def test_an_identity_configuration_azure_identity_refuses_is_a_usage_error_naming_it(oauth, box, tmp_path):
    parent = fresh_parent(tmp_path)
    environ = identity_env(oauth, "good", AZURE_TOKEN_CREDENTIALS="browser-please")
    proc = run("tau-bundle-fetch", url(box, "p"), "--generation", "g1", "--destination", str(parent / "d"),
               env=environ)
    assert proc.returncode == 2, proc.stderr
    message = error_of(proc)["message"]
    assert message.startswith("tau-bundle-fetch: Azure identity cannot be set up: Invalid value for "
                              "AZURE_TOKEN_CREDENTIALS: browser-please.")
    assert message.endswith("; tau uses its environment, workload identity, managed identity and Azure CLI sources")
    assert os.listdir(parent) == []
    assert_no_secret(oauth, [parent], [proc])


@pytest.fixture
def sealed_with_key(oauth, box, tmp_path) -> dict:
    """A bundle uploaded with the account key (the test's own client), to be read with tokens."""
    root = tmp_path / "keyed"
    digests = az.make_tree(root, small=3)
    environ = identity_env(oauth, None, AZURE_STORAGE_CONNECTION_STRING=(
        f"DefaultEndpointsProtocol=https;AccountName={az.ACCOUNT};AccountKey={az.KEY};BlobEndpoint={ACCOUNT_URL};"))
    proc = run("tau-bundle-seal", str(root), "--generation", "g1", "--upload", url(box, "keyed/p"), env=environ)
    assert proc.returncode == 0, proc.stderr
    return {"root": root, "digests": digests, "url": url(box, "keyed/p")}


@pytest.mark.parametrize("kind", ["expired", "audience"])
def test_a_token_blob_storage_does_not_accept_is_refused_for_fetch_and_upload(oauth, box, sealed_with_key, tmp_path,
                                                                              kind):
    parent = fresh_parent(tmp_path)
    fetched = fetch(oauth, sealed_with_key["url"], parent / "model", kind)
    assert fetched.returncode == 77, fetched.stderr
    assert error_of(fetched)["message"] == f"tau-bundle-fetch: reading keyed/p/.tau/bundles/g1.json: {DENIED}"
    assert os.listdir(parent) == []
    before = blob_names(oauth, box)
    other = tmp_path / "other"
    az.make_tree(other, small=2, seed=3)
    sealed = seal(oauth, other, url(box, "refused/p"), kind)
    assert sealed.returncode == 77, sealed.stderr
    message = error_of(sealed)["message"]  # the first request of an upload is a read or a listing of the prefix
    assert message.startswith(("tau-bundle-seal: reading refused/p/", "tau-bundle-seal: listing refused/p/"))
    assert message.endswith(f": {DENIED}")
    assert blob_names(oauth, box) == before
    assert_no_secret(oauth, [parent, other], [fetched, sealed])


@pytest.fixture
def plain_azurite():
    """The session's Azurite on plain http (make check's, or one started here and stopped again)."""
    yield from az.session_fixture()


def test_a_token_is_never_sent_over_plain_http(oauth, plain_azurite, tmp_path):
    """On the http Azurite tau asks no identity for a token (azure-core would refuse to send one): anonymous."""
    box = az.new_container()
    prefix = f"plain/{uuid.uuid4().hex[:8]}"
    az.put(box, f"{prefix}/.tau/current", b"g1\n")
    asked = len(oauth["endpoint"].requests)
    parent = fresh_parent(tmp_path)
    environ = identity_env(oauth, "good", TAU_TRUSTED_BLOB_ENDPOINTS=az.ORIGIN)
    proc = run("tau-bundle-fetch", az.url(box, prefix), "--current", "--destination", str(parent / "d"), env=environ)
    assert proc.returncode == 77, proc.stderr
    assert error_of(proc)["message"] == (f"tau-bundle-fetch: reading {prefix}/.tau/current: access denied (403) to a "
                                         "request without credentials; set AZURE_STORAGE_CONNECTION_STRING (an "
                                         "Azure identity's token is never sent over plain http)")
    assert oauth["endpoint"].requests[asked:] == []
    assert os.listdir(parent) == []
