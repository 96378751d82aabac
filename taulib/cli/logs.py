"""tau-logs: an attempt's output: the client's, and the allocation's own output file."""

from __future__ import annotations

import click

from taulib.cli import common

EXAMPLE = """
tau-logs runs/demo shard-00003
tau-logs runs/demo shard-00003 --attempt attempt-0001 | tail -n 20
tau-logs runs/demo 5 --follow
tau-logs runs/demo 5 --service generator-2 --follow
tau-logs runs/demo 5 --latest-with-output     # its newest attempt is still queued: the one before it
"""


@common.command("tau-logs", "Print the output of SHARD_ID's newest attempt (or of --attempt; SHARD_ID is an id or a "
                "number: shard-00003 or 3): the client's stdout and stderr (client.log), then the allocation's own "
                "output (under Slurm its slurm-JOB_TASK.out), each headed by its path when both have something; with "
                "--service, one service backend's output instead. An attempt without output yet (still queued) is "
                "said so on stderr, with its state, exit 0. --follow streams what is appended while the attempt is "
                "live and ends when it ends.", EXAMPLE)
@common.run_dir_argument
@click.argument("shard", metavar="SHARD_ID", type=common.SHARD)
@click.option("--attempt", "attempt_id", metavar="ATTEMPT_ID", help="This attempt instead of the newest one.")
@click.option("--service", "service", metavar="NAME[-K]",
              help="The output of backend K of service NAME (NAME alone: a service of one backend) instead.")
@click.option("--latest-with-output", is_flag=True,
              help="When the newest attempt has no output yet, the newest one that has (said on stderr).")
@click.option("--follow", is_flag=True, help="Keep printing what is appended until the attempt has ended.")
@click.option("-o", "--output", "output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text for people and tail; json for programs (the paths and what they hold).")
def cli(run_dir: str, shard: str, attempt_id: str | None, service: str | None, latest_with_output: bool,
        follow: bool, output: str) -> None:
    import sys

    from taulib.errors import UsageError
    from taulib.lifecycle import logs
    from taulib.rundir.run import Run

    if follow and output == "json":
        raise UsageError("--follow streams text: drop -o json")
    if latest_with_output and attempt_id is not None:
        raise UsageError("--attempt names the attempt to show: drop --latest-with-output")
    if latest_with_output and follow:
        raise UsageError("--follow waits for the newest attempt's output: drop --latest-with-output")
    with Run(run_dir) as run:
        if follow:
            logs.stream(run, shard, attempt_id, service, common.emit_bytes)
            sys.stdout.flush()
            return
        shown = logs.render(run, shard, attempt_id, service, latest_with_output)
    if shown.note is not None:
        print(f"tau-logs: {shown.note}", file=sys.stderr, flush=True)
    if output == "json":
        common.emit(shown.document())
    else:
        common.emit_bytes(shown.text())
        sys.stdout.flush()


main = common.main_for("tau-logs", cli)

if __name__ == "__main__":
    main()
