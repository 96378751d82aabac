"""tau-winner: validate candidates and publish each shard's one immutable winner."""

from __future__ import annotations

import click

from taulib.cli import common
from taulib.errors import CheckFailed

EXAMPLE = """
tau-winner runs/demo
tau-winner runs/demo --shard shard-00003 -o table
"""


@common.command("tau-winner", "Validate the whole chain of each shard's newest attempt (result, manifest, every "
                "file's size, sha256, Parquet rows and schema, provenance, scheduler evidence) and publish its "
                "winner without overwrite. Existing winners are re-validated and reported. Exits 1 when a "
                "selected shard has no winner.", EXAMPLE)
@common.run_dir_argument
@click.option("--shard", "shards", multiple=True, metavar="SHARD_ID", type=common.SHARD,
              help="Only these shards (repeatable: an id or a number, shard-00003 or 3); default: every shard.")
@common.output_option
def cli(run_dir: str, shards: tuple[str, ...], output: str) -> None:
    from taulib.lifecycle import winner
    from taulib.rundir.run import Run

    with Run(run_dir) as run:
        result = winner.publish_many(run, list(shards) or run.shard_ids())
    if output == "table":
        from taulib import table

        common.emit_text(table.render(["SHARD", "WINNER", "PUBLISHED", "REASON"],
                                      [[r["shard_id"], r["winner"], "yes" if r["published"] else "no", r["reason"]]
                                       for r in result["shards"]]))
    else:
        common.emit(result)
    missing = result["counts"]["without_winner"]
    if missing:
        raise CheckFailed(f"{missing} shard(s) have no winner; see the reason of each on standard output")


main = common.main_for("tau-winner", cli)

if __name__ == "__main__":
    main()
