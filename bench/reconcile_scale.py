"""Scale benchmark: a 100,000-shard run's bookkeeping (tau-init, tau-submit, observe + reconcile) and sacct parsing.

1. Times the real commands, as processes: `tau-init` of a BENCH_SHARDS-shard run (goal: at most 10 s at 100,000),
   then `tau-submit` of it under the local executor until it returns (goal: at most 20 s); the supervisor it
   started is stopped right after (SIGTERM: it stops starting tasks).
2. Builds a synthetic run (records as tau writes them, canonical and valid; files written without fsync to save
   time): 99,000 sealed shards (attempt, readiness, observation, result, manifest and winner records, and the
   sealed-shard index as their winners' publishers leave it: written by `rundir.index.add`) and 1,000 shards whose
   attempt is live under the local executor (their task records name this process, so `tau-observe` finds them
   running; their shard lock files exist, as their allocations left them).
3. Times, in this process: the first observe + reconcile (goal: at most 2 s), then the steady state observe +
   reconcile, against the baseline: reading every record of the run (validated, as a full rescan would) in the
   same process (goal: steady state at most a tenth of the baseline); then, for comparison, an observe +
   reconcile without any index (what a first reconcile cost when only tau-reconcile built the index: it reads every
   shard; skipped with BENCH_COLD=0), and what a winner's publisher pays to add its shard to the index.
4. Times parsing 100,000 sacct rows (`taulib.executors.slurm.parse.sacct` + `latest_by_task`) against the floor of
   splitting the same text into fields.
Shard count: BENCH_SHARDS (default 100000), live attempts BENCH_LIVE (default 1000).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from taulib import jsonio  # noqa: E402
from taulib.lifecycle import init, observe, reconcile  # noqa: E402
from taulib.processes import alive, start_ticks as process_start_ticks  # noqa: E402
from taulib.rules.shards import shard_range  # noqa: E402
from taulib.rundir import index, layout  # noqa: E402
from taulib.rundir.records import RunDir  # noqa: E402
from taulib.rundir.run import Run  # noqa: E402
from taulib.executors.local import records as local_records  # noqa: E402
from taulib.executors.slurm import parse  # noqa: E402

SHARDS = int(os.environ.get("BENCH_SHARDS", "100000"))
LIVE = int(os.environ.get("BENCH_LIVE", "1000"))
COLD = os.environ.get("BENCH_COLD", "1") != "0"
NOTES = 200  # winners' index updates timed one by one
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
    for position in range(SHARDS):
        sid, aid = layout.shard_id(position), "attempt-0001"
        shard_dir = run_dir / "shards" / sid
        adir = shard_dir / "attempts" / aid
        os.makedirs(adir, 0o700)
        os.chmod(shard_dir / "attempts", 0o700)
        os.chmod(shard_dir, 0o700)
        start, end = shard_range(plan, position)
        live = position >= live_from
        attempt = {"kind": "tau.attempt", "schema_version": 1, "run_id": rid, "shard_id": sid, "attempt_id": aid,
                   "ordinal": 1, "plan_sha256": plan_sha, "submission_id": "submission-0001",
                   "scheduler": {"executor": "local", "job_id": "submission-0001", "task_index": position},
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
            write(run_dir / local_records.task("submission-0001", position),
                  {"kind": "tau.local-task", "schema_version": 1, "run_id": rid, "submission_id": "submission-0001",
                   "task_index": position, "revision": 1, "state": "running", "pid": me, "start_ticks": ticks,
                   "started_at": NOW, "finished_at": None, "exit_code": None, "signal": None})
            os.close(os.open(run_dir / "locks" / f"{sid}.lock", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # as
            # its allocation left it, which took the shard's lock
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
           "job_name": "tau-bench", "task_ranges": [{"first": live_from, "count": LIVE, "ordinal": 1}]})
    write(run_dir / local_records.supervisor("submission-0001"),
          {"kind": "tau.local-supervisor", "schema_version": 1, "run_id": rid, "submission_id": "submission-0001",
           "pid": me, "start_ticks": ticks, "started_at": NOW, "max_parallel": 4, "revision": 1})
    write(run_dir / "run.json", {"kind": "tau.run", "schema_version": 1, "run_id": rid, "created_at": NOW,
                                 "plan": {"path": "plan.json", "sha256": plan_sha}, "shard_count": SHARDS,
                                 "run_format": 2, "tau_version": "0.1.0"})
    with Run(str(run_dir)) as run:  # what the winners' publishers left: every sealed shard in its segment
        index.add(run, {i: (1, 0) for i in range(live_from)})


def command(name: str, *args: str, stdin: str | None = None) -> float:
    """Seconds the real command `name` took, run as a process from this checkout."""
    start = time.perf_counter()
    proc = subprocess.run([str(ROOT / "bin" / name), *args], input=stdin, capture_output=True, text=True)
    took = time.perf_counter() - start
    assert proc.returncode == 0, (name, proc.returncode, proc.stderr[-2000:])
    return took


def lifecycle(workspace: Path) -> tuple[float, float]:
    """(tau-init seconds, tau-submit seconds) of a real run of SHARDS shards under the local executor."""
    run_dir = workspace / "fresh"
    request = {"records": SHARDS * 10, "shards": SHARDS, "command": ["true"],
               "scheduler": {"profile": "local", "local": {"max_parallel": 1}}}
    t_init = command("tau-init", str(run_dir), stdin=json.dumps(request))
    t_submit = command("tau-submit", str(run_dir))
    record = json.loads((run_dir / local_records.supervisor("submission-0001")).read_bytes())
    os.kill(record["pid"], signal.SIGTERM)  # it stops starting tasks and waits for the one running
    deadline = time.monotonic() + 60
    while alive(record["pid"], record["start_ticks"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    shutil.rmtree(run_dir)
    return t_init, t_submit


def note_winners(run_dir: Path, count: int) -> float:
    """Mean seconds a winner's publisher spends adding its shard to the index (lock, read, replace), over `count`
    shards of the live ones, one call each (the run's index is no use afterwards: it lists them)."""
    with Run(str(run_dir)) as run:
        start = time.perf_counter()
        for i in range(SHARDS - count, SHARDS):
            index.add(run, {i: (1, 0)}, timeout=index.NOTE_WAIT)
        return (time.perf_counter() - start) / count


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


def row(label: str, seconds: float, baseline: float | None = None, note: str = "") -> None:
    """One line of the report: the label, the milliseconds, the ratio to the baseline when there is one."""
    ratio = f"{seconds / baseline:.3f}x" if baseline else ""
    print(f"  {label:<60} {seconds * 1000:9.1f} ms  {ratio:>7}  {note}".rstrip())


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
        t_init, t_submit = lifecycle(workspace)
        run_dir = workspace / "big"
        t_build, _ = timed(build, run_dir)
        t_first, status = timed(observe_reconcile, run_dir)
        assert status["counts"]["succeeded"] == SHARDS - LIVE and status["counts"]["running"] == LIVE, \
            status["counts"]
        t_steady, status = timed(observe_reconcile, run_dir)
        assert status["counts"]["succeeded"] == SHARDS - LIVE and status["counts"]["running"] == LIVE
        t_all, records = timed(read_every_record, run_dir)
        t_cold = None
        if COLD:
            shutil.rmtree(run_dir / "index")
            t_cold, status = timed(observe_reconcile, run_dir)
            assert status["counts"]["succeeded"] == SHARDS - LIVE and status["counts"]["running"] == LIVE
        t_note = note_winners(run_dir, min(NOTES, LIVE))
    text = sacct_text(100_000)
    arrays = {str(1000 + i) for i in range(100)}
    t_floor, _ = timed(lambda: [line.split("|") for line in text.splitlines()])
    t_parse, rows = timed(lambda: parse.latest_by_task(parse.sacct(text, arrays)))
    assert len(rows) == 100_000
    print(f"scale benchmark: {SHARDS} shards, {LIVE} live attempts (synthetic run built in {t_build:.1f} s)")
    row(f"tau-init of {SHARDS} shards (a real process)", t_init, note="(goal <= 10 s at 100000)")
    row("tau-submit, local executor (a real process)", t_submit, note="(goal <= 20 s at 100000)")
    row(f"baseline: read every record of the run ({records} records)", t_all, t_all)
    row("first observe + reconcile (index kept by the publishers)", t_first, t_all, "(goal <= 2 s at 100000)")
    row("steady observe + reconcile", t_steady, t_all, "(goal <= 0.100x)")
    if t_cold is not None:
        row("observe + reconcile without an index (reads every shard)", t_cold, t_all)
    row("a winner's publisher adding its shard to the index (mean)", t_note)
    print(f"sacct parsing, 100000 rows: floor (split into fields) {t_floor * 1000:.0f} ms; "
          f"tau's strict parse {t_parse * 1000:.0f} ms ({t_parse / t_floor:.1f}x the floor)")
    print(json.dumps({"benchmark": "reconcile_scale", "shards": SHARDS, "live": LIVE,
                      "init_ms": round(t_init * 1000), "submit_ms": round(t_submit * 1000),
                      "read_every_record_ms": round(t_all * 1000), "first_ms": round(t_first * 1000),
                      "first_ratio": round(t_first / t_all, 4),
                      "steady_ms": round(t_steady * 1000), "steady_ratio": round(t_steady / t_all, 4),
                      "no_index_ms": None if t_cold is None else round(t_cold * 1000),
                      "index_note_ms": round(t_note * 1000, 2),
                      "sacct_floor_ms": round(t_floor * 1000), "sacct_parse_ms": round(t_parse * 1000)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
