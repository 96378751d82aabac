#!/usr/bin/env bats
# Shell completion: `tau completion bash` sourced in bash completes command names, options and choices of every
# tau command, also through the front command `tau`; zsh and fish get their scripts too.

bats_require_minimum_version 1.5.0

setup() {
  load helpers
  bats_load_library bats-support
  bats_load_library bats-assert
}

# complete WORD...: the candidates bash completion offers for the last word of the line "WORD..."
complete_line() {
  bash -c '
    source <(tau completion bash) || exit 3
    COMP_WORDS=("$@")
    COMP_CWORD=$(($# - 1))
    func=$(complete -p "$1" | sed -E "s/.* -F ([^ ]+) .*/\1/")
    "$func" "$1" 2>/dev/null
    printf "%s\n" "${COMPREPLY[@]}"
  ' complete_line "$@"
}

@test "the bash script is valid bash and registers every command" {
  run bash -c 'tau completion bash | bash -n'
  assert_success
  expected=$("$PY" -c 'from taulib.cli import registry; print(len(registry.COMMANDS) + 1)')  # and tau itself
  [ "$expected" -ge 15 ]
  run bash -c 'source <(tau completion bash) && complete -p | grep -c " tau\(-[a-z-]*\)\?$"'
  assert_success
  assert_output "$expected"
}

@test "tau completes its command names" {
  run complete_line tau ob
  assert_success
  assert_output "observe"
  run complete_line tau bundle-
  assert_output "$(printf 'bundle-seal\nbundle-verify\nbundle-fetch')"
}

@test "tau-observe completes its options" {
  run complete_line tau-observe --ku
  assert_success
  assert_output "--kubernetes"
}

@test "the front command hands the rest of the line to the command it names" {
  run complete_line tau observe --wa
  assert_success
  assert_output "--watch"
}

@test "a choice completes from its values" {
  run complete_line tau-reconcile runs/demo -o ""
  assert_success
  assert_output "$(printf 'json\ntable')"
  run complete_line tau completion ""
  assert_output "$(printf 'bash\nzsh\nfish')"
}

@test "completing never runs the command" {
  make_demo_run "$BATS_TEST_TMPDIR/ws"
  run complete_line tau-submit "$BATS_TEST_TMPDIR/ws/run" --
  assert_success
  [ ! -e "$BATS_TEST_TMPDIR/ws/run/submissions/submission-0001" ]
}

# zsh_complete WORD...: what the zsh script offers for the last word, its compadd and _describe recorded (zsh
# filters by the typed prefix itself, so the whole list comes back)
zsh_complete() {
  zsh -c '
    autoload -U compinit && compinit -u -D
    source <(tau completion zsh) || exit 3
    compadd() { if (( ${argv[(I)-a]} )); then print -l -- ${(P)argv[-1]}; else print -l -- ${argv:#-*}; fi }
    _describe() { local a=${argv[3]}; print -l -- ${${(P)a}%%:*} }
    words=("$@")
    CURRENT=$#
    if [[ $1 == tau ]]; then _tau_completion; else _${1//-/_}_completion; fi
  ' zsh_complete "$@"
}

@test "zsh: the script parses, tau-observe completes its options, tau its commands and the rest of its line" {
  run bash -c 'tau completion zsh | zsh -n'
  assert_success
  run zsh_complete tau-observe --ku
  assert_success
  assert_output "--kubernetes"
  run zsh_complete tau ob
  assert_line "observe"
  assert_line "bundle-fetch"
  run zsh_complete tau observe --wa
  assert_output "--watch"
  run zsh_complete tau reconcile runs/demo -o ""
  assert_output "$(printf 'json\ntable')"
}

@test "fish: tau-observe completes its options, tau its commands and the rest of its line" {
  run fish -c 'tau completion fish | source; complete -C "tau-observe --ku"'
  assert_success
  assert_output --regexp '^--kubernetes'$'\t'
  run fish -c 'tau completion fish | source; complete -C "tau ob"'
  assert_output "observe"
  run fish -c 'tau completion fish | source; complete -C "tau observe --wa"'
  assert_output --regexp '^--watch'$'\t'
  run fish -c 'tau completion fish | source; complete -C "tau completion "'
  assert_output "$(printf 'bash\nfish\nzsh')"
}

@test "an unknown shell exits 2 with one JSON error" {
  run -2 --separate-stderr tau completion tcsh
  assert_output ""
  [ "$(jq -r '[.code, .error] | @tsv' <<<"$stderr")" = "$(printf '2\tusage')" ]
}
