"""Shared makers for the tests of services (tests/test_services.py, tests/integration/test_slurm_services.py): a plan
whose service is the stand-in model server (tests/clients/standin_server.py) and whose client asks it for
completions (tests/clients/service_client.py), and what an attempt's records and logs say of its services."""

from __future__ import annotations

import json
import re
from pathlib import Path

from helpers import PYTHON, ROOT

SERVER = str(ROOT / "tests" / "clients" / "standin_server.py")
CLIENT = str(ROOT / "tests" / "clients" / "service_client.py")
REVISION = re.compile(r"^tau-attempt: readiness revision (\d+): (\w+) \((.*); client (\w+)\)")


def services_plan(pids: Path, *, records: int = 6, shards: int = 1, backends: int = 2, server: tuple = (),
                  client: tuple = (), service: dict | None = None, **extra) -> dict:
    """A plan of `shards` shards whose service `generator` (`backends` stand-in servers, each writing its pid into
    `pids`) is asked by the service client for every record."""
    pids.mkdir(mode=0o700, exist_ok=True)
    generator = {"name": "generator", "backends": backends,
                 "command": [PYTHON, SERVER, "--port", "{port}", "--pid-dir", str(pids), *server],
                 "ready": {"http": "/v1/models", "expect": "stand-in"}, "probe_seconds": 1, "start_timeout": 60,
                 "stop_grace": 3, **(service or {})}
    doc = {"records": records, "shards": shards, "command": [PYTHON, CLIENT, "--report", str(pids), *client],
           "services": [generator], "scheduler": {"profile": "local", "local": {"max_parallel": 2}},
           "windows": {"heartbeat_seconds": 2, "accounting_lag_seconds": 5, "preemption_seconds": 5,
                       "submission_visibility_seconds": 5}}
    doc.update(extra)
    return doc


def attempt_dir(run_dir: Path, shard: int = 0, attempt: int = 1) -> Path:
    return run_dir / "shards" / f"shard-{shard:05d}" / "attempts" / f"attempt-{attempt:04d}"


def record(run_dir: Path, name: str, shard: int = 0, attempt: int = 1) -> dict | None:
    path = attempt_dir(run_dir, shard, attempt) / name
    return json.loads(path.read_text()) if path.exists() else None


def revisions(log: str) -> list[tuple[int, str, str, str]]:
    """(revision, state, deployments in words, client) of every readiness revision an allocation's log names."""
    return [(int(m[1]), m[2], m[3], m[4]) for line in log.splitlines() if (m := REVISION.match(line))]


def backend_pids(run_dir: Path, pids: Path, shard: int = 0, attempt: int = 1) -> set[int]:
    """Every process the attempt's services ran: each backend (readiness.json) and each backend's child (its pid
    file, when the server was started with --child)."""
    found = {b["pid"] for d in record(run_dir, "readiness.json", shard, attempt)["deployments"]
             for b in d["backends"] if b["pid"]}
    prefix = f"shard-{shard:05d}-attempt-{attempt:04d}-"
    found |= {int(p.read_text()) for p in pids.glob(f"{prefix}*.pid")}
    return found


def running(pids: set[int]) -> set[int]:
    """Those of `pids` that are live processes (a zombie is not)."""
    out = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            out.add(pid)
    return out
