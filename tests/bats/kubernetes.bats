#!/usr/bin/env bats
# tau-observe --kubernetes composed with jq, against the loopback API server of the Python tests
# (tests/kubeapi.py), serving one scene per file; the filters are the ones tau-observe(1) and tau-status(7) show.

bats_require_minimum_version 1.5.0

setup_file() {
  load helpers
  export KUBECONFIG="$BATS_FILE_TMPDIR/kubeconfig"
  "$PY" "$ROOT/tests/kubeapi.py" job-running-with-crashlooping-sidecar "$KUBECONFIG" >"$BATS_FILE_TMPDIR/port" &
  echo $! >"$BATS_FILE_TMPDIR/server.pid"
  local deadline=$((SECONDS + 20))
  until [ -s "$BATS_FILE_TMPDIR/port" ]; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "the loopback API server did not start" >&2; return 1; }
    sleep 0.1
  done
}

teardown_file() {
  kill "$(cat "$BATS_FILE_TMPDIR/server.pid")"  # only the server this file started
}

setup() {
  load helpers
  bats_load_library bats-support
  bats_load_library bats-assert
}

@test "jq reads the lifecycle and the reason of a degraded running Job" {
  run bash -c 'tau-observe --kubernetes train-7 -n team-a | jq -r "[.lifecycle, .reason // \"healthy\"] | @tsv"'
  assert_success
  assert_output "$(printf 'running\ttrain-7-x8k2p/log-shipper waiting reason=CrashLoopBackOff restarts=5')"
}

@test "a Tau user's filter on Tau's v1alpha1 state still matches" {
  run bash -c 'tau-observe --kubernetes train-7 -n team-a | jq -r "select(.schemaVersion == \"v1alpha1\" and .state == \"Running\") | [.kind, .degraded] | @tsv"'
  assert_success
  assert_output "$(printf 'Job\ttrue')"
}

@test "the same filter reads a run's status: one vocabulary in lifecycle" {
  make_demo_run "$BATS_TEST_TMPDIR/ws" --fail-first shard-00001
  tau-submit "$BATS_TEST_TMPDIR/ws/run" >/dev/null
  settle "$BATS_TEST_TMPDIR/ws/run"
  run bash -c 'tau-observe "$BATS_TEST_TMPDIR/ws/run" | tau-reconcile "$BATS_TEST_TMPDIR/ws/run" | jq -r "[.lifecycle, .degraded, .reason // \"healthy\"] | @tsv"'
  assert_success
  assert_output "$(printf 'failed\ttrue\tshard-00001 failed: the client exited with status 3')"
}

@test "every container that restarted, with its last exit code" {
  run bash -c 'tau-observe --kubernetes train-7 -n team-a | jq -r ".pods[] | .name as \$p | .containers[] | select(.restartCount > 0) | \"\(\$p)/\(.name) \(.restartCount) \(.lastExitCode)\""'
  assert_success
  assert_output "train-7-x8k2p/log-shipper 5 1"
}

@test "the reads that were not observed: none" {
  run bash -c 'tau-observe --kubernetes train-7 -n team-a | jq -c ".observations | with_entries(select(.value.state == \"unavailable\"))"'
  assert_success
  assert_output "{}"
}

@test "-o table starts with the kind, the name and the state" {
  run tau-observe --kubernetes train-7 -n team-a -o table
  assert_success
  assert_line --index 0 "Job train-7 in namespace team-a: running"
  assert_line --index 2 "  Tau v1alpha1 state: Running"
  assert_line --index 3 "degraded:"
}

@test "a workload that is not there is not_found, exit 0" {
  run bash -c 'tau-observe --kubernetes gone -n team-a | jq -r "[.lifecycle, .state] | @tsv"'
  assert_success
  assert_output "$(printf 'not_found\tNotFound')"
}

@test "--watch without -o table exits 2 with one JSON error on stderr" {
  run -2 --separate-stderr tau-observe --kubernetes train-7 --watch
  assert_output ""
  [ "$(jq -r '[.code, .error] | @tsv' <<<"$stderr")" = "$(printf '2\tusage')" ]
}
