"""tau-submit: submit the first attempt of every shard."""

from __future__ import annotations

from taulib.cli import common

EXAMPLE = """
tau-submit runs/demo
"""


@common.command("tau-submit", "Give every shard of RUN_DIR its first attempt and hand them to the run's executor "
                "(the local executor, or Slurm as one job array). Idempotent: a run already submitted is "
                "reported, not submitted again.", EXAMPLE)
@common.run_dir_argument
def cli(run_dir: str) -> None:
    from taulib.lifecycle import retry
    from taulib.rundir.run import Run

    with Run(run_dir) as run:
        common.emit(retry.initial(run))


main = common.main_for("tau-submit", cli)

if __name__ == "__main__":
    main()
