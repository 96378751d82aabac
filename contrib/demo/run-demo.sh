#!/usr/bin/env bash
# The whole tau story on one machine: init 8 shards, submit, one shard fails, observe | reconcile, retry,
# winners, collect. Leaves demo/run and demo/dataset in the checkout. Exits 0 only when all 8 shards won and
# the collected row count equals the planned records.
#   SCHEDULER=local (default) uses the embedded local executor; SCHEDULER=slurm uses the test cluster.
#   TAU_PYTHON=/abs/path/to/python runs an installed tau instead of the checkout's .venv: the tau commands beside
#   that Python (put first on PATH), and that Python, with its pyarrow, for the client and the checks.
#   DEMO_CLIENT=FILE runs that copy of the demo client (default: contrib/demo/client.py); DEMO_DIR=DIR works there.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${TAU_PYTHON:-}" ]; then
  case $TAU_PYTHON in /*) ;; *) echo "demo: TAU_PYTHON must be an absolute path" >&2; exit 2 ;; esac
  py=$TAU_PYTHON
else
  py="$here/.venv/bin/python"
fi
export PATH="${py%/*}:$PATH"
client=${DEMO_CLIENT:-$here/contrib/demo/client.py}
scheduler=${SCHEDULER:-local}
work="${DEMO_DIR:-$here/demo}"
records=800
shards=8

json() { "$py" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {"d": d}))' "$1"; }
say() { printf '\n== %s\n' "$*" >&2; }

case "$scheduler" in
  local) sched_json='{"profile": "local", "local": {"max_parallel": 4}}' ;;
  slurm) sched_json='{"profile": "slurm", "slurm": {"partition": "debug", "time": "10:00", "max_parallel": 4}}' ;;
  *) echo "demo: SCHEDULER must be local or slurm" >&2; exit 2 ;;
esac

rm -rf "$work"
mkdir -m 700 -p "$work"
cat >"$work/plan.json" <<JSON
{"records": $records, "shards": $shards,
 "command": ["$py", "$client", "--fail-first", "shard-00003", "--rows-per-file", "40"],
 "scheduler": $sched_json,
 "output": {"format": "parquet", "rows_per_partition": 250},
 "windows": {"accounting_lag_seconds": 30, "preemption_seconds": 60, "submission_visibility_seconds": 60}}
JSON

say "tau-init: 8 shards of $records records"
tau-init "$work/run" <"$work/plan.json"
say "tau-submit"
tau-submit "$work/run" | json '"%s: %d tasks as job %s" % (d["submission_id"], len(d["tasks"]), d["job_id"])'

wait_settled() {  # observe | reconcile until nothing is pending, running, or won but its winner not yet published
  local deadline=$(( $(date +%s) + 300 )) status
  while :; do
    status=$(tau-observe "$work/run" | tau-reconcile "$work/run")
    if [ "$(printf '%s' "$status" | json 'sum(d["counts"][k] for k in ("pending","running","accounting_lag","candidate"))')" = 0 ]; then
      printf '%s' "$status" | json '"run %s: %s %s" % (d["run_id"], d["state"], {k: v for k, v in d["counts"].items() if v})'
      return 0
    fi
    [ "$(date +%s)" -lt "$deadline" ] || { echo "demo: the run did not settle in 300 s" >&2; return 1; }
    sleep 1
  done
}

say "tau-observe | tau-reconcile (until every attempt has finished)"
wait_settled
say "tau status: the failed shard, read-only"
tau status "$work/run" | json '"\n".join("%s: %s: %s (log %s)" % (s["id"], s["state"], s["reason"], s["log"]) for s in d["shards"] if s["log"])'
say "tau logs: its output"
tau logs "$work/run" shard-00003
say "tau-retry: the retryable shards"
tau-retry "$work/run" | json '"%s: retrying %s" % (d["submission_id"], [t["shard_id"] for t in d["tasks"]])'
wait_settled
say "tau-winner"
tau-winner "$work/run" -o table
say "tau-collect"
tau-collect "$work/run" --destination "$work/dataset" --wait -o table   # under Slurm: a CPU job
say "tau status"
tau status "$work/run" -o table

status=$(tau-observe "$work/run" | tau-reconcile "$work/run")
won=$(printf '%s' "$status" | json 'd["counts"]["succeeded"]')
rows=$("$py" -c 'import pyarrow.dataset as ds, sys; print(ds.dataset(sys.argv[1], format="parquet").count_rows())' "$work/dataset")
if [ "$won" = "$shards" ] && [ "$rows" = "$records" ]; then
  echo "demo: ok: $won of $shards shards won; $rows of $records records collected in $work/dataset"
else
  echo "demo: FAILED: $won of $shards shards won; $rows of $records records collected" >&2
  exit 1
fi
