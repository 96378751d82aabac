"""Helpers for tests on a real Azurite (contrib/azure/azurite-up.sh): its endpoint, the environment tau's bundle
commands need to reach it, containers, blobs, and bundle trees to seal.

The tests use Azurite on 127.0.0.1:TAU_TEST_AZURITE_PORT (default 10100, never the developer's 10000). `make check`
(tests/run-all.sh) starts it before the tests and stops it afterwards; when nothing answers on that port the
`azurite` fixture starts one for the session itself (same script) and stops it, by its PID file, at the end.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from helpers import ROOT

PORT = int(os.environ.get("TAU_TEST_AZURITE_PORT", "10100"))
ORIGIN = f"http://127.0.0.1:{PORT}"
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CONNECTION_STRING = (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
                     f"BlobEndpoint={ORIGIN}/{ACCOUNT};")
UP = str(ROOT / "contrib" / "azure" / "azurite-up.sh")
DOWN = str(ROOT / "contrib" / "azure" / "azurite-down.sh")


def answers(port: int = PORT) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def start(location: Path) -> None:
    proc = subprocess.run([UP], env={**os.environ, "AZURITE_PORT": str(PORT), "AZURITE_LOCATION": str(location)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and answers(), f"Azurite did not start on port {PORT}: {proc.stderr}"


def stop() -> None:
    subprocess.run([DOWN], env={**os.environ, "AZURITE_PORT": str(PORT)}, capture_output=True, timeout=60)


def origin(port: int = PORT) -> str:
    return f"http://127.0.0.1:{port}"


def connection_string(port: int = PORT) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={origin(port)}/{ACCOUNT};")


def env(port: int = PORT, **extra: str) -> dict:
    """The environment for tau's bundle commands against the test Azurite (or the Azurite on `port`)."""
    return {"TAU_TRUSTED_BLOB_ENDPOINTS": origin(port), "AZURE_STORAGE_CONNECTION_STRING": connection_string(port),
            "TAU_BLOB_RETRIES": "1", **extra}


def service(port: int = PORT):
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(connection_string(port))


def new_container(port: int = PORT) -> str:
    """A fresh container with a unique name; returns its name."""
    name = f"t{uuid.uuid4().hex[:20]}"
    service(port).create_container(name)
    return name


def url(container: str, prefix: str, port: int = PORT) -> str:
    return f"{origin(port)}/{ACCOUNT}/{container}/{prefix}"


def container_client(container: str, port: int = PORT):
    return service(port).get_container_client(container)


def blob_names(container: str, prefix: str) -> list[str]:
    blobs = container_client(container).list_blobs(name_starts_with=prefix + "/")
    return sorted(b.name[len(prefix) + 1:] for b in blobs)


def put(container: str, name: str, data: bytes) -> None:
    container_client(container).upload_blob(name, data, overwrite=True)


def get(container: str, name: str) -> bytes:
    return container_client(container).download_blob(name).readall()


def make_tree(root: Path, small: int = 200, big_mib: int = 0, seed: int = 7) -> dict[str, str]:
    """A bundle tree of `small` small files in a few folders, plus one file of big_mib MiB when asked (make it 1024
    for the 1 GiB case); returns {relative path: sha256}. Contents are deterministic for a seed."""
    digests = {}
    root.mkdir(parents=True, exist_ok=True)
    for i in range(small):
        rel = f"part-{i % 7}/file-{i:04d}.txt"
        data = (f"{seed}:{i}:" * (1 + i % 50)).encode()
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        digests[rel] = hashlib.sha256(data).hexdigest()
    if big_mib:
        rel = "model/weights.bin"
        (root / "model").mkdir(exist_ok=True)
        h = hashlib.sha256()
        block = hashlib.sha256(str(seed).encode()).digest() * (1 << 15)  # 1 MiB of a repeated pattern...
        with open(root / rel, "wb") as fh:
            for n in range(big_mib):
                chunk = n.to_bytes(8, "big") + block[8:]  # ...made different in every MiB
                fh.write(chunk)
                h.update(chunk)
        digests[rel] = h.hexdigest()
    return digests


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 8 MiB pieces (a 1 GiB file is never held in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(8 << 20):
            h.update(block)
    return h.hexdigest()


def tree_digests(root: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under root, .tau/ excluded."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.startswith(".tau/"):
            out[rel] = file_sha256(path)
    return out


def tree_listing(root: Path) -> list[tuple[str, str, int]]:
    """Every entry under root, .tau/ included, as (relative path, "dir" or "file", size of a file)."""
    return [(p.relative_to(root).as_posix(), "dir" if p.is_dir() else "file", 0 if p.is_dir() else p.stat().st_size)
            for p in sorted(root.rglob("*"))]


class Dedicated:
    """An Azurite of one test's own, on `port` with its data in `location` (same scripts as the session's), for a
    test that kills it: nothing else uses it. `pid` is the node process azurite-up.sh started (from its PID file);
    `stop()` (azurite-down.sh, by that PID file) is safe after a kill and waits until the port is free again.
    `knobs` are more of azurite-up.sh's variables (AZURITE_CERT, AZURITE_KEY, AZURITE_OAUTH: https and tokens)."""

    def __init__(self, port: int, location: Path, **knobs: str) -> None:
        self.port, self.location = port, location
        self.script_env = {**os.environ, "AZURITE_PORT": str(port), "AZURITE_LOCATION": str(location), **knobs}
        assert not answers(port), f"port {port} for a dedicated Azurite is already taken"
        proc = subprocess.run([UP], env=self.script_env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and answers(port), f"Azurite did not start on port {port}: {proc.stderr}"
        self.pid = int((ROOT / ".azurite" / f"azurite-{port}.pid").read_text())

    def alive(self) -> bool:
        try:
            with open(f"/proc/{self.pid}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    def stop(self) -> None:
        subprocess.run([DOWN], env=self.script_env, capture_output=True, timeout=60)


def session_fixture():
    """The body of the test modules' session fixture `azurite`: the Azurite make check started, or else one started
    (and stopped, by its PID file) for this session."""
    import shutil
    import tempfile

    location = None
    if not answers():
        location = Path(tempfile.mkdtemp(prefix="tau-azurite-"))
        start(location)
    try:
        yield
    finally:
        if location is not None:
            stop()
            shutil.rmtree(location, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def azurite_running():
    """Azurite for a test module that takes this fixture (`azurite_running = az.azurite_running`)."""
    yield from session_fixture()


@pytest.fixture(scope="module")
def box() -> str:
    """A fresh container for the module (`box = az.box`)."""
    return new_container()
