#!/usr/bin/env bats
# tau-drive composed in pipelines and cron lines: it keeps a run moving, jq reads its result, --notify tells a
# person once per change.

bats_require_minimum_version 1.5.0

setup() {
  load helpers
  bats_load_library bats-support
  bats_load_library bats-assert
  make_demo_run "$BATS_TEST_TMPDIR/ws" --fail-first shard-00001 --fail-first shard-00002
  RUN="$BATS_TEST_TMPDIR/ws/run"
}

@test "tau drive RUN | jq -r .state drives a run with failing shards to succeeded" {
  run bash -c 'tau drive "$0" --interval 0.3 | jq -r ".state, .finished, .status.counts.succeeded"' "$RUN"
  assert_success
  assert_output $'succeeded\nsucceeded\n4'
}

@test "a cron line of tau-drive --once, run until jq says finished, ends with every shard won and nothing else running" {
  for _ in $(seq 1 60); do
    finished=$(tau-drive "$RUN" --once | jq -r '.finished // empty')
    [ -n "$finished" ] && break
    sleep 0.3
  done
  assert_equal "$finished" "succeeded"
  run bash -c 'tau status "$0" | jq -r ".shards[] | \"\(.id) \(.winner)\""' "$RUN"
  assert_output $'shard-00000 attempt-0001\nshard-00001 attempt-0002\nshard-00002 attempt-0002\nshard-00003 attempt-0001'
}

@test "--notify gets one status document per change, on its standard input, with the event in TAU_DRIVE_EVENT" {
  notes="$BATS_TEST_TMPDIR/notes"
  mkdir -m 700 "$notes"
  run tau-drive "$RUN" --interval 0.3 --notify "jq -c '{e: env.TAU_DRIVE_EVENT, s: .state}' >> '$notes/told'"
  assert_success
  tau-drive "$RUN" --once --notify "echo again >> '$notes/told'" >/dev/null
  run cat "$notes/told"
  assert_output '{"e":"done","s":"succeeded"}'
}

@test "tau-drive --once on a run that is not there exits 66 with one JSON error on stderr" {
  run --separate-stderr tau-drive "$BATS_TEST_TMPDIR/nowhere" --once
  assert_failure 66
  assert_output ""
  [ "$(jq -r .error <<<"$stderr")" = "not_found" ]
}
