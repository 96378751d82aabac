# Shared by tests/bats/*.bats: tau's commands on PATH, a demo run, and a loop that waits for it to settle.

ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
PATH="$ROOT/.venv/bin:$PATH"
export PATH
PY="$ROOT/.venv/bin/python"

# make_demo_run WORKSPACE [CLIENT ARGS...]: tau-init a 4-shard, 80-record run WORKSPACE/run of the demo client
make_demo_run() {
  local ws=$1 arg args=""
  shift
  for arg in "$@"; do args+=", \"$arg\""; done
  mkdir -m 700 -p "$ws"
  cat >"$ws/plan.json" <<JSON
{"records": 80, "shards": 4,
 "command": ["$PY", "$ROOT/contrib/demo/client.py", "--rows-per-file", "10"$args],
 "scheduler": {"profile": "local", "local": {"max_parallel": 4}},
 "output": {"format": "parquet", "rows_per_partition": 30},
 "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}
JSON
  tau-init "$ws/run" <"$ws/plan.json" >/dev/null
}

# settle RUN: observe | reconcile until no shard is pending, running, in accounting lag or an unpublished candidate,
# and every finished attempt is measured (the supervisor records a task's rusage a moment after its attempt ends)
settle() {
  local run=$1 deadline=$((SECONDS + 60)) doc
  while :; do
    doc=$(tau-observe "$run" | tau-reconcile "$run") || return 1
    [ "$(jq '(.counts | .pending + .running + .accounting_lag + .candidate) + .efficiency.unmeasured' <<<"$doc")" = 0 ] \
      && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "settle: $run did not settle: $(jq -c .counts <<<"$doc")" >&2
      return 1
    fi
    sleep 0.3
  done
}
