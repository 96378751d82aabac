"""tau-submit: submit the first attempt of every shard."""

from __future__ import annotations

import click

from taulib.cli import common

EXAMPLE = """
tau-submit runs/demo
tau-submit runs/demo --limit 2 && tau-drive runs/demo --once   # a canary of two shards first
"""


@common.command("tau-submit", "Give every shard of RUN_DIR its first attempt and hand them to the run's executor "
                "(the local executor, or Slurm as one job array). Idempotent: a run already submitted is "
                "reported, not submitted again. --limit N or --shard S submits a canary first: only those shards; "
                "the next tau-submit submits the rest.", EXAMPLE)
@common.run_dir_argument
@click.option("--limit", type=click.IntRange(min=1), metavar="N",
              help="Submit only the first N shards that have no attempt yet (a canary); the rest wait for the next "
                   "tau-submit.")
@click.option("--shard", "shards", multiple=True, metavar="SHARD_ID", type=common.SHARD,
              help="Submit only these shards (an id or a number; repeatable; a canary); the rest wait for the next "
                   "tau-submit.")
def cli(run_dir: str, limit: int | None, shards: tuple[str, ...]) -> None:
    from taulib.lifecycle import retry
    from taulib.rundir.run import Run

    with Run(run_dir) as run:
        common.emit(retry.initial(run, limit=limit, shards=list(shards) or None))


main = common.main_for("tau-submit", cli)

if __name__ == "__main__":
    main()
