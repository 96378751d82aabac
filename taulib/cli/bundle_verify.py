"""tau-bundle-verify: check a bundle generation, in a local tree or under a Blob prefix, against its
acknowledgement; print the report; exit 0 when complete, 1 when not."""

from __future__ import annotations

from typing import Any

import click

from taulib.cli import common

EXAMPLE = """
tau-bundle-verify out --generation g7
tau-bundle-verify https://acct.blob.core.windows.net/bundles/run-1/out --generation g7 --deep -o table
"""


@common.command("tau-bundle-verify", "Check a bundle generation in a local tree or under a Blob URL: its completion "
                "marker, its manifest, and that the files present equal the manifest (missing, extra and resized "
                "files named; every sha256 checked for a local tree, and for Blob with --deep). Prints a report "
                "and exits 0 when the generation is complete, 1 when not.", EXAMPLE)
@click.argument("source", metavar="SOURCE")
@click.option("--generation", metavar="G",
              help="The generation to check (default: the only one acknowledged at SOURCE).")
@click.option("--deep", is_flag=True,
              help="For a Blob URL, download and hash every byte (nothing is written to disk); local trees are "
                   "always hashed.")
@common.output_option
def cli(source: str, generation: str | None, deep: bool, output: str) -> None:
    from taulib.bundle import verify
    from taulib.errors import CheckFailed

    report = verify.verify(source, generation, deep=deep)
    if output == "table":
        common.emit_text(_table(report))
    else:
        common.emit(report)
    if not report["complete"]:
        count = (len(report["missing"]) + len(report["extra"]) + len(report["resized"])
                 + len(report["digest_mismatch"]) + len(report["problems"]))
        first = (report["problems"] or [f"{len(report['missing'])} missing, {len(report['extra'])} extra, "
                                        f"{len(report['resized'])} resized, {len(report['digest_mismatch'])} "
                                        "digest mismatch"])[0]
        raise CheckFailed(f"bundle {report['source']} generation {report['generation']!r} is not complete "
                          f"({count} finding(s)): {first}", generation=report["generation"])


def _table(report: dict[str, Any]) -> str:
    from taulib import table

    state = "complete" if report["complete"] else "NOT complete"
    checked = "sizes and sha256 checked" if report["hashed"] else "names and sizes checked"
    head = (f"bundle {report['source']} generation {report['generation'] or '-'}: {state}"
            + (f" ({report['files']} files, {report['bytes']} bytes, {checked})" if report["files"] is not None
               else "") + "\n")
    rows = [["problem", p] for p in report["problems"]]
    rows += [["missing", p] for p in report["missing"]]
    rows += [["extra", p] for p in report["extra"]]
    rows += [["resized", f"{r['path']} ({r['actual']} bytes, manifest {r['expected']})"] for r in report["resized"]]
    rows += [["digest mismatch", p] for p in report["digest_mismatch"]]
    return head + ("\n" + table.render(["FINDING", "DETAIL"], rows) if rows else "")


main = common.main_for("tau-bundle-verify", cli)

if __name__ == "__main__":
    main()
