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


def env(**extra: str) -> dict:
    """The environment for tau's bundle commands against the test Azurite."""
    return {"TAU_TRUSTED_BLOB_ENDPOINTS": ORIGIN, "AZURE_STORAGE_CONNECTION_STRING": CONNECTION_STRING,
            "TAU_BLOB_RETRIES": "1", **extra}


def service():
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(CONNECTION_STRING)


def new_container() -> str:
    """A fresh container with a unique name; returns its name."""
    name = f"t{uuid.uuid4().hex[:20]}"
    service().create_container(name)
    return name


def url(container: str, prefix: str) -> str:
    return f"{ORIGIN}/{ACCOUNT}/{container}/{prefix}"


def container_client(container: str):
    return service().get_container_client(container)


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


def tree_digests(root: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under root, .tau/ excluded."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.startswith(".tau/"):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


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
