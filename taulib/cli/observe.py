"""tau-observe: ask the executor about the run's live attempts and print normalised observations."""

from __future__ import annotations

from taulib.cli import common

EXAMPLE = """
tau-observe runs/demo | tau-reconcile runs/demo | jq -r .state
"""


@common.command("tau-observe", "Read-only: ask the executor of RUN_DIR (the local executor's records, or squeue and "
                "sacct) about every live attempt, and print one normalised tau.observations document for "
                "tau-reconcile.", EXAMPLE)
@common.run_dir_argument
def cli(run_dir: str) -> None:
    from taulib import locks, observe
    from taulib.run import Run

    with Run(run_dir) as run, locks.hold(run.dir, "run", shared=True):
        common.emit(observe.observe(run))


main = common.main_for("tau-observe", cli)

if __name__ == "__main__":
    main()
