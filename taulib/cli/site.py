"""tau-site: check a site profile (validate), or print it with where it was found (show)."""

from __future__ import annotations

import click

from taulib.cli import common
from taulib.errors import CheckFailed

EXAMPLE = """
tau-site validate gpu-cluster          # ~/.config/tau/sites/gpu-cluster.json: runtime, partitions, mounts
TAU_SITE_PATH=/shared/tau-sites tau-site show gpu-cluster
"""


@common.command("tau-site", "Check the site profile NAME (validate: its runtime's program on PATH, its partitions "
                "on the cluster when Slurm answers, its standard mounts there; exits 1 naming every problem), or "
                "print it with the file it was found in and its sha256 (show). A profile is NAME.json in a folder "
                "of $TAU_SITE_PATH, then in ~/.config/tau/sites; a plan names it by scheduler.site.", EXAMPLE)
@click.argument("action", metavar="ACTION", type=click.Choice(["validate", "show"]))
@click.argument("name", metavar="NAME", type=click.STRING)
def cli(action: str, name: str) -> None:
    from taulib.lifecycle import site

    if action == "show":
        path, profile, digest = site.load(name)
        common.emit({"site": name, "path": path, "sha256": digest, "profile": profile})
        return
    result = site.validate(name)
    common.emit(result)
    if not result["valid"]:
        raise CheckFailed(f"site profile {name!r} ({result['path']}): " + "; ".join(result["problems"]))


main = common.main_for("tau-site", cli)

if __name__ == "__main__":
    main()
