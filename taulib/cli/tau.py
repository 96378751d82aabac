"""tau: the front command; `tau X ARGS` runs `tau-X ARGS`, as git does. Its usage and dispatch come from the command
registry (`taulib.cli.registry`)."""

from __future__ import annotations

import importlib
import sys

from taulib import __version__
from taulib.cli import registry


def usage() -> str:
    width = max(len(c.name) for c in registry.COMMANDS) + 2
    lines = [f"  {c.name.ljust(width)}{c.summary}" for c in registry.COMMANDS]
    lines.append(f"  {registry.COMPLETION[0].ljust(width)}{registry.COMPLETION[1]}")
    return f"""usage: tau COMMAND [ARGS]...

Run large sharded batch jobs without a resident controller.

Commands:
{chr(10).join(lines)}

Example:
  tau observe runs/demo | tau reconcile runs/demo -o table
  eval "$(tau completion bash)"

'tau COMMAND --help' and 'man tau-COMMAND' tell more; 'man 5 tau-run' describes a run directory.
"""


def main() -> None:
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(usage())
        sys.exit(0 if args else 2)
    if args[0] == "--version":
        sys.stdout.write(f"tau {__version__}\n")
        sys.exit(0)
    name = args[0]
    if name == registry.COMPLETION[0]:
        sys.exit(_completion(args[1:]))
    if name == "bundle" and len(args) > 1 and registry.by_name(f"bundle-{args[1]}"):  # `tau bundle seal` too
        name, args = f"bundle-{args[1]}", [f"bundle-{args[1]}"] + args[2:]
    command = registry.by_name(name)
    if command is None:
        from taulib.cli import common

        common.write_error("tau", 2, f"'{name}' is not a tau command; see 'tau --help'")
        sys.exit(2)
    module = importlib.import_module(command.module)
    sys.argv = [command.program] + args[1:]
    module.main()


def _completion(args: list[str]) -> int:
    """`tau completion SHELL`: print the script to source (exit 2 with one JSON error on a wrong shell)."""
    from taulib.cli import common, completion

    if len(args) != 1 or args[0] not in completion.SHELLS:
        common.write_error("tau", 2, "usage: tau completion bash|zsh|fish (then source its output, for example "
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
