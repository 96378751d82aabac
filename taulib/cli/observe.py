"""tau-observe: ask the executor about a run's live attempts, or ask Kubernetes why a workload is where it is."""

from __future__ import annotations

from typing import Any

import click

from taulib.cli import common
from taulib.errors import UsageError

EXAMPLE = """
tau-observe runs/demo | tau-reconcile runs/demo | jq -r .state
tau-observe --kubernetes train-7 -n team-a | jq -r '.state, .reason'
tau-observe --kubernetes train-7 -n team-a -o table --watch
"""


@common.command("tau-observe", "Read-only. With RUN_DIR: ask the executor of the run (the local executor's records, "
                "or squeue and sacct) about every live attempt, and print one normalised tau.observations document "
                "for tau-reconcile. With --kubernetes NAME: read the Job and the RayJob of that name, their Kueue "
                "Workloads and their pods, and print one status snapshot (schemaVersion v1alpha1): state, "
                "degraded and why, phases, Kueue admission, nodes, and every container's readiness, restarts "
                "and exit codes. Every Kubernetes read is classified observed, notFound or unavailable (a denied "
                "read is never 'not found').", EXAMPLE)
@click.argument("run_dir", metavar="[RUN_DIR]", required=False, type=click.Path(file_okay=False, path_type=str))
@click.option("--kubernetes", "workload", metavar="NAME",
              help="Observe the Job and/or RayJob NAME instead of a run (kubeconfig from KUBECONFIG or "
                   "~/.kube/config, else the in-cluster service account).")
@click.option("-n", "--namespace", metavar="NS", help="With --kubernetes: the namespace (default: the "
              "kubeconfig context's).")
@common.output_option
@click.option("--watch", is_flag=True, help="With --kubernetes -o table: re-render whenever the snapshot changes, "
              "until the workload succeeds, fails or is not found (or until interrupted).")
@click.option("--interval", type=click.FloatRange(0.1, 3600), default=2.0, show_default=True, metavar="SECONDS",
              help="With --watch: seconds between reads.")
@click.option("--request-timeout", "timeout", type=click.FloatRange(0.2, 600), default=10.0, show_default=True,
              metavar="SECONDS", help="With --kubernetes: the longest wait for one answer of the API server.")
def cli(run_dir: str | None, workload: str | None, namespace: str | None, output: str, watch: bool,
        interval: float, timeout: float) -> None:
    if (run_dir is None) == (workload is None):
        raise UsageError("give either RUN_DIR or --kubernetes NAME")
    if workload is None:
        for given, option in ((namespace, "--namespace"), (watch or None, "--watch")):
            if given is not None:
                raise UsageError(f"{option} goes with --kubernetes")
        _observe_run(run_dir, output)  # type: ignore[arg-type]
        return
    if watch and output != "table":
        raise UsageError("--watch renders a table for people: add -o table (for programs, call tau-observe "
                         "--kubernetes once per poll)")
    from taulib.k8s import observe, render

    if watch:
        from taulib.k8s import status

        common.watch(lambda: observe.observe(workload, namespace, timeout=timeout), render.snapshot,
                     lambda doc: doc["lifecycle"] in status.TERMINAL, interval, "the workload")
    elif output == "table":
        common.emit_text(render.snapshot(observe.observe(workload, namespace, timeout=timeout)))
    else:
        common.emit(_validated(observe.observe(workload, namespace, timeout=timeout)))


def _observe_run(run_dir: str, output: str) -> None:
    from taulib import table
    from taulib.lifecycle import observe
    from taulib.rundir.run import Run

    with Run(run_dir) as run:
        doc = observe.observed(run)
    if output == "table":
        common.emit_text(table.observations(doc))
    else:
        common.emit(doc)


def _validated(doc: dict[str, Any]) -> dict[str, Any]:
    from taulib import schema

    schema.validate(doc, "workload-status", "the workload status snapshot")
    return doc


main = common.main_for("tau-observe", cli)

if __name__ == "__main__":
    main()
