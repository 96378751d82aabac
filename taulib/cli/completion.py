"""Shell completion for every tau command (`tau completion bash|zsh|fish`).

Each tau-X command completes through click's own protocol: the shell calls `tau-X` again with
`_TAU_X_COMPLETE=<shell>_complete` and the words typed so far, and the command answers with its options, choices and
paths (nothing else runs, nothing is written). `script(shell)` is the text to source: click's completion source for
every tau-X command, then one for the front command `tau`, which completes the command names and hands the rest of
the line to the command it names.
"""

from __future__ import annotations

import importlib

from taulib.cli import registry
from taulib.errors import UsageError

SHELLS = ("bash", "zsh", "fish")


def complete_var(command: str) -> str:
    """The environment variable click reads for `command` (tau-bundle-fetch -> _TAU_BUNDLE_FETCH_COMPLETE)."""
    return f"_{command}_COMPLETE".replace("-", "_").upper()


def script(shell: str) -> str:
    from click.shell_completion import get_completion_class

    if shell not in SHELLS:
        raise UsageError(f"completion is for {', '.join(SHELLS)}, not {shell!r}")
    cls = get_completion_class(shell)
    parts = []
    for command in registry.COMMANDS:
        cli = importlib.import_module(command.module).cli
        parts.append(cls(cli, {}, command.program, complete_var(command.program)).source())
    names = [registry.COMPLETION[0], *(c.name for c in registry.COMMANDS)]
    parts.append(_FRONT[shell].replace("@COMMANDS@", " ".join(names)))
    return "\n".join(parts)


_BASH_FRONT = r"""_tau_completion() {
    local IFS=$'\n'
    local commands="@COMMANDS@" response completion type value
    if (( COMP_CWORD == 1 )); then
        COMPREPLY=($(IFS=' ' compgen -W "$commands --help --version" -- "${COMP_WORDS[1]}"))
        return 0
    fi
    local sub=${COMP_WORDS[1]}
    if [[ $sub == completion ]]; then
        (( COMP_CWORD == 2 )) && COMPREPLY=($(IFS=' ' compgen -W "bash zsh fish" -- "${COMP_WORDS[2]}"))
        return 0
    fi
    [[ " $commands " == *" $sub "* ]] || return 0
    local var="_TAU_${sub^^}_COMPLETE"
    local -a words=("tau-$sub" "${COMP_WORDS[@]:2}")
    response=$(env COMP_WORDS="${words[*]}" COMP_CWORD=$((COMP_CWORD - 1)) "${var//-/_}=bash_complete" "tau-$sub")
    for completion in $response; do
        IFS=',' read type value <<< "$completion"
        if [[ $type == 'dir' ]]; then
            COMPREPLY=()
            compopt -o dirnames
        elif [[ $type == 'file' ]]; then
            COMPREPLY=()
            compopt -o default
        elif [[ $type == 'plain' ]]; then
            COMPREPLY+=($value)
        fi
    done
    return 0
}

complete -o nosort -F _tau_completion tau
"""

_ZSH_FRONT = r"""_tau_completion() {
    local -a tau_commands=(${=:-@COMMANDS@})
    if (( CURRENT == 2 )); then
        compadd -a tau_commands
        return
    fi
    local sub=${words[2]}
    if [[ $sub == completion ]]; then
        (( CURRENT == 3 )) && compadd bash zsh fish
        return
    fi
    (( ${tau_commands[(Ie)$sub]} )) || return 1
    words=("tau-$sub" "${(@)words[3,-1]}")
    (( CURRENT-- ))
    _tau_${sub//-/_}_completion
}

compdef _tau_completion tau
"""

_FISH_FRONT = r"""function __tau_completion_delegate
    set -l before (commandline -opc)
    set -l line (string join -- ' ' (string escape -- tau-$before[2] $before[3..-1]))
    complete -C "$line "(commandline -ct)
end

complete -c tau -f -n "__fish_use_subcommand" -a "@COMMANDS@"
complete -c tau -f -n "__fish_seen_subcommand_from completion" -a "bash zsh fish"
complete -c tau -f -n "not __fish_use_subcommand; and not __fish_seen_subcommand_from completion" \
    -a "(__tau_completion_delegate)"
"""

_FRONT = {"bash": _BASH_FRONT, "zsh": _ZSH_FRONT, "fish": _FISH_FRONT}
