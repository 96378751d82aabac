"""tau-drive: keep a run moving (observe, reconcile, publish, stop stalls, retry, submit) until it is finished."""

from __future__ import annotations

import sys

from typing import Any

import click

from taulib.cli import common

EXAMPLE = """
tau-drive runs/demo --collect runs/demo-dataset            # in the foreground, until the run is finished
*/5 * * * * tau-drive runs/demo --once --status-file runs/demo.status.json >/dev/null   # or from cron
tau-drive runs/demo --notify 'mail -s "tau: $TAU_RUN_ID $TAU_DRIVE_EVENT" me@example.org'
"""


@common.command("tau-drive", "Drive RUN_DIR: each cycle observes and reconciles it, publishes the winners of its "
                "candidates, stops the attempts the plan stops when stalled, submits it when it was never "
                "submitted and what the scheduler's limits deferred, and retries its retryable shards within the "
                "budget: the plumbing's own library calls, in their order. It cycles until the run succeeded or "
                "stopped (budget, cancellation, exhausted shards), then prints the last cycle's result; --once "
                "does one cycle (the cron line, the epilog). Cycles of one run take turns; a caller whose request a "
                "cycle that began after it already served does not run another. Exits 1 when the run finished "
                "without succeeding.", EXAMPLE)
@common.run_dir_argument
@click.option("--once", is_flag=True, help="One cycle, then print its result (exit 0 whatever the run's state).")
@click.option("--interval", type=click.FloatRange(0.1, 3600), default=10.0, show_default=True, metavar="SECONDS",
              help="Seconds between cycles in the foreground.")
@click.option("--notify", metavar="COMMAND",
              help="Run COMMAND (with /bin/sh) once per change a person is owed: the run done or stopped, a shard "
                   "exhausted; the status JSON on its standard input, TAU_DRIVE_EVENT, TAU_DRIVE_SHARD, TAU_RUN_DIR "
                   "and TAU_RUN_ID in its environment.")
@click.option("--status-file", metavar="PATH",
              help="Also write each cycle's status to PATH (outside the run; atomically, as tau-reconcile does).")
@click.option("--collect", "destination", metavar="DESTINATION",
              help="Once the run succeeded, collect it to DESTINATION (as tau-collect --destination; --wait under "
                   "Slurm); a destination that already holds this collection is reported, not redone.")
@click.option("--allow-missing", is_flag=True,
              help="With --collect: once the run finished without succeeding, collect the winners there are, the "
                   "missing shards recorded (as tau-collect --allow-missing).")
@common.progress_option
@common.output_option
def cli(run_dir: str, once: bool, interval: float, notify: str | None, status_file: str | None,
        destination: str | None, allow_missing: bool, progress: bool | None, output: str) -> None:
    from taulib import progress as meter
    from taulib import table
    from taulib.errors import CheckFailed, UsageError
    from taulib.lifecycle import drive
    from taulib.rundir.run import Run

    if allow_missing and destination is None:
        raise UsageError("--allow-missing says how --collect collects: give --collect DESTINATION too")
    shown = _line if meter.enabled(progress) else None
    collect = None if destination is None else drive.Collect(destination, allow_missing, progress)
    with Run(run_dir) as run:
        if once:
            result = drive.once(run, notify, status_file, shown, collect=collect)
        else:
            result = drive.drive(run, interval, notify, status_file, shown, hitch=_hitch, collect=collect)
    if output == "table":
        common.emit_text(f"tau-drive: run {result['run_id']} {_finished(result)}\n\n" + table.status(result["status"]))
    else:
        common.emit(result)
    if not once and result["state"] != "succeeded":
        raise CheckFailed(f"run {result['run_id']!r} finished without succeeding: {result['finished']}")


def _finished(result: dict[str, Any]) -> str:
    return f"finished: {result['finished']}" if result["finished"] else f"{result['state']} (not finished)"


def _hitch(exc: Exception) -> None:
    """A cycle that will be tried again: said on standard error (a person or a log should know why it waits)."""
    print(f"tau-drive: {getattr(exc, 'message', exc)}; trying again", file=sys.stderr, flush=True)


def _line(result: dict[str, Any]) -> None:
    """One line per cycle on standard error, for a person watching."""
    counts = result["status"]["counts"]
    parts = [f"{n} {state}" for state, n in counts.items() if n]
    actions = result["actions"] or {}
    done = []
    if actions.get("winners"):
        done.append(f"published {len(actions['winners'])} winner(s)")
    if actions.get("stopped"):
        done.append(f"stopped {len(actions['stopped'])} stalled attempt(s)")
    for sub in actions.get("submitted", []):
        done.append(f"submitted {sub['tasks']} task(s) ({sub['purpose']})")
    done += [f"notified {n['event']}" for n in result["notified"]]
    print(f"tau-drive: {result['run_id']} {result['state']}: {', '.join(parts)}"
          + (f"; {'; '.join(done)}" if done else ""), file=sys.stderr, flush=True)


main = common.main_for("tau-drive", cli)

if __name__ == "__main__":
    main()
