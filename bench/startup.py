"""Start-up benchmark: the cost of a fast command against the cost of its two imports.

Measures, in the same run and interleaved (so machine noise hits all alike):
  baseline   python -c 'import click, orjson'            (the floor any click+orjson command pays)
  help       tau-reconcile --help
  reconcile  tau-observe output of a finished 8-shard demo run piped into tau-reconcile RUN
  observe    tau-observe RUN on the same run
  status     tau-status RUN on the same run (observe and the rules, nothing written)
  drive      tau-drive RUN --once on the same run (a whole cycle: observe, reconcile, winners, retry, status)
Prints median and best wall time of each and the ratio of the medians to the baseline (goal: at most 2x).
With BENCH_OTHER=PATH (another checkout of tau with its own .venv, e.g. a `git worktree` of an older commit), the
same three commands of that checkout, on a demo run it made itself, are measured in the same interleaved rounds:
a before/after comparison on one quiet machine.
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

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
PY = str(BIN / "python")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "30"))


def make_demo_run(workspace: Path, root: Path = ROOT) -> Path:
    bin_dir = root / ".venv" / "bin"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    run_dir = workspace / "run"
    plan = {"records": 800, "shards": 8,
            "command": [str(bin_dir / "python"), str(root / "contrib/demo/client.py"), "--rows-per-file", "40"],
            "scheduler": {"profile": "local", "local": {"max_parallel": 2}}}
    subprocess.run([str(bin_dir / "tau-init"), str(run_dir)], input=json.dumps(plan), text=True, check=True,
                   env=env, capture_output=True)
    subprocess.run([str(bin_dir / "tau-submit"), str(run_dir)], check=True, env=env, capture_output=True)
    deadline = time.monotonic() + 120
    while True:
        obs = subprocess.run([str(bin_dir / "tau-observe"), str(run_dir)], check=True, env=env, capture_output=True)
        status = json.loads(subprocess.run([str(bin_dir / "tau-reconcile"), str(run_dir)], input=obs.stdout,
                                           check=True, env=env, capture_output=True).stdout)
        if status["state"] == "succeeded" and not json.loads(obs.stdout)["usage"]["submissions"]:
            return run_dir  # settled: every task's figures recorded, so no command measured asks the executor
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: the demo run did not finish: {status['counts']}")
        time.sleep(0.5)


def timed(argv: list[str], stdin: bytes | None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> int:
    other = os.environ.get("BENCH_OTHER")
    with tempfile.TemporaryDirectory() as tmp:
        cases = {"baseline: python -c 'import click, orjson'": ([PY, "-c", "import click, orjson"], None)}
        for label, root in [("", ROOT)] + ([(" [BENCH_OTHER]", Path(other).resolve())] if other else []):
            workspace = Path(tmp) / f"ws{len(cases)}"
            workspace.mkdir(mode=0o700)
            run_dir = make_demo_run(workspace, root)
            bin_dir = root / ".venv" / "bin"
            # what an installed tau runs: compiled bytecode (PYTHONDONTWRITEBYTECODE would make every process
            # compile every module again)
            subprocess.run([str(bin_dir / "python"), "-m", "compileall", "-q", str(root / "taulib")], check=True)
            observations = subprocess.run([str(bin_dir / "tau-observe"), str(run_dir)], check=True,
                                          capture_output=True).stdout
            cases.update({
                f"tau-reconcile --help{label}": ([str(bin_dir / "tau-reconcile"), "--help"], None),
                f"tau-reconcile RUN (8 shards){label}": ([str(bin_dir / "tau-reconcile"), str(run_dir)],
                                                         observations),
                f"tau-observe RUN (8 shards){label}": ([str(bin_dir / "tau-observe"), str(run_dir)], None),
            })
            if (bin_dir / "tau-status").exists():
                cases[f"tau-status RUN (8 shards){label}"] = ([str(bin_dir / "tau-status"), str(run_dir)], None)
            if (bin_dir / "tau-drive").exists():
                cases[f"tau-drive RUN --once (8 shards){label}"] = ([str(bin_dir / "tau-drive"), str(run_dir),
                                                                     "--once"], None)
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for argv, stdin in cases.values():  # warm the page cache
            timed(argv, stdin)
        for _ in range(ROUNDS):
            for name, (argv, stdin) in cases.items():
                samples[name].append(timed(argv, stdin))
    base = statistics.median(samples[next(iter(cases))])
    print(f"start-up benchmark: {ROUNDS} interleaved rounds, wall time per process")
    print(f"{'case':60} {'median ms':>10} {'best ms':>9} {'ratio':>7}")
    results = {}
    for name, values in samples.items():
        median = statistics.median(values)
        results[name] = {"median_ms": round(median * 1000, 1), "best_ms": round(min(values) * 1000, 1),
                         "ratio": round(median / base, 2)}
        print(f"{name:60} {median * 1000:10.1f} {min(values) * 1000:9.1f} {median / base:6.2f}x")
    print(json.dumps({"benchmark": "startup", "rounds": ROUNDS, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
