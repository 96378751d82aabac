"""Services benchmark: what tau's order of work costs an allocation, against the launcher script users write by hand.

A shard's allocation starts a model service of two backends (the tests' stand-in OpenAI-compatible server, which
answers its readiness probe only after BENCH_READY seconds, default 2), waits until both are ready, runs the client
(which asks them for every record and writes Parquet), and stops the servers. Measured in the same run, alternating:
  baseline  the launcher script of vLLM users (a shell script: start the servers in the background, `until curl -sf
            .../v1/models | grep -q MODEL; do sleep 1; done` for each, run the client, kill the servers, wait): what
            submitit, Snakemake's and Nextflow's users write inside their job, with none of tau's records
  tau       one task of the local executor: `tau-attempt run` (fence, readiness revisions, probes every second,
            endpoints.json, the client, the cleanup owner, result, manifest, winner), timed from the local task's
            start to its end as the supervisor recorded them
BENCH_ROUNDS shards each (default 6), one at a time. Prints the median and best seconds per shard of each, the
ratio of the medians (goal: at most 1.1x: tau's records and cleanup cost little beside a model's load), and one JSON
line.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
PY = str(BIN / "python")
SERVER = str(ROOT / "tests" / "clients" / "standin_server.py")
CLIENT = str(ROOT / "tests" / "clients" / "service_client.py")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "6"))
READY = float(os.environ.get("BENCH_READY", "2"))
RECORDS = 20  # per shard

LAUNCHER = """#!/bin/bash
# what a vLLM user's job script does around the client (one shard)
set -u
{py} {server} --port {p1} --ready-after {ready} > "$OUT/server-1.log" 2>&1 & s1=$!
{py} {server} --port {p2} --ready-after {ready} > "$OUT/server-2.log" 2>&1 & s2=$!
trap 'kill $s1 $s2 2>/dev/null; wait' EXIT
for port in {p1} {p2}; do
  until curl -sf "http://127.0.0.1:$port/v1/models" | grep -q stand-in; do sleep 1; done
done
export TAU_SERVICE_GENERATOR_URLS="http://127.0.0.1:{p1},http://127.0.0.1:{p2}"
{py} {client} > "$OUT/client.log" 2>&1
"""


def free_ports(count: int) -> list[int]:
    import socket

    held = [socket.socket() for _ in range(count)]
    for sock in held:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in held]
    for sock in held:
        sock.close()
    return ports


def baseline(work: Path, index: int) -> float:
    out = work / f"baseline-{index}"
    (out / "dataset").mkdir(parents=True)
    p1, p2 = free_ports(2)
    script = work / "launcher.sh"
    script.write_text(LAUNCHER.format(py=shlex.quote(PY), server=shlex.quote(SERVER), client=shlex.quote(CLIENT),
                                      p1=p1, p2=p2, ready=READY))
    env = dict(os.environ, OUT=str(out), TAU_SHARD_ID=f"shard-{index:05d}", TAU_ATTEMPT_ID="attempt-0001",
               TAU_RECORD_START="0", TAU_RECORD_END=str(RECORDS), TAU_OUTPUT_DIR=str(out / "dataset"))
    start = time.perf_counter()
    subprocess.run(["bash", str(script)], check=True, env=env)
    return time.perf_counter() - start


def tau_shard(work: Path, index: int) -> float:
    run_dir = work / f"run-{index}"
    plan = {"records": RECORDS, "shards": 1, "command": [PY, CLIENT],
            "services": [{"name": "generator", "backends": 2, "probe_seconds": 1,
                          "command": [PY, SERVER, "--port", "{port}", "--ready-after", str(READY)],
                          "ready": {"http": "/v1/models", "expect": "stand-in"}}],
            "scheduler": {"profile": "local", "local": {"max_parallel": 1}}}
    return local_shard(run_dir, plan)


def finished_task(run_dir: Path, timeout: float = 120) -> dict:
    """The record of the first task of the run's first submission under the local executor, once it finished."""
    record = run_dir / "submissions" / "submission-0001" / "local" / "task-00000.json"
    deadline = time.monotonic() + timeout
    while True:
        task = json.loads(record.read_text()) if record.exists() else None
        if task is not None and task["state"] == "finished":
            return task
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: the tau shard did not finish: {task}")
        time.sleep(0.2)


def local_shard(run_dir: Path, plan: dict) -> float:
    """The seconds a one-shard run of `plan` took on the local executor, from its task's start to its end as the
    supervisor recorded them (the run made at `run_dir`, submitted, waited for)."""
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}")
    subprocess.run([str(BIN / "tau-init"), str(run_dir)], input=json.dumps(plan), text=True, check=True, env=env,
                   capture_output=True)
    subprocess.run([str(BIN / "tau-submit"), str(run_dir)], check=True, env=env, capture_output=True)
    task = finished_task(run_dir)
    if task["exit_code"] != 0:
        raise SystemExit(f"bench: the tau shard failed: {task}")
    return float(task["usage"]["elapsed_seconds"])


def main() -> int:
    sys.path.insert(0, str(ROOT))
    seconds: dict[str, list[float]] = {"baseline": [], "tau": []}
    with tempfile.TemporaryDirectory(prefix="tau-bench-services-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o700)
        for index in range(ROUNDS):
            seconds["baseline"].append(baseline(work, index))
            seconds["tau"].append(tau_shard(work, index))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    for name, values in seconds.items():
        print(f"{name:9s} median {medians[name]:.2f} s  best {min(values):.2f} s  ({len(values)} shards, services "
              f"ready after {READY:g} s)")
    ratio = medians["tau"] / medians["baseline"]
    print(f"tau / baseline: {ratio:.2f}x (goal: at most 1.1x)")
    print(json.dumps({"bench": "services", "ready_after": READY, "rounds": ROUNDS, "median_seconds": medians,
                      "ratio": round(ratio, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
