"""tau-reconcile: apply observations from standard input under locks and print the run status."""

from __future__ import annotations

from taulib.cli import common

EXAMPLE = """
tau-observe runs/demo | tau-reconcile runs/demo -o table
tau-observe runs/demo | tau-reconcile runs/demo | jq -r '.shards[] | select(.state=="failed") | .id'
"""


@common.command("tau-reconcile", "Apply the tau.observations document on standard input (from tau-observe) to "
                "RUN_DIR under its locks, then print the run status: the run's state, counts by state, and per "
                "shard its state, newest attempt, winner and the evidence behind them.", EXAMPLE)
@common.run_dir_argument
@common.output_option
def cli(run_dir: str, output: str) -> None:
    import sys

    from taulib.errors import UsageError
    from taulib.lifecycle import reconcile
    from taulib.rundir.run import Run

    if sys.stdin is not None and sys.stdin.isatty():
        raise UsageError("tau-reconcile applies the output of tau-observe, on standard input: tau-observe RUN | "
                         "tau-reconcile RUN (for the status without changing anything: tau-status RUN)")
    doc = reconcile.validate_document(common.read_stdin_json("observations on standard input"))
    with Run(run_dir) as run:
        status = reconcile.apply(run, doc)
    if output == "table":
        from taulib import table

        common.emit_text(table.status(status))
    else:
        common.emit(status)


main = common.main_for("tau-reconcile", cli)

if __name__ == "__main__":
    main()
