"""tau: the front command; `tau X ARGS` runs `tau-X ARGS`, as git does."""

from __future__ import annotations

import importlib
import sys

from taulib import __version__

COMMANDS = ("init", "submit", "attempt", "observe", "reconcile", "winner", "retry", "collect", "bundle-seal",
            "bundle-verify", "bundle-fetch")
USAGE = """usage: tau COMMAND [ARGS]...

Run large sharded batch jobs without a resident controller.

Commands:
  init           create a run from a plan on standard input
  submit         submit the first attempt of every shard
  attempt        the in-allocation side (run by the executor)
  observe        print normalised observations of the live attempts
  reconcile      apply observations from standard input; print the run status
  winner         validate candidates and publish each shard's winner
  retry          submit new attempts for retryable shards
  collect        merge every winner into one dataset
  bundle-seal    seal an output tree as a generation's bundle (and upload it)
  bundle-verify  check a bundle, local or on Blob storage, against its acknowledgement
  bundle-fetch   download a complete, verified bundle from Blob storage
  completion     print the shell completion of every tau command (bash, zsh or fish)

Example:
  tau observe runs/demo | tau reconcile runs/demo -o table
  eval "$(tau completion bash)"

'tau COMMAND --help' and 'man tau-COMMAND' tell more; 'man 5 tau-run' describes a run directory.
"""


def main() -> None:
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        sys.exit(0 if args else 2)
    if args[0] == "--version":
        sys.stdout.write(f"tau {__version__}\n")
        sys.exit(0)
    name = args[0]
    if name == "completion":
        sys.exit(_completion(args[1:]))
    if name == "bundle" and len(args) > 1 and f"bundle-{args[1]}" in COMMANDS:  # `tau bundle seal` too
        name, args = f"bundle-{args[1]}", [f"bundle-{args[1]}"] + args[2:]
    if name not in COMMANDS:
        from taulib.cli import common

        common._write_error("tau", 2, f"'{name}' is not a tau command; see 'tau --help'")
        sys.exit(2)
    module = importlib.import_module(f"taulib.cli.{name.replace('-', '_')}")
    sys.argv = [f"tau-{name}"] + args[1:]
    module.main()


def _completion(args: list[str]) -> int:
    """`tau completion SHELL`: print the script to source (exit 2 with one JSON error on a wrong shell)."""
    from taulib.cli import common, completion

    if len(args) != 1 or args[0] not in completion.SHELLS:
        common._write_error("tau", 2, "usage: tau completion bash|zsh|fish (then source its output, for example "
                            "eval \"$(tau completion bash)\" in ~/.bashrc)")
        return 2
    try:
        sys.stdout.write(completion.script(args[0]))
        sys.stdout.flush()
    except BrokenPipeError:
        return common.EPIPE_EXIT
    return 0


if __name__ == "__main__":
    main()
