"""Scale benchmark: observe + reconcile of a 100,000-shard run with 1,000 live attempts, and sacct parsing.

1. Builds a synthetic run (records as tau writes them, canonical and valid; files written without fsync to save
   time): 99,000 sealed shards (shard, attempt, readiness, observation, result, manifest and winner records) and
   1,000 shards whose attempt is live under the local executor (their task records name this process, so
   `tau-observe` finds them running).
2. Times, in this process: the first observe + reconcile (which builds the sealed-shard index), then the steady
   state observe + reconcile, against the baseline: reading every record of the run (validated, as a full rescan
   would) in the same process. Goal: steady state at most a tenth of the baseline.
3. Times parsing 100,000 sacct rows (`taulib.slurm.parse.sacct` + `latest_by_task`) against the floor of
   splitting the same text into fields.
Shard count: BENCH_SHARDS (default 100000), live attempts BENCH_LIVE (default 1000).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from taulib import jsonio  # noqa: E402
from taulib.lifecycle import init, observe, reconcile  # noqa: E402
from taulib.local.proc import process_start_ticks  # noqa: E402
from taulib.rules.plan import shard_range  # noqa: E402
from taulib.rundir import layout  # noqa: E402
from taulib.rundir.records import RunDir  # noqa: E402
from taulib.rundir.run import Run  # noqa: E402
from taulib.slurm import parse  # noqa: E402

SHARDS = int(os.environ.get("BENCH_SHARDS", "100000"))
LIVE = int(os.environ.get("BENCH_LIVE", "1000"))
NOW = "2026-11-29T12:00:00.000000Z"
SHA = "0" * 64


def write(path: Path, record: dict) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, jsonio.canonical(record))
    os.close(fd)


def build(run_dir: Path) -> None:
    request = {"records": SHARDS * 10, "shards": SHARDS, "command": ["true"],
               "scheduler": {"profile": "local"}}
    plan = init.resolve_plan(request, run_dir.name)
    plan_bytes = jsonio.canonical(plan)
    os.mkdir(run_dir, 0o700)
    for sub in ("shards", "locks", "submissions", "submissions/submission-0001",
                "submissions/submission-0001/local"):
        os.mkdir(run_dir / sub, 0o700)
    (run_dir / "plan.json").write_bytes(plan_bytes)
    os.chmod(run_dir / "plan.json", 0o600)
    rid, plan_sha = run_dir.name, jsonio.sha256_hex(plan_bytes)
    me, ticks = os.getpid(), process_start_ticks(os.getpid())
    live_from = SHARDS - LIVE
    tasks = []
    for index in range(SHARDS):
        sid, aid = layout.shard_id(index), "attempt-0001"
        shard_dir = run_dir / "shards" / sid
        adir = shard_dir / "attempts" / aid
        os.makedirs(adir, 0o700)
        os.chmod(shard_dir / "attempts", 0o700)
        os.chmod(shard_dir, 0o700)
        start, end = shard_range(plan, index)
        write(shard_dir / "shard.json", {"kind": "tau.shard", "schema_version": 1, "run_id": rid, "shard_id": sid,
                                         "index": index, "record_start": start, "record_end": end})
        live = index >= live_from
        attempt = {"kind": "tau.attempt", "schema_version": 1, "run_id": rid, "shard_id": sid, "attempt_id": aid,
                   "ordinal": 1, "plan_sha256": plan_sha, "submission_id": "submission-0001",
                   "scheduler": {"executor": "local", "job_id": "submission-0001", "task_index": index},
                   "windows": plan["windows"], "state": "running" if live else "succeeded",
                   "terminal": None if live else {"classification": "succeeded", "reason": "complete",
                                                  "exit_code": 0},
                   "dataset": f"shards/{sid}/attempts/{aid}/dataset", "revision": 2 if live else 3,
                   "created_at": NOW, "updated_at": NOW, "started_at": NOW, "restarts": 0}
        write(adir / "attempt.json", attempt)
        write(adir / "readiness.json", {"kind": "tau.readiness", "schema_version": 1, "run_id": rid, "shard_id": sid,
                                        "attempt_id": aid, "revision": 2, "updated_at": NOW,
                                        "state": "running" if live else "stopped", "restarts": 0, "message": None})
        write(adir / "observation.json", {"kind": "tau.observation", "schema_version": 1, "run_id": rid,
                                          "shard_id": sid, "attempt_id": aid, "revision": 1, "state": "running",
                                          "source": "queue", "terminal": False, "observed_at": NOW,
                                          "changed_at": NOW, "deadline": None, "exit_code": None, "reason": None})
        if live:
            tasks.append({"shard_id": sid, "attempt_id": aid, "ordinal": 1, "task_index": index})
            write(run_dir / "submissions/submission-0001/local" / f"task-{index:05d}.json",
                  {"kind": "tau.local-task", "schema_version": 1, "run_id": rid, "submission_id": "submission-0001",
                   "task_index": index, "revision": 1, "state": "running", "pid": me, "start_ticks": ticks,
                   "started_at": NOW, "finished_at": None, "exit_code": None, "signal": None})
            continue
        manifest = {"kind": "tau.manifest", "schema_version": 1, "run_id": rid, "shard_id": sid, "attempt_id": aid,
                    "ordinal": 1, "created_at": NOW, "dataset": f"shards/{sid}/attempts/{aid}/dataset",
                    "format": "parquet", "requested_records": end - start, "actual_records": end - start,
                    "files": [{"path": "part-00000.parquet", "size": 1000, "sha256": SHA, "rows": end - start}],
                    "schema_digest": SHA, "provenance": plan_sha}
        write(adir / "manifest.json", manifest)
        result = {"kind": "tau.result", "schema_version": 1, "run_id": rid, "shard_id": sid, "attempt_id": aid,
                  "started_at": NOW, "completed_at": NOW, "exit_code": 0, "signal": None, "outcome": "complete",
                  "requested_records": end - start, "actual_records": end - start,
                  "manifest": {"path": f"shards/{sid}/attempts/{aid}/manifest.json",
                               "sha256": jsonio.digest(manifest)}, "error": None}
        write(adir / "result.json", result)
        write(shard_dir / "winner.json", {"kind": "tau.winner", "schema_version": 1, "run_id": rid, "shard_id": sid,
                                          "attempt_id": aid, "ordinal": 1,
                                          "manifest": {"path": f"shards/{sid}/attempts/{aid}/manifest.json",
                                                       "sha256": jsonio.digest(manifest)},
                                          "result": {"path": f"shards/{sid}/attempts/{aid}/result.json",
                                                     "sha256": jsonio.digest(result)},
                                          "published_at": NOW})
    write(run_dir / "submissions/submission-0001/plan.json",
          {"kind": "tau.submission-plan", "schema_version": 1, "run_id": rid, "submission_id": "submission-0001",
           "purpose": "initial", "plan_sha256": plan_sha, "created_at": NOW, "executor": "local",
           "job_name": "tau-bench", "tasks": tasks})
    write(run_dir / "submissions/submission-0001/local/supervisor.json",
          {"kind": "tau.local-supervisor", "schema_version": 1, "run_id": rid, "submission_id": "submission-0001",
           "pid": me, "start_ticks": ticks, "started_at": NOW, "max_parallel": 4, "revision": 1})
    write(run_dir / "run.json", {"kind": "tau.run", "schema_version": 1, "run_id": rid, "created_at": NOW,
                                 "plan": {"path": "plan.json", "sha256": plan_sha}, "shard_count": SHARDS,
                                 "tau_version": "0.1.0"})


def observe_reconcile(run_dir: Path) -> dict:
    with Run(str(run_dir)) as run:
        doc = observe.observe(run)
        return reconcile.apply(run, doc)


def read_every_record(run_dir: Path) -> int:
    count = 0
    with RunDir(str(run_dir)) as rd:
        for dirpath, _, files in os.walk(run_dir):
            rel_dir = os.path.relpath(dirpath, run_dir)
            for name in files:
                if name.endswith(".json"):
                    rd.read(name if rel_dir == "." else f"{rel_dir}/{name}")
                    count += 1
    return count


def timed(fn, *args):
    start = time.perf_counter()
    value = fn(*args)
    return time.perf_counter() - start, value


def sacct_text(rows: int) -> str:
    lines = []
    for i in range(rows):
        job, task = 1000 + i // 1000, i % 1000
        state = ("COMPLETED", "FAILED", "RUNNING", "CANCELLED by 0", "TIMEOUT")[i % 5]
        lines.append(f"{job}_{task}|{job + i}|tau-run-00000000-0001|{state}|{i % 4}:0|2026-11-29T15:26:45|"
                     "2026-11-29T15:26:46|2026-11-29T15:26:47")
    return "\n".join(lines) + "\n"


def main() -> int:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir(mode=0o700)
        run_dir = workspace / "big"
        t_build, _ = timed(build, run_dir)
        t_first, status = timed(observe_reconcile, run_dir)
        assert status["counts"]["succeeded"] == SHARDS - LIVE and status["counts"]["running"] == LIVE, \
            status["counts"]
        t_steady, status = timed(observe_reconcile, run_dir)
        assert status["counts"]["succeeded"] == SHARDS - LIVE and status["counts"]["running"] == LIVE
        t_all, records = timed(read_every_record, run_dir)
    text = sacct_text(100_000)
    arrays = {str(1000 + i) for i in range(100)}
    t_floor, _ = timed(lambda: [line.split("|") for line in text.splitlines()])
    t_parse, rows = timed(lambda: parse.latest_by_task(parse.sacct(text, arrays)))
    assert len(rows) == 100_000
    print(f"scale benchmark: {SHARDS} shards, {LIVE} live attempts (synthetic run built in {t_build:.1f} s)")
    print(f"  baseline: read every record of the run ({records} records)   {t_all * 1000:9.0f} ms   1.000x")
    print(f"  first observe + reconcile (builds the sealed index)        {t_first * 1000:9.0f} ms "
          f"  {t_first / t_all:.3f}x")
    print(f"  steady observe + reconcile                                 {t_steady * 1000:9.0f} ms "
          f"  {t_steady / t_all:.3f}x  (goal <= 0.100x)")
    print(f"sacct parsing, 100000 rows: floor (split into fields) {t_floor * 1000:.0f} ms; "
          f"tau's strict parse {t_parse * 1000:.0f} ms ({t_parse / t_floor:.1f}x the floor)")
    print(json.dumps({"benchmark": "reconcile_scale", "shards": SHARDS, "live": LIVE,
                      "read_every_record_ms": round(t_all * 1000), "first_ms": round(t_first * 1000),
                      "steady_ms": round(t_steady * 1000), "steady_ratio": round(t_steady / t_all, 4),
                      "sacct_floor_ms": round(t_floor * 1000), "sacct_parse_ms": round(t_parse * 1000)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
