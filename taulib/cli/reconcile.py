"""tau-reconcile: apply observations from standard input under locks and print the run status."""

from __future__ import annotations

import click

from taulib.cli import common

EXAMPLE = """
tau-observe runs/demo | tau-reconcile runs/demo -o table
tau-observe runs/demo | tau-reconcile runs/demo --status-file runs/demo.status.json >/dev/null
tau-observe runs/demo | tau-reconcile runs/demo | jq -r '.shards[] | select(.state=="failed") | .id'
"""


@common.command("tau-reconcile", "Apply the tau.observations document on standard input (from tau-observe) to "
                "RUN_DIR under its locks, then print the run status: the run's state, counts by state, and per "
                "shard its state, newest attempt, winner and the evidence behind them.", EXAMPLE)
@common.run_dir_argument
@common.output_option
@click.option("--status-file", "status_file", metavar="PATH", default=None,
               help="Also write the status (the JSON document, whatever -o says) to PATH, atomically and 0600: a "
                    "private temp file renamed over PATH, under the run's status lock, so that readers of PATH "
                    "never see a partial or an older status. PATH is outside the run directory (RUN.status.json).")
def cli(run_dir: str, output: str, status_file: str | None) -> None:
    import sys

    from taulib.errors import UsageError
    from taulib.lifecycle import reconcile
    from taulib.rundir.run import Run

    if sys.stdin is not None and sys.stdin.isatty():
        raise UsageError("tau-reconcile applies the output of tau-observe, on standard input: tau-observe RUN | "
                         "tau-reconcile RUN (for the status without changing anything: tau-status RUN)")
    doc = reconcile.validate_document(common.read_stdin_json("observations on standard input"))
    with Run(run_dir) as run:
        status = reconcile.apply(run, doc, status_file)
    if output == "table":
        from taulib import table

        common.emit_text(table.status(status))
    else:
        common.emit(status)


main = common.main_for("tau-reconcile", cli)

if __name__ == "__main__":
    main()
