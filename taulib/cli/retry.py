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
@click.option("--mem", metavar="SIZE", callback=lambda ctx, param, value: _spelt(value, "mem"),
              help="Grant the named shards' new attempts this much memory (Slurm's spelling: 4096, 512M, 4G), "
                   "instead of what retry.escalate would ask; recorded in the submission, shown by tau-status.")
@click.option("--time", "time_limit", metavar="LIMIT", callback=lambda ctx, param, value: _spelt(value, "time"),
              help="Grant the named shards' new attempts this time limit (Slurm's spelling: 30:00, 2:00:00, "
                   "1-00:00:00), likewise.")
def cli(run_dir: str, shards: tuple[str, ...], reopen: bool, mem: str | None, time_limit: str | None) -> None:
    from taulib.lifecycle import retry
    from taulib.rundir.run import Run

    with Run(run_dir) as run:
        common.emit(retry.retry(run, list(shards) or None, reopen=reopen, grant={"mem": mem, "time": time_limit}))


def _spelt(value: str | None, what: str) -> str | None:
    """A granted --mem or --time, in Slurm's spelling as escalation reads it (a usage error else)."""
    if value is None:
        return None
    from taulib.rules import escalation

    try:
        amount = (escalation.mem_mib if what == "mem" else escalation.time_seconds)(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if not amount:
        raise click.BadParameter(f"{value!r} grants nothing (Slurm reads a zero --{what} as no limit at all)")
    return value


main = common.main_for("tau-retry", cli)

if __name__ == "__main__":
    main()
