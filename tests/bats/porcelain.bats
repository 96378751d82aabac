#!/usr/bin/env bats
# The porcelain a person types, composed in pipelines: tau status | jq, tau logs | tail, tau cancel.

bats_require_minimum_version 1.5.0

setup_file() {
  load helpers
  export RUN="$BATS_FILE_TMPDIR/ws/run"
  make_demo_run "$BATS_FILE_TMPDIR/ws" --fail-first shard-00001
  tau-submit "$RUN" >/dev/null
  settle "$RUN"
}

setup() {
  load helpers
  bats_load_library bats-support
  bats_load_library bats-assert
}

@test "tau status RUN | jq names the failed shard and its log" {
  run bash -c 'tau status "$RUN" | jq -r ".shards[] | select(.state == \"failed\") | \"\(.id) \(.log)\""'
  assert_success
  assert_output "shard-00001 $RUN/shards/shard-00001/attempts/attempt-0001/client.log"
}

# every path of the run with its type, mode, size, modification time and content digest
tree_state() {
  (cd "$1" && find . -printf '%p %y %m %s %T@\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum)
}

@test "tau status RUN writes nothing: the run directory is the same after it, and two calls print the same" {
  before=$(tree_state "$RUN")
  run --separate-stderr tau status "$RUN"
  assert_success
  [ -z "$stderr" ]
  [ "$(jq -r '.state + " " + (.shards | length | tostring)' <<<"$output")" = "failed 4" ]
  first=$(jq -c 'del(.eta_seconds)' <<<"$output")
  second=$(tau status "$RUN" | jq -c 'del(.eta_seconds)')
  [ -n "$first" ] && [ "$first" = "$second" ]
  after=$(tree_state "$RUN")
  [ "$before" = "$after" ] || { diff <(echo "$before") <(echo "$after") >&2; false; }
}

@test "tau status -o table starts with the run's state" {
  run tau status "$RUN" -o table
  assert_success
  assert_line --index 0 "run run: failed (succeeded 3, failed 1)"
}

@test "tau logs RUN SHARD | tail -n 1 shows the last line the allocation printed" {
  run bash -c 'tau logs "$RUN" shard-00001 | tail -n 1 | jq -r .message'
  assert_success
  assert_output "tau-attempt: attempt shard-00001/attempt-0001 failed: the client exited with status 3"
}

@test "tau logs RUN SHARD | head -n 1 shows the client's own words" {
  run bash -c 'tau logs "$RUN" shard-00001 | head -n 1'
  assert_success
  assert_output "demo client: failing shard-00001 on its first attempt, as asked"
}

@test "tau logs RUN 1 is shard-00001's output: a shard is named by its number too" {
  run bash -c 'tau logs "$RUN" 1 | head -n 1'
  assert_success
  assert_output "demo client: failing shard-00001 on its first attempt, as asked"
  run bash -c 'tau status "$RUN" | jq -r ".shards[] | select(.log) | .id | ltrimstr(\"shard-\") | tonumber" | xargs -I{} tau logs "$RUN" {} -o json | jq -r .shard_id'
  assert_output "shard-00001"
}

@test "tau status of a run that failed with nothing running shows no time left" {
  run bash -c 'tau status "$RUN" | jq -c "[.state, .eta_seconds]"'
  assert_output '["failed",null]'
  run bash -c 'tau status "$RUN" -o table | grep -c "estimated time left"'
  assert_output "0"
}

@test "tau cancel RUN --shard then tau status shows the shard cancelled, and tau retry leaves it alone" {
  cp -a "$BATS_FILE_TMPDIR/ws" "$BATS_TEST_TMPDIR/ws"
  run2="$BATS_TEST_TMPDIR/ws/run"
  run tau cancel "$run2" --shard shard-00001
  assert_success
  run bash -c "tau status '$run2' | jq -r '.shards[1].state, .state'"
  assert_output $'cancelled\ncancelled'
  run bash -c "tau retry '$run2' | jq -c .tasks"
  assert_output "[]"
}

@test "tau reconcile RUN with nothing on standard input exits 65 with one JSON error" {
  run --separate-stderr bash -c 'tau reconcile "$RUN" </dev/null'
  [ "$status" -eq 65 ]
  [ "$(jq -r .error <<<"$stderr")" = "bad_input" ]
}
