"""Runs every benchmark in bench/ (each prints its own ratios against its baseline measured in the same run)."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ["startup.py", "observe_kubernetes.py", "reconcile_scale.py", "bundle_fetch.py", "collect.py",
              "services.py", "containers.py", "inputs.py"]

if __name__ == "__main__":
    code = 0
    for name in BENCHMARKS:
        print(f"== {name}", flush=True)
        code |= subprocess.run([sys.executable, str(HERE / name)]).returncode
    sys.exit(code)
