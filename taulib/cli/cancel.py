"""tau-cancel: cancel a run, or named shards of it: a durable record first, then the live attempts stopped."""

from __future__ import annotations

import click

from taulib.cli import common

EXAMPLE = """
tau-cancel runs/demo
tau-cancel runs/demo --shard shard-00003 --shard shard-00004 -o table
tau-cancel runs/demo --shard shard-00013 --attempt && tau-retry runs/demo --shard shard-00013
"""


@common.command("tau-cancel", "Cancel RUN_DIR (or only the shards named with --shard): record the cancellation, under "
                "the run's locks, then stop their live attempts (their process groups under the local executor; "
                "scancel of their exact job and array task ids under Slurm). Cancelled shards end 'cancelled'; "
                "tau-submit, tau-retry and the local executor never start them again; shards with a winner keep it. "
                "With --attempt, only the live attempt of each named shard is stopped: it ends failed ('stopped by "
                "the user') and its shard stays retryable within its budget. What already ended is left alone and "
                "said so (noop). Running it again is harmless; tau-retry --reopen lifts a cancellation.", EXAMPLE)
@common.run_dir_argument
@click.option("--shard", "shards", multiple=True, metavar="SHARD_ID", type=common.SHARD,
              help="Cancel only these shards (an id or a number; repeatable); default: the whole run.")
@click.option("--attempt", is_flag=True,
              help="Stop the live attempt of each shard named with --shard, without cancelling the shard.")
@common.output_option
def cli(run_dir: str, shards: tuple[str, ...], attempt: bool, output: str) -> None:
    from taulib import table
    from taulib.errors import Unavailable
    from taulib.lifecycle import cancel
    from taulib.rundir.run import Run

    with Run(run_dir) as run:
        result = cancel.cancel(run, list(shards) or None, attempt=attempt)
    if output == "table":
        done = ("asked" if result["scope"] == "attempts" else f"cancelled {len(result['cancelled'])} shard(s) of")
        head = (f"{result['noop']}\n" if result["noop"] else
                f"{done} run {result['run_id']} at {result['requested_at']}"
                f"; stopped {len(result['stopped'])} live attempt(s)"
                + (f"; {len(result['sealed'])} shard(s) already had a winner" if result["sealed"] else "")
                + (f"; {len(result['ended'])} shard(s) had no live attempt" if result["ended"] else "") + "\n")
        rows = [[s["shard_id"], s["attempt_id"], f"{s['scheduler']['executor']} {s['scheduler']['job_id']}_"
                 f"{s['scheduler']['task_index']}"] for s in result["stopped"]]
        common.emit_text(head + ("\n" + table.render(["SHARD", "ATTEMPT", "STOPPED"], rows) if rows else ""))
    else:
        common.emit(result)
    if result["problem"]:
        raise Unavailable(result["problem"])


main = common.main_for("tau-cancel", cli)

if __name__ == "__main__":
    main()
