"""The one list of tau's commands: name, module, one-line summary, and kind.

Reads and writes nothing; imports nothing. Everything that lists the commands is derived from this table: the front
command's usage (`tau --help`) and dispatch, shell completion, and the documentation tests; a test proves that
pyproject.toml's [project.scripts] and bin/ hold exactly these commands.

Kinds: `plumbing` composes through JSON on stdin and stdout and is wired from scripts, epilogs and cron;
`porcelain` is what a person types; `allocation` runs inside a scheduler's allocation, started by the executor.
"""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    name: str  # "bundle-seal": the program is tau-bundle-seal, and `tau bundle-seal` runs it
    module: str  # the module whose `main` runs it and whose `cli` is its click command
    summary: str
    kind: str  # plumbing | porcelain | allocation

    @property
    def program(self) -> str:
        return f"tau-{self.name}"


COMMANDS: tuple[Command, ...] = (
    Command("init", "taulib.cli.init", "create a run from a plan on standard input", "plumbing"),
    Command("submit", "taulib.cli.submit", "submit the first attempt of every shard", "plumbing"),
    Command("attempt", "taulib.cli.attempt", "the in-allocation side (run by the executor)", "allocation"),
    Command("observe", "taulib.cli.observe", "print normalised observations of the live attempts", "plumbing"),
    Command("reconcile", "taulib.cli.reconcile", "apply observations from standard input; print the run status",
            "plumbing"),
    Command("winner", "taulib.cli.winner", "validate candidates and publish each shard's winner", "plumbing"),
    Command("retry", "taulib.cli.retry", "submit new attempts for retryable shards", "plumbing"),
    Command("collect", "taulib.cli.collect", "merge every winner into one dataset", "plumbing"),
    Command("bundle-seal", "taulib.cli.bundle_seal", "seal an output tree as a generation's bundle (and upload it)",
            "plumbing"),
    Command("bundle-verify", "taulib.cli.bundle_verify",
            "check a bundle, local or on Blob storage, against its acknowledgement", "plumbing"),
    Command("bundle-fetch", "taulib.cli.bundle_fetch", "download a complete, verified bundle from Blob storage",
            "plumbing"),
    Command("site", "taulib.cli.site", "check a site profile, or show it with where it was found", "porcelain"),
    Command("status", "taulib.cli.status", "the run's status now, read-only (table, watch)", "porcelain"),
    Command("logs", "taulib.cli.logs", "an attempt's output (follow it while it runs)", "porcelain"),
    Command("cancel", "taulib.cli.cancel", "cancel a run or some of its shards; never started again", "porcelain"),
    Command("drive", "taulib.cli.drive", "observe, reconcile, publish, retry and submit until the run is finished",
            "porcelain"),
)

FRONT = Command("", "taulib.cli.tau", "run large sharded batch jobs without a resident controller", "porcelain")
COMPLETION = ("completion", "print the shell completion of every tau command (bash, zsh or fish)")


def by_name(name: str) -> Command | None:
    return next((c for c in COMMANDS if c.name == name), None)
