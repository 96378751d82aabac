"""tau-attempt: the in-allocation side of a shard attempt."""

from __future__ import annotations

import click

from taulib.cli import common

EXAMPLE = """
# in an sbatch script (one array task per shard):
tau-attempt run "$RUN_DIR" --submission submission-0001
"""


@click.group(name="tau-attempt", help="The in-allocation side: run by the executor inside each allocation, never by "
             "hand.", epilog="\b\nExample:\n" + "\n".join("  " + line for line in EXAMPLE.strip().splitlines())
             + "\n\nExit codes and records: man tau-attempt; man 5 tau-run.",
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__import__("taulib").__version__, "--version", prog_name="tau-attempt",
                      message="%(prog)s %(version)s")
def cli() -> None:
    pass


@cli.command("run", help="Fence this allocation against the persisted attempt of its task (exit 77 and write "
             "nothing when it is late or a duplicate), mark the attempt running, write readiness, run the "
             "client, record its result and candidate manifest, and publish the shard's winner.",
             epilog="\b\nExample:\n  tau-attempt run runs/demo --submission submission-0001")
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False, path_type=str))
@click.option("--submission", "submission_id", required=True, metavar="SUBMISSION_ID",
              help="The submission whose task this allocation runs (the task index comes from the scheduler).")
@click.option("--no-winner", is_flag=True, help="Do not publish the winner here; leave it to tau-winner.")
def run_cmd(run_dir: str, submission_id: str, no_winner: bool) -> None:
    import os
    import signal

    from taulib.lifecycle import attempt, client
    from taulib.errors import CheckFailed

    try:
        summary = attempt.run_task(run_dir, submission_id, publish_winner=not no_winner)
    except client.Interrupted as exc:  # end by the signal that stopped the allocation, as the client did
        signal.signal(exc.signum, signal.SIG_DFL)
        os.kill(os.getpid(), exc.signum)
        raise
    common.emit(summary)
    if summary["state"] != "succeeded":
        raise CheckFailed(f"attempt {summary['shard_id']}/{summary['attempt_id']} failed: {summary['error']}")


main = common.main_for("tau-attempt", cli, by_signal=True)  # a stop ends it by its signal, wherever it lands

if __name__ == "__main__":
    main()
