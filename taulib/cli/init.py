"""tau-init: create a run directory from a plan on standard input."""

from __future__ import annotations

import click

from taulib.cli import common

EXAMPLE = """
echo '{"records": 800, "shards": 8, "command": ["python3", "client.py"]}' | tau-init runs/demo
tau-init runs/demo-2 --from runs/demo < fixed-plan.json && tau-submit runs/demo-2   # reuse demo's good winners
echo '{"input": {"path": "prompts/"}, "shards": 64, "command": ["python3", "answer.py"]}' | tau-init runs/answers
"""


@common.command("tau-init", "Create the run RUN_DIR from the plan (JSON) on standard input. Re-running with the "
                "same plan is a no-op; a different plan for an existing run is refused (exit 73). A plan over an "
                "input dataset (Parquet, JSON lines, CSV) has it read once here: its rows counted and checked, its "
                "files and pieces hashed into the run's input index, which every attempt verifies as it cuts its "
                "rows. With --from OLD_RUN, every winner of OLD_RUN whose shard has the same record range (and, when "
                "the plan declares an output schema, its columns; over an input, the same input pieces) is adopted: "
                "copied and checked against the new run's rules by a local submission; tau-submit then runs only "
                "the rest. OLD_RUN is never changed.",
                EXAMPLE)
@common.run_dir_argument
@click.option("--from", "old", metavar="OLD_RUN",
              type=click.Path(file_okay=False, path_type=str),
              help="A run whose valid winners the new run reuses (see tau-init(1) 'A new run from an old one').")
@click.option("--check-image", is_flag=True,
              help="Also check that each image of the plan is present (or can be pulled by its digest) and is the "
                   "one pinned, through its runtime (see tau-init(1) 'The pre-flight').")
def cli(run_dir: str, old: str | None, check_image: bool) -> None:
    from taulib.lifecycle import adopt

    request = common.read_stdin_json("plan on standard input")
    common.emit(adopt.create(run_dir, request, old, check_image))


main = common.main_for("tau-init", cli)

if __name__ == "__main__":
    main()
