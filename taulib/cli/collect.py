"""tau-collect: merge every shard's winner into one dataset at an authorised destination."""

from __future__ import annotations

import click

from taulib.cli import common

EXAMPLE = """
tau-collect runs/demo --destination runs/demo-dataset
"""


@common.command("tau-collect", "Validate every shard's winner, then stream the winners in planned order into a "
                "deterministic dataset (the run's output format, a fixed row count per partition), staged beside "
                "DESTINATION and published atomically. Never overwrites: an existing DESTINATION is refused "
                "(exit 73).", EXAMPLE)
@common.run_dir_argument
@click.option("--destination", required=True, metavar="PATH",
              help="Where the dataset goes: below the run's workspace (the run directory's parent) or an allowed "
                   "root of the plan; must not exist.")
@common.output_option
def cli(run_dir: str, destination: str, output: str) -> None:
    from taulib import collect
    from taulib.run import Run

    with Run(run_dir) as run:
        result = collect.collect(run, destination)
    if output == "table":
        from taulib import table

        common.emit_text(f"collection {result['collection_id']}: {result['records']} records in "
                         f"{result['partitions']} {result['format']} file(s) at {result['destination']}\n\n"
                         + table.render(["FILE", "ROWS", "BYTES", "SHA256"],
                                        [[f["path"], f["rows"], f["size"], f["sha256"]] for f in result["files"]]))
    else:
        common.emit(result)


main = common.main_for("tau-collect", cli)

if __name__ == "__main__":
    main()
