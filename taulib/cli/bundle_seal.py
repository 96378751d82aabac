"""tau-bundle-seal: acknowledge an output tree as one generation's complete bundle (optionally running the payload
first, optionally uploading the bundle to Blob storage)."""

from __future__ import annotations

import click

from taulib.cli import common

EXAMPLE = """
tau-bundle-seal out --generation 2026-11-29.1 --run demo
tau-bundle-seal out --generation g7 -- python3 train.py --output out      # seal only when the payload exits 0
tau-bundle-seal out --generation g7 --checkpoints 'ckpt/step-*' --metrics logs/loss.csv -- python3 train.py
TAU_TRUSTED_BLOB_ENDPOINTS=http://127.0.0.1:10000 \\
  tau-bundle-seal out --generation g7 --upload http://127.0.0.1:10000/devstoreaccount1/bundles/run-1/out
"""


@common.command("tau-bundle-seal", "Seal DIR as generation G's bundle: write the manifest .tau/bundles/G.json "
                "(every file's path, size and sha256, the run and the producer), then the completion marker "
                ".tau/bundles/G.complete, last, then the current pointer .tau/current. With a COMMAND after '--', "
                "run it first (no shell) and seal only when it exits 0; otherwise write nothing and exit with its "
                "status. A declared part (--index, --checkpoints, --metrics) that is absent means no "
                "acknowledgement at all: nothing is written or uploaded, the exit status stays the payload's (0) and "
                "the result says acknowledged false and why. A generation is immutable: sealing it again with other "
                "content is refused (exit 73).", EXAMPLE)
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False, path_type=str))
@click.argument("command", metavar="[-- COMMAND...]", nargs=-1, type=click.UNPROCESSED)
@click.option("--generation", metavar="G", required=True,
              help="The generation id: one path segment of letters, digits and ._- (from trusted metadata, e.g. "
                   "the submission).")
@click.option("--index", metavar="PATH",
              help="An artifact index the payload writes (relative to DIR): absent means no acknowledgement; "
                   "present, it must be JSON naming G as bundle_id or generation.")
@click.option("--checkpoints", "checkpoints", metavar="GLOB", multiple=True,
              help="Checkpoints (files or folders, relative to DIR; repeatable): tau indexes every match (path, "
                   "size, sha256, step) in .tau/bundles/G.d/checkpoints.json; a glob matching nothing means no "
                   "acknowledgement.")
@click.option("--metrics", "metrics", metavar="FILE", multiple=True,
              help="A metrics file (anywhere; repeatable), copied into .tau/bundles/G.d/metrics/; absent means no "
                   "acknowledgement.")
@click.option("--run", "run_id", metavar="RUN_ID",
              help="The run that produced DIR (shard and attempt come from TAU_SHARD_ID and TAU_ATTEMPT_ID when "
                   "TAU_RUN_ID is the same run).")
@click.option("--upload", metavar="URL",
              help="Upload the sealed bundle to this Blob prefix: the manifest, then the payload and the parts "
                   "(never over a blob another generation names), then the marker, then the current pointer.")
@click.option("--record", "record_in", metavar="RUN_DIR",
              help="After the upload, record in this tau run where the generation went (RUN_DIR/bundles/G.json), "
                   "so that tau-bundle-fetch --run finds it; needs --upload.")
def cli(directory: str, command: tuple[str, ...], generation: str, index: str | None, checkpoints: tuple[str, ...],
        metrics: tuple[str, ...], run_id: str | None, upload: str | None, record_in: str | None) -> None:
    import sys

    from taulib.bundle import seal
    from taulib.errors import UsageError

    if command and "--" not in sys.argv[1:]:  # a stray argument must never be run as a program
        raise UsageError(f"unexpected argument {command[0]!r}; put the payload COMMAND after '--'")
    if record_in and not upload:
        raise UsageError("--record needs --upload: it records where the bundle went")
    if record_in:
        from taulib.rundir.run import Run

        with Run(record_in):  # an unknown run is refused before the payload runs
            pass
    result = seal.seal(directory, generation, run=seal.run_identity(run_id), index=index,
                       command=list(command) or None, upload=upload, checkpoints=checkpoints, metrics=metrics)
    if record_in and not result["acknowledged"]:
        result["recorded"] = None  # nothing went anywhere
    elif record_in:
        from taulib.bundle import where

        result["recorded"] = where.record_sealed(record_in, generation, result["uploaded"]["url"],
                                                 result["manifest_sha256"])
    common.emit(result)


main = common.main_for("tau-bundle-seal", cli)

if __name__ == "__main__":
    main()
