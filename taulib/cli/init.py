"""tau-init: create a run directory from a plan on standard input."""

from __future__ import annotations

from taulib.cli import common

EXAMPLE = """
echo '{"records": 800, "shards": 8, "command": ["python3", "client.py"]}' | tau-init runs/demo
"""


@common.command("tau-init", "Create the run RUN_DIR from the plan (JSON) on standard input. Re-running with the "
                "same plan is a no-op; a different plan for an existing run is refused (exit 73).", EXAMPLE)
@common.run_dir_argument
def cli(run_dir: str) -> None:
    from taulib.lifecycle import init as runlib

    request = common.read_stdin_json("plan on standard input")
    common.emit(runlib.init(run_dir, request))


main = common.main_for("tau-init", cli)

if __name__ == "__main__":
    main()
