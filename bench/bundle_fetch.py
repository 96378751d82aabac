"""Bundle fetch benchmark: tau-bundle-fetch against a plain azure-storage-blob download loop, on one Azurite.

Starts its own Azurite (contrib/azure/azurite-up.sh on BENCH_AZURITE_PORT, default 10300, data in a temporary
folder; stopped by its PID file at the end), seals and uploads one bundle of 200 small files and one file of
BENCH_BIG_MIB MiB (default 1024), then times, alternating BENCH_ROUNDS times (default 3), each into a fresh folder
that is removed afterwards:
  plain  a Python process that lists the prefix and, for each blob,
         `download_blob(max_concurrency=8).readinto(open(file, "wb"))`: no hashing, no fsync, no staging
  tau    `tau-bundle-fetch URL --destination DIR --generation g1`: etag-pinned ranged downloads, sha256 of every
         byte, sizes and digests compared with the manifest, fsync, staged and published all or nothing
Both are whole processes (interpreter start and imports included). Prints the median seconds and MiB/s of each and
the ratio plain/tau (goal: at least 1.0, tau not slower), then one JSON line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
PY = str(BIN / "python")
PORT = int(os.environ.get("BENCH_AZURITE_PORT", "10300"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
BIG_MIB = int(os.environ.get("BENCH_BIG_MIB", "1024"))
ORIGIN = f"http://127.0.0.1:{PORT}"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CONNECTION_STRING = (f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={KEY};"
                     f"BlobEndpoint={ORIGIN}/devstoreaccount1;")
CONTAINER, PREFIX = "bench", "runs/run-1/out"
URL = f"{ORIGIN}/devstoreaccount1/{CONTAINER}/{PREFIX}"

PLAIN = """
import os, sys
from azure.storage.blob import ContainerClient
client = ContainerClient.from_connection_string(sys.argv[1], sys.argv[2])
prefix, dest = sys.argv[3] + "/", sys.argv[4]
for item in client.list_blobs(name_starts_with=prefix):
    path = os.path.join(dest, item.name[len(prefix):])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        client.download_blob(item.name, max_concurrency=8).readinto(fh)
"""


def make_tree(root: Path) -> int:
    """200 small files in 7 folders and one BIG_MIB MiB file, different in every MiB; returns the payload bytes."""
    total = 0
    for i in range(200):
        path = root / f"part-{i % 7}" / f"file-{i:04d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = f"{i}:".encode() * (1 + i % 50)
        path.write_bytes(data)
        total += len(data)
    (root / "model").mkdir()
    block = bytearray(hashlib.sha256(b"bench").digest() * (1 << 15))
    with open(root / "model" / "weights.bin", "wb") as fh:
        for n in range(BIG_MIB):
            block[:8] = n.to_bytes(8, "big")
            fh.write(block)
    return total + (BIG_MIB << 20)


def timed(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"bench: {argv[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return took


def main() -> int:
    azurite_env = {**os.environ, "AZURITE_PORT": str(PORT)}
    tau_env = {**os.environ, "TAU_TRUSTED_BLOB_ENDPOINTS": ORIGIN, "AZURE_STORAGE_CONNECTION_STRING": CONNECTION_STRING}
    with tempfile.TemporaryDirectory(prefix="tau-bench-fetch-") as tmp:
        work = Path(tmp)
        up = subprocess.run([str(ROOT / "contrib/azure/azurite-up.sh")], capture_output=True, text=True,
                            env={**azurite_env, "AZURITE_LOCATION": str(work / "azurite")})
        if up.returncode != 0:
            raise SystemExit(f"bench: Azurite did not start on port {PORT}: {up.stderr}")
        try:
            from azure.storage.blob import BlobServiceClient

            BlobServiceClient.from_connection_string(CONNECTION_STRING).create_container(CONTAINER)
            source = work / "src"
            total = make_tree(source)
            timed([str(BIN / "tau-bundle-seal"), str(source), "--generation", "g1", "--upload", URL], tau_env)
            shutil.rmtree(source)
            cases = {
                "plain azure-storage-blob loop (max_concurrency=8, no hashing)":
                    lambda dest: [PY, "-c", PLAIN, CONNECTION_STRING, CONTAINER, PREFIX, dest],
                "tau-bundle-fetch (sha256, staged, all or nothing)":
                    lambda dest: [str(BIN / "tau-bundle-fetch"), URL, "--destination", dest, "--generation", "g1"],
            }
            samples: dict[str, list[float]] = {name: [] for name in cases}
            for n in range(ROUNDS):
                for name, argv in cases.items():
                    dest = work / f"dest-{n}-{len(samples[name])}-{name.split()[0]}"
                    samples[name].append(timed(argv(str(dest)), tau_env))
                    shutil.rmtree(dest)
        finally:
            subprocess.run([str(ROOT / "contrib/azure/azurite-down.sh")], env=azurite_env, capture_output=True)
    mib = total / (1 << 20)
    plain, tau = (statistics.median(v) for v in samples.values())
    print(f"bundle fetch benchmark: 200 small files + {BIG_MIB} MiB ({mib:.0f} MiB), {ROUNDS} alternating rounds, "
          "whole processes")
    print(f"{'case':64} {'median s':>9} {'MiB/s':>7}")
    results = {}
    for name, values in samples.items():
        median = statistics.median(values)
        results[name] = {"median_s": round(median, 2), "best_s": round(min(values), 2),
                         "mib_per_s": round(mib / median, 1)}
        print(f"{name:64} {median:9.2f} {mib / median:7.1f}")
    print(f"ratio plain/tau: {plain / tau:.2f}x (goal: at least 1.0x)")
    print(json.dumps({"benchmark": "bundle_fetch", "rounds": ROUNDS, "mib": round(mib, 1), "results": results,
                      "ratio": round(plain / tau, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
