"""tau-collect: merge every shard's winner into one dataset at an authorised destination."""

from __future__ import annotations

import click

from taulib.cli import common
from taulib.collect import formats

EXAMPLE = """
tau-collect runs/demo --destination runs/demo-dataset
tau-collect runs/demo --destination runs/demo-csv --format csv --rows-per-partition 100000   # another shape
tau-collect runs/demo --destination runs/demo-dataset --wait -o table   # a Slurm run: wait for the CPU job
tau-collect runs/demo --destination runs/demo-partial --allow-missing   # the winners there are; the rest recorded
tau-collect runs/demo --destination runs/demo-dataset --tasks 8 --wait   # 8 array tasks (local: 8 processes)
tau-collect runs/demo --destination runs/demo-dataset --upload https://acct.blob.core.windows.net/data/demo
tau-collect runs/demo --destination runs/demo-shared --group-readable   # the group reads it: 0750, 0640
"""


@common.command("tau-collect", "Validate every shard's winner, then stream the winners in planned order into a "
                "deterministic dataset (the run's output format and partition size, or --format and "
                "--rows-per-partition), staged beside DESTINATION and published atomically. Never overwrites: an "
                "existing DESTINATION is refused (exit 73). Under the local executor the work runs here; under "
                "Slurm it runs as a CPU job without GPUs (reported as submitted; --wait follows it to its end).",
                EXAMPLE)
@common.run_dir_argument
@click.option("--destination", metavar="PATH",
              help="Where the dataset goes: below the run's workspace (the run directory's parent) or an allowed "
                   "root of the plan; must not exist.")
@click.option("--format", "fmt", type=click.Choice(formats.NAMES),
              help="The output format (default: the plan's output.format).")
@click.option("--rows-per-partition", type=click.IntRange(min=1), metavar="N",
              help="Rows in every output file but the last (default: the plan's output.rows_per_partition).")
@click.option("--allow-missing", is_flag=True,
              help="Collect the winners there are: shards without a winner are left out and recorded as missing "
                   "(with their state and reason) in the output, the collection's plan and the dataset's "
                   "_tau_collection.json. A winner that is there must still hold.")
@click.option("--tasks", "task_count", type=click.IntRange(min=1, max=1000), metavar="N",
              help="Split the partitions over N tasks (at most one per partition): under Slurm an array of N CPU "
                   "tasks, under the local executor N worker processes; the bytes are the same for any N (default: "
                   "the plan's output.tasks, or 1).")
@click.option("--upload", metavar="URL",
              help="Seal the dataset as one bundle generation before it is published, then upload it to this Blob "
                   "prefix (checked as tau-bundle-seal --upload checks it, before anything is written) and record "
                   "it in RUN/bundles/G.json; a failed upload is finished by running the same command again.")
@click.option("--memory", metavar="SIZE",
              help="The most memory each process writing a new collection may use, such as 512M or 2G (default "
                   "256M, at least 128M): its readers, copy buffers and writers share it, whatever the winners' "
                   "sizes; it changes no byte of the dataset.")
@click.option("--group-readable", "readable", is_flag=True, default=None,
              help="Publish the dataset readable by the user's group: folders 0750 and files 0640, never anything "
                   "for others (default: the plan's collection.group_readable, else private: 0700 and 0600). The "
                   "folders above it must let the group through; tau never widens them.")
@click.option("--wait", is_flag=True, help="Under Slurm, wait until the collection job has finished.")
@click.option("--worker", "worker", metavar="COLLECTION_ID",
              help="Run as the collection's CPU job (inside the Slurm job tau-collect submitted; never by hand).")
@common.progress_option
@common.output_option
def cli(run_dir: str, destination: str | None, fmt: str | None, rows_per_partition: int | None, allow_missing: bool,
        task_count: int | None, upload: str | None, memory: str | None, readable: bool | None, wait: bool,
        worker: str | None, progress: bool | None, output: str) -> None:
    from taulib.collect import budget, collection
    from taulib.errors import UsageError
    from taulib.rundir.run import Run

    if worker:
        if destination or wait or fmt or rows_per_partition or allow_missing or task_count or readable:
            raise UsageError("--worker takes none of --destination, --format, --rows-per-partition, --allow-missing, "
                             "--tasks, --group-readable and --wait (its collection's plan holds them)")
        if upload:
            raise UsageError("--worker takes no --upload (its collection's plan holds it)")
        if memory:
            raise UsageError("--worker takes no --memory (its collection's plan holds it)")
        common.emit(collection.work(run_dir, worker))
        return
    if not destination:
        raise UsageError("missing option '--destination'")
    size = None if memory is None else budget.parse(memory)
    if memory is not None and size is None:
        raise UsageError(f"--memory {memory!r} is not a size such as 512M or 2G")
    with Run(run_dir) as run:
        result = collection.collect(run, destination, wait=wait, fmt=fmt, rows_per_partition=rows_per_partition,
                                    progress=progress, allow_missing=allow_missing, task_count=task_count,
                                    upload=upload, memory=size, readable=readable)
    if output == "table":
        from taulib.collect import summary

        common.emit_text(summary.text(result))
    else:
        common.emit(result)


def allocators() -> dict[str, str]:
    """The allocator settings this process lacks (taulib.env's `memory` variables): they bound a collection's
    memory (tau-collect(1) ENVIRONMENT). Arrow's jemalloc is asked for only when pyarrow was built with it, which
    its installed config.h says (found without importing pyarrow, which costs ~0.2 s).
    Reads: the process environment, pyarrow's arrow/util/config.h."""
    import importlib.util
    from pathlib import Path

    from taulib import env

    jemalloc = False
    try:
        spec = importlib.util.find_spec("pyarrow")
        if spec is not None and spec.submodule_search_locations:
            config = Path(next(iter(spec.submodule_search_locations)), "include", "arrow", "util", "config.h")
            jemalloc = "#define ARROW_JEMALLOC\n" in config.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError, ImportError):
        pass
    return env.allocators(jemalloc=jemalloc)


main = common.main_for("tau-collect", cli, allocators)

if __name__ == "__main__":
    main()
