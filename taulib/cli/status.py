"""tau-status: the run's status now, read-only: the executor asked, the rules applied, nothing written."""

from __future__ import annotations

import click

from taulib.cli import common

EXAMPLE = """
tau-status runs/demo -o table
tau-status runs/demo | jq -r '.shards[] | select(.state=="failed") | .log'
tau-status runs/demo -o table --watch
"""


@common.command("tau-status", "Read-only: ask the run's executor about its live attempts and derive the run's status "
                "with the same rules as tau-reconcile, writing nothing. Per shard: its state and why, attempts used of "
                "its budget, the progress and heartbeat age of a running attempt, the log of a failed one; per run: "
                "the counts, the retry budget, a cancellation, a submission waiting on its visibility deadline, the "
                "collections, and an estimate of the time left.", EXAMPLE)
@common.run_dir_argument
@common.output_option
@click.option("--watch", is_flag=True, help="With -o table: render again whenever the status changes, until the "
              "run has succeeded, failed or been cancelled and none of its attempts is still submitted or running "
              "(or until interrupted); the last frame is read after that.")
@click.option("--interval", type=click.FloatRange(0.5, 3600), default=5.0, show_default=True, metavar="SECONDS",
              help="With --watch: seconds between looks.")
def cli(run_dir: str, output: str, watch: bool, interval: float) -> None:
    from taulib import table
    from taulib.errors import UsageError
    from taulib.lifecycle import status
    from taulib.rules import rollup
    from taulib.rundir.run import Run

    if watch and output != "table":
        raise UsageError("--watch renders a table for people: add -o table (for programs, call tau-status once per "
                         "poll)")
    with Run(run_dir) as run:
        if watch:
            common.watch(lambda: status.status(run), table.status,
                         lambda doc: rollup.settled(doc["state"], doc["shards"]), interval, "the run")
        elif output == "table":
            common.emit_text(table.status(status.status(run)))
        else:
            common.emit(status.status(run))


main = common.main_for("tau-status", cli)

if __name__ == "__main__":
    main()
