#!/usr/bin/env bash
# Runs every test (pytest, then bats) and ends with two lines: "N skipped" (with the skipped tests named above it,
# by pytest's -ra summary and bats's "# skip" lines), then "N passed, N failed", the line CI reads. A skipped test is
# never counted as passed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
out=$(mktemp -d)
cluster_started=0
azurite_started=0
export TAU_TEST_AZURITE_PORT="${TAU_TEST_AZURITE_PORT:-10100}"
cleanup() {
  if [ "$cluster_started" = 1 ]; then contrib/slurm/cluster-down.sh || true; fi
  if [ "$azurite_started" = 1 ]; then AZURITE_PORT="$TAU_TEST_AZURITE_PORT" contrib/azure/azurite-down.sh || true; fi
  rm -rf "$out"
}
trap cleanup EXIT

# The Slurm test cluster for tests/integration (stopped again on exit, also when tests fail). As root only;
# elsewhere the Slurm tests fail with a message saying how to start it.
# A cluster that is already up (make slurm-up) is used as it is and left running.
if [ "$(id -u)" = 0 ] && ! { command -v scontrol >/dev/null && scontrol ping 2>/dev/null | grep -q 'is UP'; }; then
  if FRESH=1 contrib/slurm/cluster-up.sh; then cluster_started=1; else echo "run-all: the Slurm test cluster did not start" >&2; fi
fi

# Azurite for the Blob storage tests, on its own port (never the developer's 10000), installed with npm into .azurite/
# when missing; stopped again on exit, by its PID file. One already answering on that port is used and left running.
if ! (exec 3<>"/dev/tcp/127.0.0.1/$TAU_TEST_AZURITE_PORT") 2>/dev/null; then
  if AZURITE_PORT="$TAU_TEST_AZURITE_PORT" AZURITE_LOCATION="$out/azurite" contrib/azure/azurite-up.sh; then
    azurite_started=1
  else
    echo "run-all: Azurite did not start; the Blob storage tests start it themselves or fail saying why" >&2
  fi
fi

# The container tests' images (contrib/containers/test-images.sh), built once before the tests when missing (about a
# minute; reused while tau's code is unchanged), so that no test pays for them. As root only; elsewhere the
# container tests build them or fail saying why.
if [ "$(id -u)" = 0 ]; then
  contrib/containers/test-images.sh >/dev/null || echo "run-all: the container test images were not built" >&2
fi

# On TAU_TEST_WORKERS pytest-xdist workers (default 2): a module runs whole on one worker, the Slurm modules all on
# the same one (tests/conftest.py groups them); much of the suite waits on processes, so two share the two cores.
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${TAU_TEST_WORKERS:-2}" --dist loadgroup \
  --durations=15 --junitxml="$out/pytest.xml" tests
pytest_rc=$?

bats --tap tests/bats | tee "$out/bats.tap"
bats_rc=${PIPESTATUS[0]}

read -r py_total py_fail py_err py_skip < <(.venv/bin/python - "$out/pytest.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print(0, 1, 0, 0); sys.exit()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
t = sum(int(s.get("tests", 0)) for s in suites); f = sum(int(s.get("failures", 0)) for s in suites)
e = sum(int(s.get("errors", 0)) for s in suites); k = sum(int(s.get("skipped", 0)) for s in suites)
print(t, f, e, k)
PY
)
bats_skip=$(grep -cE '^ok [0-9]+ .*# skip' "$out/bats.tap" || true)
bats_ok=$(( $(grep -c '^ok ' "$out/bats.tap" || true) - bats_skip ))
bats_fail=$(grep -c '^not ok ' "$out/bats.tap" || true)
passed=$(( py_total - py_fail - py_err - py_skip + bats_ok ))
skipped=$(( py_skip + bats_skip ))
failed=$(( py_fail + py_err + bats_fail ))
if [ "$pytest_rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
if [ "$bats_rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo "$skipped skipped"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
