"""Containers benchmark: what tau costs a shard whose client runs in an image pinned by digest, against the podman
command line users write by hand inside their job.

One shard's client (the demo client, writing BENCH_RECORDS rows of Parquet) runs in the tests' client image
(contrib/containers/test-images.sh builds it offline), by podman with runc. Measured in the same run, alternating:
  baseline  `podman run --rm --network=host -v ...` of the image by digest: what a submitit or Snakemake user puts
            in the job, with no check of what it runs and none of tau's records
  tau       one task of the local executor: `tau-attempt run` with the plan's `image` (the fence, the digest checked
            through podman image inspect, the program looked up in the image, the client run by podman with tau's
            mounts and environment, the cleanup owner, result, manifest, winner), timed from the local task's start
            to its end as the supervisor recorded them
BENCH_ROUNDS shards each (default 6), one at a time. Prints the median and best seconds per shard of each, the
ratio of the medians, and one JSON line. As root (podman); the images are built first when missing (~1 minute).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from services import local_shard  # bench/ is this script's folder, first on sys.path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
CLIENT = str(ROOT / "contrib" / "demo" / "client.py")
DEMO = str(ROOT / "contrib" / "demo")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "6"))
RECORDS = int(os.environ.get("BENCH_RECORDS", "2000"))
PODMAN = ["podman", "--runtime", "/usr/sbin/runc"]
RUNTIME_ARGS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]


def image() -> str:
    done = subprocess.run([str(ROOT / "contrib" / "containers" / "test-images.sh")], check=True, text=True,
                          capture_output=True)
    ref: str = json.loads(done.stdout)["client"]["ref"]
    return ref


def baseline(work: Path, ref: str, index: int) -> float:
    out = work / f"baseline-{index}"
    out.mkdir()
    env = ["-e", "TAU_SHARD_ID=shard-00000", "-e", "TAU_ATTEMPT_ID=attempt-0001", "-e", "TAU_ATTEMPT_ORDINAL=1",
           "-e", "TAU_RECORD_START=0",
           "-e", f"TAU_RECORD_END={RECORDS}", "-e", f"TAU_OUTPUT_DIR={out}"]
    start = time.perf_counter()
    subprocess.run([*PODMAN, "run", "--rm", "--network=host", *RUNTIME_ARGS, "-v", f"{DEMO}:{DEMO}:ro",
                    "-v", f"{out}:{out}", *env, ref, "python3", CLIENT, "--rows-per-file", "1000"],
                   check=True, capture_output=True)
    return time.perf_counter() - start


def tau_shard(work: Path, ref: str, index: int) -> float:
    run_dir = work / f"run-{index}"
    plan = {"records": RECORDS, "shards": 1, "command": ["python3", CLIENT, "--rows-per-file", "1000"],
            "image": {"ref": ref, "runtime_command": PODMAN, "runtime_args": RUNTIME_ARGS,
                      "mounts": [{"host": DEMO, "container": DEMO}]},
            "scheduler": {"profile": "local", "local": {"max_parallel": 1}}}
    return local_shard(run_dir, plan)


def main() -> int:
    ref = image()
    seconds: dict[str, list[float]] = {"baseline": [], "tau": []}
    with tempfile.TemporaryDirectory(prefix="tau-bench-containers-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o700)
        for index in range(ROUNDS):
            seconds["baseline"].append(baseline(work, ref, index))
            seconds["tau"].append(tau_shard(work, ref, index))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    for name, values in seconds.items():
        print(f"{name:9s} median {medians[name]:.2f} s  best {min(values):.2f} s  ({len(values)} shards of "
              f"{RECORDS} records)")
    ratio = medians["tau"] / medians["baseline"]
    print(f"tau / baseline: {ratio:.2f}x")
    print(json.dumps({"benchmark": "containers", "records": RECORDS, "rounds": ROUNDS, "median_seconds": medians,
                      "ratio": round(ratio, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
