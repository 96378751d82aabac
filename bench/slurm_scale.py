"""Slurm scale benchmark: a BENCH_SHARDS-shard run (default 5000) drained on the real single-node test cluster.

Needs the test cluster (`make slurm-up`, as root), so `bench/run.py` does not run it: `make bench-slurm`, or
`.venv/bin/python bench/slurm_scale.py`. Exits 2, saying how to start the cluster, when `sinfo` does not answer.

1. Makes a run with the real commands in a fresh temporary folder (BENCH_DIR, default the system's; removed at the
   end): a cheap client (a shell script copying a one-row Parquet file, as tests/integration/test_slurm_windows.py
   does), partition debug, time 5:00, --nice=1000 (the integration tests share the cluster: their jobs go
   first). The cluster runs at Slurm's defaults (MaxArraySize=1001,
   MaxJobCount=10000), so tau-submit splits the run into windows of at most 1001 tasks and defers what does not fit.
2. Drains it the way cron does: `tau-submit RUN` once, then every BENCH_PERIOD seconds (default 5, start to start)
   the cron line `tau-observe RUN | tau-reconcile RUN && tau-submit RUN && tau-retry RUN`, each a process, until
   `tau-status RUN` says every shard succeeded (it is asked once tau-reconcile's status says so, to keep its own
   squeue and sacct calls out of the cycles). Reports the drain's wall time, the windows (submissions) made, and the
   most of the run's array tasks a sampler saw in squeue (every 2 s; the real squeue, uncounted).
3. Times each `tau-observe RUN | tau-reconcile RUN` cycle (both processes started together, as the shell starts
   them; observe's output reaches tau-reconcile's standard input through this process, which counts the live
   attempts in it; observe's share is taken when it exits): the median and the maximum over the drain, and the
   median for the quarter of the cycles with the fewest live attempts against the quarter with the most (live:
   the attempts tau-observe reported on). The tau commands run with a folder first on PATH holding `squeue` and
   `sacct` wrappers that append one line to a counter file, then exec the real binary (found before PATH
   changed); a cycle's calls are the lines it added.
4. The baseline, measured in the same run: "one sacct per job", what a tool that polls each shard's job on its own
   pays: `sacct --noheader --parsable2 --jobs=JOB_TASK --format=JobID,State,ExitCode` for BENCH_SAMPLE (default
   200) array tasks drawn from those of the first windows submitted, a few per gap between cron lines (so they
   meet the same load as the cycles; whatever is left after the drain runs then), extrapolated to BENCH_SHARDS
   calls. Prints baseline / tau cycle time and the calls (tau's per cycle against BENCH_SHARDS).
At the end, and on any error, Ctrl-C or SIGTERM, `tau-cancel RUN`, then scancel of exactly the job ids the run
recorded that squeue still shows; never another job. BENCH_TIMEOUT (default 7200) bounds the drain in seconds.
While developing, keep BENCH_SHARDS small (a few hundred): the cluster is shared with the integration tests.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
PY = str(BIN / "python")
SHARDS = int(os.environ.get("BENCH_SHARDS", "5000"))
SAMPLE = int(os.environ.get("BENCH_SAMPLE", "200"))
PERIOD = float(os.environ.get("BENCH_PERIOD", "5"))
TIMEOUT = float(os.environ.get("BENCH_TIMEOUT", "7200"))
COUNTED = ("squeue", "sacct")
REAL = {name: shutil.which(name) for name in (*COUNTED, "sinfo", "scancel")}  # before any PATH is changed
BASELINE_FORMAT = "JobID,State,ExitCode"
PER_GAP = max(1, SAMPLE // 40)  # baseline calls made between two cron lines
NICE = "--nice=1000"  # the integration tests' jobs, which share the cluster, start before this run's waiting tasks

CLIENT = """#!/bin/sh
# the cheapest client that can win: one Parquet row made beforehand, copied (no interpreter of its own to start)
exec cp "$TEMPLATE" "$TAU_OUTPUT_DIR/part-00000.parquet"
"""

WRAPPER = """#!/bin/sh
# counts one call of {name} (with its --format), then runs the real one
fmt=
for arg in "$@"; do case $arg in --format=*) fmt=${{arg#--format=}} ;; esac; done
printf '{name} %s\\n' "$fmt" >>'{counter}'
exec '{real}' "$@"
"""


class Stopped(Exception):
    """SIGTERM: stop the drain, cancel the run's jobs."""


def stopped(signum: int, frame: object) -> None:
    raise Stopped()


def cluster_answers() -> bool:
    if REAL["sinfo"] is None:
        return False
    try:
        return subprocess.run([REAL["sinfo"], "--noheader"], capture_output=True, text=True,
                              timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def make_wrappers(folder: Path, counter: Path) -> None:
    folder.mkdir(mode=0o700)
    counter.touch(mode=0o600)
    for name in COUNTED:
        script = folder / name
        script.write_text(WRAPPER.format(name=name, counter=counter, real=REAL[name]))
        script.chmod(0o700)


def counted(counter: Path) -> list[str]:
    return counter.read_text().splitlines()


def tau(command: str, *args: str, env: dict, stdin: str | None = None, timeout: float = 600):
    return subprocess.run([str(BIN / command), *args], input=stdin, capture_output=True, text=True, env=env,
                          timeout=timeout)


def cycle(run_dir: Path, env: dict) -> dict:
    """One `tau-observe RUN | tau-reconcile RUN`, timed: its wall time, observe's share, the live attempts observe
    reported on, its exit code (tau-reconcile's, as the shell's), and the status it printed."""
    ended: dict[str, float] = {}
    start = time.perf_counter()
    observe = subprocess.Popen([str(BIN / "tau-observe"), str(run_dir)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
    tee = threading.Thread(target=lambda: ended.setdefault("observe", (observe.wait(), time.perf_counter())[1]))
    reconcile = subprocess.Popen([str(BIN / "tau-reconcile"), str(run_dir)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    tee.start()
    document = observe.stdout.read()  # also handed on to tau-reconcile: the live attempts are counted from it
    observe.stdout.close()
    out, err = reconcile.communicate(document.decode())
    took = time.perf_counter() - start
    tee.join()
    observe_err = observe.stderr.read().decode()
    observe.stderr.close()
    try:
        live = len(json.loads(document)["attempts"])
        sources = json.loads(document)["sources"]
    except (ValueError, KeyError):
        live, sources = None, None
    status = json.loads(out) if reconcile.returncode == 0 else None
    return {"seconds": took, "observe_seconds": ended["observe"] - start, "live": live, "sources": sources,
            "code": reconcile.returncode, "observe_code": observe.returncode,
            "error": (observe_err.strip() + " " + err.strip()).strip()[:300], "status": status}


def run_tasks(run_dir: Path) -> list[tuple[str, int]]:
    """(job id, array task) of every shard the run's bound submissions gave to Slurm so far."""
    out = []
    for plan_path in sorted((run_dir / "submissions").glob("submission-*/plan.json")):
        status_path = plan_path.with_name("status.json")
        job = json.loads(status_path.read_text()).get("job_id") if status_path.exists() else None
        if not job:
            continue
        for r in json.loads(plan_path.read_text())["task_ranges"]:
            base = r.get("task", r["first"])
            out.extend((job, base + k) for k in range(r["count"]))
    return out


def recorded_jobs(run_dir: Path) -> list[str]:
    jobs = []
    for path in sorted((run_dir / "submissions").glob("submission-*/status.json")):
        job = json.loads(path.read_text()).get("job_id")
        if job:
            jobs.append(str(job))
    return jobs


def submissions(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "submissions").glob("submission-*/plan.json"))]


def queued(jobs: list[str]) -> int:
    """Array tasks of these jobs squeue shows now (one line each: --array); the real squeue, not counted."""
    if not jobs:
        return 0
    proc = subprocess.run([REAL["squeue"], "--noheader", "--array", "--format=%i", f"--jobs={','.join(jobs)}"],
                          capture_output=True, text=True, timeout=60)
    return sum(1 for line in proc.stdout.splitlines() if line.strip())


class Sampler:
    """The queue sampled every 2 s while the run drains: the most of the run's tasks it held."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.most = 0
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.most = max(self.most, queued(recorded_jobs(self.run_dir)))
                self.samples += 1
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass  # a status.json being replaced, a slow squeue: the next sample
            self.stop.wait(2.0)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=90)


def one_sacct(job: str, task: int) -> float:
    """Seconds of the baseline's call for one array task (the real sacct, not counted)."""
    start = time.perf_counter()
    proc = subprocess.run([REAL["sacct"], "--noheader", "--parsable2", f"--jobs={job}_{task}",
                           f"--format={BASELINE_FORMAT}"], capture_output=True, text=True, timeout=60)
    took = time.perf_counter() - start
    assert proc.returncode == 0, (job, task, proc.returncode, proc.stderr)
    return took


def cancel(run_dir: Path, env: dict) -> str:
    """tau-cancel RUN, then scancel of the run's recorded jobs squeue still shows; what was done, in words."""
    if not (run_dir / "submissions").is_dir():
        return "nothing submitted"
    done = []
    try:
        proc = tau("tau-cancel", str(run_dir), env=env, timeout=300)
        done.append(f"tau-cancel exited {proc.returncode}" + (f" ({proc.stderr.strip()[:200]})" if proc.returncode
                                                              else ""))
    except subprocess.TimeoutExpired:
        done.append("tau-cancel timed out")
    jobs = recorded_jobs(run_dir)
    deadline = time.monotonic() + 30  # what tau-cancel stopped leaves squeue within seconds
    while (left := [job for job in jobs if queued([job])]) and time.monotonic() < deadline:
        time.sleep(1)
    if left:
        subprocess.run([REAL["scancel"], *left], capture_output=True, text=True, timeout=60)
        done.append(f"scancel {' '.join(left)}")
        deadline = time.monotonic() + 120
        while any(queued([job]) for job in left) and time.monotonic() < deadline:
            time.sleep(1)
    return "; ".join(done)


def quartiles(cycles: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the quarter of the cycles with live attempts that had the fewest, the quarter that had the most)."""
    busy = sorted((c for c in cycles if c["live"]), key=lambda c: c["live"])
    q = max(1, len(busy) // 4)
    return busy[:q], busy[-q:]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def drain(run_dir: Path, env: dict, counter: Path, sample: list[tuple[str, int]], baseline: list[float],
          report: dict) -> None:
    """The cron line every PERIOD seconds until tau-status says every shard succeeded; fills `report`."""
    start = report["drain_start"]
    next_progress = start + 60
    while True:
        began = time.monotonic()
        if began - start > TIMEOUT:
            raise TimeoutError(f"the run did not drain in {TIMEOUT:g} s")
        before = len(counted(counter))
        c = cycle(run_dir, env)
        lines = counted(counter)[before:]
        c["calls"] = {name: sum(1 for line in lines if line.split(" ")[0] == name) for name in COUNTED}
        c["formats"] = sorted(set(lines))
        c["at"] = began - start
        report["cycles"].append(c)
        if c["code"] != 0:
            report["errors"].append(f"observe|reconcile exited {c['code']}: {c['error']}")
        else:
            before = len(counted(counter))
            for command in ("tau-submit", "tau-retry"):
                proc = tau(command, str(run_dir), env=env)
                if proc.returncode != 0:
                    report["errors"].append(f"{command} exited {proc.returncode}: {proc.stderr.strip()[:300]}")
                    break
                report["by_cron"][command] += len(json.loads(proc.stdout).get("windows") or [])
            report["submit_retry_calls"] += len(counted(counter)) - before
        status = c["status"]
        if status is not None and status["counts"].get("succeeded") == SHARDS:
            final = tau("tau-status", str(run_dir), env=env)
            if final.returncode == 0 and json.loads(final.stdout)["counts"].get("succeeded") == SHARDS:
                report["drain_seconds"] = time.monotonic() - start
                report["status"] = json.loads(final.stdout)
                return
        if time.monotonic() >= next_progress:
            next_progress += 60
            counts = {k: v for k, v in (status or {}).get("counts", {}).items() if v}
            print(f"  [{c['at']:6.0f} s] cycle {ms(c['seconds']):>8} (observe {ms(c['observe_seconds'])}), "
                  f"{c['live']} live, squeue {c['calls']['squeue']} sacct {c['calls']['sacct']}; {counts}",
                  flush=True)
        due = began + PERIOD
        if not sample:  # drawn from the tasks of the first windows Slurm got (every window is alike)
            tasks = run_tasks(run_dir)
            sample.extend(random.Random(0).sample(tasks, min(SAMPLE, len(tasks))))
        for _ in range(PER_GAP):  # a few of the baseline's calls in the gap, under the same load
            if len(baseline) >= len(sample) or time.monotonic() >= due:
                break
            baseline.append(one_sacct(*sample[len(baseline)]))
        time.sleep(max(0.0, due - time.monotonic()))


def main() -> int:
    missing = [name for name in ("sinfo", "squeue", "sacct", "scancel") if REAL[name] is None]
    if missing or not cluster_answers():
        print(f"slurm_scale: the Slurm test cluster does not answer (sinfo{' missing' if missing else ' failed'}): "
              "start it with `make slurm-up` (as root), then run `make bench-slurm` again", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, stopped)
    tmp = Path(tempfile.mkdtemp(prefix="tau-slurm-bench-", dir=os.environ.get("BENCH_DIR")))
    os.chmod(tmp, 0o700)
    run_dir = tmp / "run"
    plain = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    counter = tmp / "calls.txt"
    make_wrappers(tmp / "wrappers", counter)
    env = dict(plain, PATH=f"{tmp / 'wrappers'}:{plain['PATH']}")
    report: dict = {"cycles": [], "errors": [], "by_cron": {"tau-submit": 0, "tau-retry": 0},
                    "submit_retry_calls": 0}
    baseline: list[float] = []
    code = 1
    try:
        template = tmp / "one.parquet"
        subprocess.run([PY, "-c", "import sys, pyarrow as pa, pyarrow.parquet as pq; "
                        "pq.write_table(pa.table({'id': [0]}), sys.argv[1])", str(template)], check=True)
        client = tmp / "client.sh"
        client.write_text(CLIENT)
        client.chmod(0o700)
        plan = {"records": SHARDS, "shards": SHARDS, "command": [str(client)], "env": {"TEMPLATE": str(template)},
                "scheduler": {"profile": "slurm", "slurm": {"partition": "debug", "time": "5:00", "extra": [NICE]}},
                "output": {"format": "parquet", "rows_per_partition": 100_000},
                "windows": {"accounting_lag_seconds": 30, "preemption_seconds": 60,
                            "submission_visibility_seconds": 30}}
        t0 = time.perf_counter()
        proc = tau("tau-init", str(run_dir), env=plain, stdin=json.dumps(plan))
        assert proc.returncode == 0, proc.stderr
        t_init = time.perf_counter() - t0
        print(f"slurm scale benchmark: {SHARDS} shards on the test cluster, cron line every {PERIOD:g} s "
              f"(tau-init {t_init:.1f} s)", flush=True)
        with Sampler(run_dir) as sampler:
            report["drain_start"] = time.monotonic()
            before = len(counted(counter))
            t0 = time.perf_counter()
            proc = tau("tau-submit", str(run_dir), env=env)
            t_submit = time.perf_counter() - t0
            assert proc.returncode == 0, proc.stderr
            first = json.loads(proc.stdout)
            submit_calls = len(counted(counter)) - before
            print(f"  tau-submit: {len(first.get('tasks') or [])} tasks in {len(first.get('windows') or [])} "
                  f"window(s), {first['deferred']['shards']} shards deferred ({first['deferred']['holding']}); "
                  f"{t_submit:.1f} s, {submit_calls} squeue/sacct calls", flush=True)
            sample: list[tuple[str, int]] = []
            drain(run_dir, env, counter, sample, baseline, report)
            during = len(baseline)
            if not sample:
                tasks = run_tasks(run_dir)
                sample.extend(random.Random(0).sample(tasks, min(SAMPLE, len(tasks))))
            for job, task in sample[len(baseline):]:
                baseline.append(one_sacct(job, task))
            most = sampler.most
        code = 0
    except (KeyboardInterrupt, Stopped):
        print("slurm_scale: stopped; cancelling the run's jobs", file=sys.stderr)
        code = 130
    except Exception as exc:  # reported, then the run's jobs are cancelled all the same
        print(f"slurm_scale: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cancelled = cancel(run_dir, plain)
        plans = submissions(run_dir) if (run_dir / "submissions").is_dir() else []
        shutil.rmtree(tmp, ignore_errors=True)
    if report["errors"]:
        print(f"  {len(report['errors'])} command(s) failed during the drain; the first of their messages:")
        for line in list(dict.fromkeys(report["errors"]))[:5]:
            print(f"    {line}")
    if code:
        print(f"  cleanup: {cancelled}")
        return code
    cycles = [c for c in report["cycles"] if c["code"] == 0]
    times = [c["seconds"] for c in cycles]
    observe_times = [c["observe_seconds"] for c in cycles]
    calls = [sum(c["calls"].values()) for c in cycles]
    busy_calls = [sum(c["calls"].values()) for c in cycles if c["live"]]
    few, many = quartiles(cycles)
    initial = [p for p in plans if p.get("purpose") == "initial"]
    per_call = statistics.mean(baseline)
    extrapolated = per_call * SHARDS
    unavailable = sum(1 for c in cycles if c["sources"] and "unavailable" in (c["sources"]["queue"],
                                                                               c["sources"]["accounting"]))
    formats = sorted({f for c in cycles for f in c["formats"]})
    print(f"  drained in {report['drain_seconds']:.0f} s: {report['status']['counts']['succeeded']} of {SHARDS} "
          f"shards succeeded; {len(plans)} submissions ({len(initial)} windows of first attempts, "
          f"{len(plans) - len(initial)} retries): {len(first.get('windows') or [])} by the first tau-submit, "
          f"{report['by_cron']['tau-submit']} by the cron line's tau-submit, {report['by_cron']['tau-retry']} by its "
          f"tau-retry, {len(plans) - len(first.get('windows') or []) - sum(report['by_cron'].values())} by others "
          f"(the cluster's EpilogSlurmctld hook runs tau-submit while shards are deferred); at most {most} of the "
          f"run's tasks in squeue ({sampler.samples} samples)")
    print(f"  {len(report['cycles'])} cycles of `tau-observe RUN | tau-reconcile RUN` "
          f"({len(report['cycles']) - len(cycles)} failed; {unavailable} with a source unavailable):")
    print(f"    cycle time: median {ms(statistics.median(times))}, max {ms(max(times))} "
          f"(tau-observe's share: median {ms(statistics.median(observe_times))}, max {ms(max(observe_times))})")
    span = max(c["at"] for c in cycles) or 1.0
    for part in range(5):  # the drain in five stretches of equal time
        some = [c for c in cycles if part / 5 <= c["at"] / span < (part + 1) / 5 or (part == 4 and c["at"] == span)]
        if some:
            print(f"      {part * 20:3d}-{part * 20 + 20}% of the drain: {len(some):3d} cycles, live "
                  f"{min(c['live'] for c in some)}-{max(c['live'] for c in some)}, cycle median "
                  f"{ms(statistics.median(c['seconds'] for c in some))}, max {ms(max(c['seconds'] for c in some))}, "
                  f"calls {min(sum(c['calls'].values()) for c in some)}-{max(sum(c['calls'].values()) for c in some)}")
    print(f"    few live attempts ({few[0]['live']}-{few[-1]['live']}, {len(few)} cycles): median "
          f"{ms(statistics.median(c['seconds'] for c in few))}; many ({many[0]['live']}-{many[-1]['live']}, "
          f"{len(many)} cycles): median {ms(statistics.median(c['seconds'] for c in many))}")
    print(f"    squeue + sacct processes per cycle: median {statistics.median(calls):g}, max {max(calls)} "
          f"(with live attempts: {min(busy_calls)}-{max(busy_calls)}); squeue max "
          f"{max(c['calls']['squeue'] for c in cycles)}, sacct max {max(c['calls']['sacct'] for c in cycles)}; "
          f"formats asked: {formats}")
    print(f"    tau-submit + tau-retry of the cron line: {report['submit_retry_calls']} squeue/sacct calls in all; "
          f"the first tau-submit: {submit_calls}")
    print(f"  baseline, one sacct per job: {ms(per_call)} a call (median {ms(statistics.median(baseline))}, "
          f"{len(baseline)} calls of `sacct --jobs=JOB_TASK --format={BASELINE_FORMAT}`, {during} of them during the "
          f"drain); extrapolated from that sample of {len(baseline)} to {SHARDS} calls: {extrapolated:.1f} s a "
          f"cycle")
    print(f"    baseline / tau cycle: {extrapolated / statistics.median(times):.1f}x the median cycle, "
          f"{extrapolated / statistics.median(c['seconds'] for c in many):.1f}x the median cycle with many live "
          f"attempts, {extrapolated / max(times):.1f}x the slowest cycle")
    print(f"    calls: tau {statistics.median(busy_calls):g} a cycle (max {max(calls)}) against {SHARDS} "
          f"({SHARDS / max(max(calls), 1):.0f}x fewer at tau's max)")
    print(f"  cleanup: {cancelled}")
    print(json.dumps({"benchmark": "slurm_scale", "shards": SHARDS, "sample": len(baseline), "period_s": PERIOD,
                      "drain_s": round(report["drain_seconds"], 1), "submissions": len(plans),
                      "windows": len(initial), "max_in_squeue": most, "cycles": len(report["cycles"]),
                      "failed_cycles": len(report["cycles"]) - len(cycles),
                      "cycle_median_ms": round(statistics.median(times) * 1000),
                      "cycle_max_ms": round(max(times) * 1000),
                      "cycle_few_live_median_ms": round(statistics.median(c["seconds"] for c in few) * 1000),
                      "cycle_many_live_median_ms": round(statistics.median(c["seconds"] for c in many) * 1000),
                      "calls_per_cycle_median": statistics.median(calls), "calls_per_cycle_max": max(calls),
                      "baseline_call_ms": round(per_call * 1000, 1), "baseline_cycle_s": round(extrapolated, 1),
                      "ratio_median": round(extrapolated / statistics.median(times), 2),
                      "errors": len(report["errors"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
