function __tau_completion_delegate
    set -l before (commandline -opc)
    set -l line (string join -- ' ' (string escape -- tau-$before[2] $before[3..-1]))
    complete -C "$line "(commandline -ct)
end

complete -c tau -f -n "__fish_use_subcommand" -a "completion init submit attempt observe reconcile winner retry collect bundle-seal bundle-verify bundle-fetch site status logs cancel drive"
complete -c tau -f -n "__fish_seen_subcommand_from completion" -a "bash zsh fish"
complete -c tau -f -n "not __fish_use_subcommand; and not __fish_seen_subcommand_from completion" \
    -a "(__tau_completion_delegate)"
