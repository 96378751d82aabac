#!/usr/bin/env bats
# tau's commands composed in shell pipelines with jq, on one real demo run (4 shards, shard-00001 fails once).

bats_require_minimum_version 1.5.0

setup_file() {
  load helpers
  export RUN="$BATS_FILE_TMPDIR/ws/run" SHARDS=4
  make_demo_run "$BATS_FILE_TMPDIR/ws" --fail-first shard-00001
  tau-submit "$RUN" >/dev/null
  settle "$RUN"
}

setup() {
  load helpers
  bats_load_library bats-support
  bats_load_library bats-assert
}

@test "tau-observe | tau-reconcile | jq -r .state prints the run state" {
  run bash -c 'tau-observe "$RUN" | tau-reconcile "$RUN" | jq -r .state'
  assert_success
  assert_output "failed"
}

@test "jq selects the failed shard id from the status" {
  run bash -c 'tau-observe "$RUN" | tau-reconcile "$RUN" | jq -r ".shards[] | select(.state == \"failed\") | .id"'
  assert_success
  assert_output "shard-00001"
}

@test "tau-reconcile -o table has a header line and one line per shard" {
  # the estimate line is there only when the finished attempts took a second or more (a busy machine)
  run bash -c 'set -o pipefail; tau-observe "$RUN" | tau-reconcile "$RUN" -o table | { grep -v "^estimated time left: " || true; }'
  assert_success
  assert_line --index 0 "run run: failed (succeeded 3, failed 1)"
  assert_line --index 1 "degraded: shard-00001 failed: the client exited with status 3"
  assert_line --index 2 --regexp '^budget: 1 failed attempts, 1 failed shards '
  assert_line --index 3 --regexp '^efficiency: 4 attempts measured; [0-9.e-]+ core-hours, 0 GPU-hours$'
  assert_line --index 4 --regexp '^  CPU [0-9.]+% of the cores.* time; no memory requested, peak [0-9.]+ MiB$'
  assert_line --index 5 --regexp '^  slowest: shard-0000[0-3] attempt-0001 '
  assert_line --index 6 --regexp '^SHARD +STATE +ATTEMPT +WINNER +TRIES +SCHEDULER +PROGRESS +USED +REASON$'
  assert_line --index 8 --regexp '^shard-00001 +failed +attempt-0001 +- +1/3 +failed +- +[0-9.]+s cpu [0-9]+% [0-9.]+ MiB +the client exited'
  [ "${#lines[@]}" -eq $((SHARDS + 7)) ]
}

@test "the front command composes the same way: tau observe RUN | tau reconcile RUN" {
  run bash -c 'tau observe "$RUN" | tau reconcile "$RUN" | jq -r "[.run_id, .counts.failed] | @tsv"'
  assert_success
  assert_output "$(printf 'run\t1')"
}

@test "tau-winner exits 1 while a shard has no winner, and jq reads the reason" {
  run --separate-stderr bash -c 'tau-winner "$RUN" | jq -r ".shards[] | select(.winner == null) | .reason"; exit "${PIPESTATUS[0]}"'
  [ "$status" -eq 1 ]
  assert_output "shard-00001/attempt-0001 has no candidate manifest"
  [ "$(jq -r .error <<<"$stderr")" = check_failed ]
}

@test "invalid JSON into tau-reconcile exits 65 with one JSON error on stderr" {
  run -65 --separate-stderr tau-reconcile "$RUN" <<<'{"kind": "tau.observations",'
  assert_output ""
  [ "${#stderr_lines[@]}" -eq 1 ]
  [ "$(jq -r '[.code, .command, .error] | @tsv' <<<"$stderr")" = "$(printf '65\ttau-reconcile\tbad_input')" ]
  [[ "$(jq -r .message <<<"$stderr")" == "tau-reconcile: observations on standard input is not valid JSON: "* ]]
}

@test "tau-observe RUN | head -c 10 exits quietly" {
  run --separate-stderr bash -c 'tau-observe "$RUN" | head -c 10'
  assert_success
  assert_output '{"attempts'
  [ -z "$stderr" ]
}

@test "after tau-retry and settling, jq .counts.succeeded equals the shard count" {
  run bash -c 'tau-retry "$RUN" | jq -r ".tasks[] | [.shard_id, .attempt_id] | @tsv"'
  assert_success
  assert_output "$(printf 'shard-00001\tattempt-0002')"
  settle "$RUN"
  run bash -c 'tau-observe "$RUN" | tau-reconcile "$RUN" | jq .counts.succeeded'
  assert_success
  assert_output "$SHARDS"
  run bash -c 'tau-retry "$RUN" | jq .created'
  assert_output "false"
}

@test "a complete run collects every planned record" {
  run bash -c 'tau-collect "$RUN" --destination "$BATS_FILE_TMPDIR/ws/dataset" | jq -r "[.records, .partitions] | @tsv"'
  assert_success
  assert_output "$(printf '80\t3')"
}

@test "the same run is collected again as CSV lines without a new run, and wc counts its records" {
  run bash -c 'tau-collect "$RUN" --destination "$BATS_FILE_TMPDIR/ws/dataset-csv" --format csv --rows-per-partition 50 | jq -r "[.format, .rows_per_partition, .partitions] | @tsv"'
  assert_success
  assert_output "$(printf 'csv\t50\t2')"
  run bash -c 'tail -q -n +2 "$BATS_FILE_TMPDIR"/ws/dataset-csv/part-*.csv | wc -l'
  assert_output "80"
}
