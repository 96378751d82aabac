"""tau-retry: new attempts for the run's retryable shards, as one sparse submission."""

from __future__ import annotations

import click

from taulib.cli import common

EXAMPLE = """
tau-observe runs/demo | tau-reconcile runs/demo >/dev/null && tau-retry runs/demo
tau-retry runs/demo --shard shard-00003
tau-retry runs/demo --shard shard-00013 --reopen
tau-retry runs/demo --shard 7 --mem 1G --time 2:00:00
"""


@common.command("tau-retry", "Submit a new attempt for every retryable shard of RUN_DIR (no winner, newest attempt "
                "failed or unknown). Sealed shards are never touched; running it again, or concurrently, "
                "submits nothing twice. When nothing is submitted, reason says why (exhausted shards are named in "
                "exhausted).", EXAMPLE)
@common.run_dir_argument
@click.option("--shard", "shards", multiple=True, metavar="SHARD_ID", type=common.SHARD,
              help="Retry only these shards (an id or a number; repeatable); shards that are not retryable are "
                   "reported as skipped.")
@click.option("--reopen", is_flag=True,
              help="First lift the cancellation of the shards named with --shard (none named: of the whole run), "
                   "recorded with who and when; then retry them.")
@click.option("--mem", metavar="SIZE",
              help="Grant the named shards' new attempts this much memory (Slurm's spelling: 4096, 512M, 4G), "
                   "instead of what retry.escalate would ask; recorded in the submission, shown by tau-status.")
@click.option("--time", "time_limit", metavar="LIMIT",
              help="Grant the named shards' new attempts this time limit (Slurm's spelling: 30:00, 2:00:00, "
                   "1-00:00:00), likewise.")
def cli(run_dir: str, shards: tuple[str, ...], reopen: bool, mem: str | None, time_limit: str | None) -> None:
    from taulib.lifecycle import retry
    from taulib.rundir.run import Run

    with Run(run_dir) as run:
        common.emit(retry.retry(run, list(shards) or None, reopen=reopen, grant={"mem": mem, "time": time_limit}))


main = common.main_for("tau-retry", cli)

if __name__ == "__main__":
    main()
