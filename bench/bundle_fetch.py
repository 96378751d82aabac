"""Bundle fetch benchmark: tau-bundle-fetch against `rclone copy` and a plain azure-storage-blob loop, on one Azurite.

Starts its own Azurite (contrib/azure/azurite-up.sh on BENCH_AZURITE_PORT, default 10300, data in a temporary
folder; stopped by its PID file at the end) and seals and uploads three bundles, each at a prefix of its own:
  big    one file of BENCH_BIG_MIB MiB (default 1024)
  small  BENCH_SMALL_FILES small files (default 2000; 1 to 64 KiB, 32 KiB on average) in 20 folders
  mix    a training run: BENCH_CKPT_COUNT checkpoints (default 4) of BENCH_CKPT_MIB MiB (default 200) and
         BENCH_MIX_FILES small files (default 500)
Then, for each workload, it times the three clients interleaved over BENCH_ROUNDS rounds (default 3), each a whole
process (interpreter start and imports included) into a fresh folder that is removed afterwards:
  tau     `tau-bundle-fetch URL --destination DIR --generation g1`: etag-pinned downloads, sha256 of every byte,
          sizes and digests compared with the manifest, fsync, staged and published all or nothing
  rclone  `rclone copy az:CONTAINER/PREFIX DIR --transfers 8` (Debian's rclone 1.60; an env-var remote, nothing
          in any rclone config file): MD5 checked where a blob has Content-MD5, no fsync, no staging
  plain   a Python process that lists the prefix and, for each blob in turn,
          `download_blob(max_concurrency=8).readinto(open(file, "wb"))`: no hashing, no fsync, no staging
After each client the folder is removed and the file system synced (os.sync) outside the timing, so that what the
removal costs (on a file system mounted with `discard`, the discards of the freed blocks, which the next fsync or
journal commit pays) is billed to no client. Before each client Azurite is started again on the same data
(BENCH_FRESH_AZURITE=0: once for the whole run), so that every client meets the same server: one Azurite process
grows slower over its life (measured: 1 GiB served for 0.9-1.1 CPU-s when fresh, 2.1-2.5 after five or six such
downloads, its garbage collector's threads the difference), which billed each client for the ones before it.
Each child's wall time, and from its rusage (os.wait4) its peak RSS and its CPU seconds (user + system), and the
CPU seconds Azurite spent meanwhile (/proc). Prints per workload the median seconds, MB/s, peak RSS, CPU seconds per
GiB and per file, Azurite's CPU seconds, and the speed ratios tau/rclone (goal: at least 1.0x on every
workload) and tau/plain; then one JSON line. rclone is for this benchmark
only (`apt-get install rclone`); without it the rclone rows are skipped and said to be. Run it alone on the machine
(`flock /tmp/tau-bench.lock .venv/bin/python bench/bundle_fetch.py`): the storage endpoint shares its cores.
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
SMALL_FILES = int(os.environ.get("BENCH_SMALL_FILES", "2000"))
CKPT_COUNT = int(os.environ.get("BENCH_CKPT_COUNT", "4"))
CKPT_MIB = int(os.environ.get("BENCH_CKPT_MIB", "200"))
MIX_FILES = int(os.environ.get("BENCH_MIX_FILES", "500"))
WORKLOADS = [w for w in os.environ.get("BENCH_WORKLOADS", "big,small,mix").split(",") if w]
FRESH = os.environ.get("BENCH_FRESH_AZURITE", "1") != "0"
ORIGIN = f"http://127.0.0.1:{PORT}"
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CONNECTION_STRING = (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
                     f"BlobEndpoint={ORIGIN}/{ACCOUNT};")
CONTAINER = "bench"

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


def small_files(root: Path, count: int, folder: str) -> tuple[int, int]:
    """`count` small files of 1 to 64 KiB (32 KiB on average) in 20 folders; (files, bytes)."""
    total = 0
    for i in range(count):
        path = root / folder / f"part-{i % 20:02d}" / f"file-{i:05d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        size = 1024 + (i * 7919) % (63 << 10)
        data = (hashlib.sha256(f"{folder}{i}".encode()).hexdigest().encode() * (size // 64 + 1))[:size]
        path.write_bytes(data)
        total += size
    return count, total


def big_file(path: Path, mib: int, seed: str) -> int:
    """A file of `mib` MiB, different in every MiB."""
    path.parent.mkdir(parents=True, exist_ok=True)
    block = bytearray(hashlib.sha256(seed.encode()).digest() * (1 << 15))
    with open(path, "wb") as fh:
        for n in range(mib):
            block[:8] = n.to_bytes(8, "big")
            fh.write(block)
    return mib << 20


SETUP = """
import sys
from datetime import datetime, timedelta, timezone
from azure.storage.blob import BlobServiceClient, ContainerSasPermissions, generate_container_sas
account, key, container, connection_string = sys.argv[1:]
BlobServiceClient.from_connection_string(connection_string).create_container(container)
print(generate_container_sas(account, container, account_key=key, permission=ContainerSasPermissions(read=True,
      list=True), expiry=datetime.now(timezone.utc) + timedelta(days=1)))
"""


def setup() -> dict:
    """Create the container and return the environment of an rclone remote `az:` for it. rclone 1.60's azureblob
    backend puts the account in front of its `endpoint` as a host name (https://ACCOUNT.ENDPOINT), and its
    `use_emulator` is Azurite on port 10000 only: a container SAS URL is the one way to name a path-style endpoint
    on another port. A child does it: this process never imports the SDK, so its memory is not what a client's
    peak RSS starts from (Linux folds the memory of the process that forked and exec'd into the child's maxrss)."""
    proc = subprocess.run([PY, "-c", SETUP, ACCOUNT, KEY, CONTAINER, CONNECTION_STRING], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench: cannot create the container: {proc.stderr[-2000:]}")
    return {"RCLONE_CONFIG_AZ_TYPE": "azureblob",
            "RCLONE_CONFIG_AZ_SAS_URL": f"{ORIGIN}/{ACCOUNT}/{CONTAINER}?{proc.stdout.strip()}",
            "RCLONE_CONFIG": os.devnull}


def make_tree(root: Path, workload: str) -> tuple[int, int, str]:
    """The workload's bundle tree; (files, bytes, description)."""
    if workload == "big":
        return 1, big_file(root / "model" / "weights.bin", BIG_MIB, "big"), f"one {BIG_MIB} MiB file"
    if workload == "small":
        files, size = small_files(root, SMALL_FILES, "shards")
        return files, size, f"{SMALL_FILES} small files"
    if workload == "mix":
        size = sum(big_file(root / "checkpoints" / f"step-{n:06d}.pt", CKPT_MIB, f"ckpt{n}") for n in range(CKPT_COUNT))
        files, small = small_files(root, MIX_FILES, "logs")
        return CKPT_COUNT + files, size + small, f"{CKPT_COUNT} x {CKPT_MIB} MiB + {MIX_FILES} small files"
    raise SystemExit(f"bench: unknown workload {workload!r} in BENCH_WORKLOADS (big, small, mix)")


class Failed(Exception):
    """A client that did not finish."""


def measure(argv: list[str], env: dict, server: int | None = None) -> dict:
    """Wall seconds, peak RSS (bytes) and CPU seconds (user + system) of a child process, and the CPU seconds the
    process `server` (Azurite) spent meanwhile."""
    with tempfile.TemporaryFile() as err:
        before = cpu_of(server)
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.perf_counter() - start
        served = cpu_of(server) - before
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise Failed(f"{argv[0]} failed ({proc.returncode}): {err.read().decode(errors='replace')[-2000:]}")
    return {"s": took, "rss": usage.ru_maxrss * 1024, "cpu": usage.ru_utime + usage.ru_stime, "server": served}


def cpu_of(pid: int | None) -> float:
    """CPU seconds (user + system, all threads) process `pid` has spent; 0 without one."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def azurite(env: dict, location: Path, start: bool = True) -> int | None:
    """Stop this benchmark's Azurite (by its PID file), then start it again on the same data when `start`; its
    PID."""
    subprocess.run([str(ROOT / "contrib/azure/azurite-down.sh")], env=env, capture_output=True)
    if not start:
        return None
    up = subprocess.run([str(ROOT / "contrib/azure/azurite-up.sh")], capture_output=True, text=True,
                        env={**env, "AZURITE_LOCATION": str(location)})
    if up.returncode != 0:
        raise SystemExit(f"bench: Azurite did not start on port {PORT}: {up.stderr}")
    return int((ROOT / ".azurite" / f"azurite-{PORT}.pid").read_text())


def main() -> int:
    rclone = shutil.which("rclone")
    if rclone is None:
        print("bench: rclone is not installed, so its rows are skipped (Debian: apt-get install -y rclone; it is "
              "needed by this benchmark only)", file=sys.stderr)
    azurite_env = {**os.environ, "AZURITE_PORT": str(PORT)}
    tau_env = {**os.environ, "TAU_TRUSTED_BLOB_ENDPOINTS": ORIGIN, "AZURE_STORAGE_CONNECTION_STRING": CONNECTION_STRING}
    shapes: dict[str, tuple[int, int, str]] = {}
    samples: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory(prefix="tau-bench-fetch-", dir=os.environ.get("BENCH_DIR")) as tmp:
        work = Path(tmp)
        server = azurite(azurite_env, work / "azurite")
        try:
            rclone_env = {**os.environ, **setup()}
            for workload in WORKLOADS:
                source = work / f"src-{workload}"
                shapes[workload] = make_tree(source, workload)
                url = f"{ORIGIN}/{ACCOUNT}/{CONTAINER}/{workload}/out"
                measure([str(BIN / "tau-bundle-seal"), str(source), "--generation", "g1", "--upload", url], tau_env)
                shutil.rmtree(source)
            for workload in WORKLOADS:
                prefix = f"{workload}/out"
                url = f"{ORIGIN}/{ACCOUNT}/{CONTAINER}/{prefix}"
                cases = {
                    "tau": (lambda dest, url=url: [str(BIN / "tau-bundle-fetch"), url, "--destination", dest,
                                                   "--generation", "g1", "--no-progress"], tau_env),
                    "rclone": (lambda dest, prefix=prefix: [rclone, "copy", f"az:{CONTAINER}/{prefix}", dest,
                                                            "--transfers", "8"], rclone_env),
                    "plain": (lambda dest, prefix=prefix: [PY, "-c", PLAIN, CONNECTION_STRING, CONTAINER, prefix,
                                                           dest], tau_env),
                }
                if rclone is None:
                    del cases["rclone"]
                samples[workload] = {name: [] for name in cases}
                for n in range(ROUNDS):
                    for name, (argv, env) in cases.items():
                        dest = work / f"dest-{workload}-{name}-{n}"
                        if FRESH:
                            server = azurite(azurite_env, work / "azurite")
                        samples[workload][name].append(measure(argv(str(dest)), env, server))
                        shutil.rmtree(dest)
                        os.sync()  # the removal's writes and discards are not billed to the next client
        except Failed as exc:
            raise SystemExit(f"bench: {exc}") from None
        finally:
            azurite(azurite_env, work / "azurite", start=False)
    return report(shapes, samples)


def report(shapes: dict, samples: dict) -> int:
    print(f"bundle fetch benchmark: {ROUNDS} interleaved rounds, whole processes, one Azurite on this machine"
          + (", started again before each run" if FRESH else ""))
    out = {"benchmark": "bundle_fetch", "rounds": ROUNDS, "fresh_azurite": FRESH, "workloads": {}}
    for workload, cases in samples.items():
        files, size, what = shapes[workload]
        mb, gib = size / 1e6, size / (1 << 30)
        print(f"\n{workload}: {what} ({files} files, {size / (1 << 20):.0f} MiB)")
        print(f"{'client':8} {'median s':>9} {'MB/s':>7} {'peak RSS MiB':>13} {'CPU s':>6} {'CPU s/GiB':>10} "
              f"{'CPU ms/file':>12} {'Azurite CPU s':>14}")
        results = {}
        for name, values in cases.items():
            median = statistics.median(v["s"] for v in values)
            cpu = statistics.median(v["cpu"] for v in values)
            served = statistics.median(v["server"] for v in values)
            rss = max(v["rss"] for v in values)
            results[name] = {"median_s": round(median, 2), "best_s": round(min(v["s"] for v in values), 2),
                             "mb_per_s": round(mb / median, 1), "peak_rss_mib": round(rss / (1 << 20), 1),
                             "cpu_s": round(cpu, 2), "cpu_s_per_gib": round(cpu / gib, 2),
                             "cpu_ms_per_file": round(1000 * cpu / files, 2), "server_cpu_s": round(served, 2)}
            print(f"{name:8} {median:9.2f} {mb / median:7.1f} {rss / (1 << 20):13.0f} {cpu:6.2f} {cpu / gib:10.2f} "
                  f"{1000 * cpu / files:12.2f} {served:14.2f}")
        ratios = {f"tau/{other}": round(results[other]["median_s"] / results["tau"]["median_s"], 2)
                  for other in ("rclone", "plain") if other in results}
        print("speed " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
              + " (goal: tau/rclone at least 1.0x)")
        out["workloads"][workload] = {"files": files, "bytes": size, "results": results, "ratios": ratios}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
