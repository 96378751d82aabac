"""Readiness of an attempt's deployments (readiness.json version 2, tau-run(5) "readiness.json"): the attempt's
state from its deployments', the transitions a new revision may make, and how a record reads in the words of
version 1. Pure (tests/test_rules_readiness.py).

A deployment is one service of the plan: `expected_backends` copies, of which `ready_backends` answered their probe;
its `endpoint` is published to the client once every deployment is ready. The attempt's state follows from its
deployments': failed when one failed, stopped when all stopped, ready when all are ready, pending or restarting when
all are, starting otherwise. Every revision is checked against the one before it (`transition`): revision + 1,
times that never go back, the same deployments in the same order with the same expected backends, each deployment's
state moving only as NEXT allows, an endpoint published or failed for good, probe evidence never removed nor older,
except that a restart (a requeued allocation, which writes `restarting` before it starts again) resets every
deployment to no ready backend and a pending endpoint. Readiness is evidence of progress, never of success.

`stopped` may become `restarting`: a requeue reaches an allocation as a stop signal, which is recorded (stopped)
before the scheduler starts the same attempt again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

STATES = ("pending", "starting", "ready", "failed", "stopped", "restarting")
NEXT: dict[str, frozenset[str]] = {
    "pending": frozenset({"pending", "restarting", "starting", "failed", "stopped"}),
    "starting": frozenset({"restarting", "starting", "ready", "failed", "stopped"}),
    "restarting": frozenset({"restarting", "starting", "failed", "stopped"}),
    "ready": frozenset({"restarting", "ready", "failed", "stopped"}),
    "failed": frozenset({"failed", "stopped"}),
    "stopped": frozenset({"stopped", "restarting"}),
}
ENDPOINT_NEXT: dict[str, frozenset[str]] = {
    "pending": frozenset({"pending", "published", "failed"}),
    "published": frozenset({"published"}),
    "failed": frozenset({"failed"}),
}
CLIENT_NEXT: dict[str, frozenset[str]] = {  # the client's phase: before it starts, while it runs, once it ended
    "waiting": frozenset({"waiting", "running", "ended"}),
    "running": frozenset({"running", "ended"}),
    "ended": frozenset({"ended"}),
}
MESSAGE = 512  # characters of a probe's or the record's message, at most


def aggregate(deployments: list[dict[str, Any]]) -> str:
    """The attempt's readiness state from its deployments' states."""
    states = {d["state"] for d in deployments}
    if "failed" in states:
        return "failed"
    for whole in ("stopped", "ready", "pending", "restarting"):
        if states == {whole}:
            return whole
    return "starting"


def phase(record: Mapping[str, Any]) -> str:
    """A readiness record's state in version 1's words (what the allocation is doing: starting, running,
    restarting, stopped, failed), the words tau-status's `progress.state` keeps for every run."""
    if record["schema_version"] == 1:
        return str(record["state"])
    if record["state"] in ("restarting", "stopped", "failed"):
        return str(record["state"])
    return "running" if record["client"] == "running" else ("stopped" if record["client"] == "ended" else "starting")


def clean(text: str) -> str:
    """A message fit for a record: nothing unprintable (a control character, a line break: each becomes a space),
    MESSAGE characters at most."""
    out = "".join(c if c.isprintable() else " " for c in text)
    return out if len(out) <= MESSAGE else out[:MESSAGE - 3] + "..."


def _deployment_problem(d: dict[str, Any]) -> str | None:
    """Why one deployment's fields contradict each other, or None."""
    name, ready, expected = d["name"], d["ready_backends"], d["expected_backends"]
    if not 0 <= ready <= expected:
        return f"deployment {name!r} has {ready} of {expected} backends ready"
    if len(d["backends"]) != expected:
        return f"deployment {name!r} lists {len(d['backends'])} backends, not its {expected}"
    full = ready == expected and d["endpoint"] == "published"
    if d["state"] == "ready" and not full:
        return f"deployment {name!r} is ready without all its backends ready and its endpoint published"
    if d["state"] == "starting" and full:
        return f"deployment {name!r} is starting with all its backends ready and its endpoint published"
    if d["state"] in ("pending", "restarting") and (ready or d["endpoint"] != "pending"):
        return f"deployment {name!r} is {d['state']} with a backend ready or its endpoint not pending"
    if (d["endpoint"] == "published") != bool(d["urls"]):
        return f"deployment {name!r} names URLs exactly when its endpoint is published"
    return None


def _step_problem(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """Why a deployment may not move from `before` to `after`, or None."""
    name = after["name"]
    if after["state"] not in NEXT[before["state"]]:
        return f"deployment {name!r} cannot go from {before['state']} to {after['state']}"
    if after["state"] == "restarting":
        return None  # a restart resets the endpoint and may start its probe evidence afresh
    if after["endpoint"] not in ENDPOINT_NEXT[before["endpoint"]]:
        return f"deployment {name!r}'s endpoint cannot go from {before['endpoint']} to {after['endpoint']}"
    probe, was = after["last_probe"], before["last_probe"]
    if was is not None and (probe is None or probe["observed_at"] < was["observed_at"]):
        return f"deployment {name!r}'s probe evidence goes back"
    return None


def transition(before: dict[str, Any] | None, after: dict[str, Any]) -> str | None:
    """Why `after` may not replace `before` (None: the first record) as an attempt's readiness (version 2), or
    None when it may."""
    deployments = after["deployments"]
    if not deployments:
        return "a readiness record of version 2 has at least one deployment"
    if len({d["name"] for d in deployments}) != len(deployments):
        return "a deployment is named twice"
    for d in deployments:
        problem = _deployment_problem(d)
        if problem is not None:
            return problem
    if after["state"] != aggregate(deployments):
        return f"the readiness state is {after['state']}, but its deployments make it {aggregate(deployments)}"
    if before is None:  # stopped: an attempt ended (cancelled) before it started anything
        if after["revision"] != 1 or after["state"] not in ("pending", "restarting", "stopped"):
            return "the first readiness record is revision 1, pending, restarting or stopped"
        return None
    if before["schema_version"] != 2:
        return "an attempt's readiness cannot change its version"
    if after["revision"] != before["revision"] + 1:
        return f"revision {after['revision']} does not follow {before['revision']}"
    if after["updated_at"] < before["updated_at"] or after["restarts"] < before["restarts"]:
        return "the readiness goes back in time"
    shape = [(d["name"], d["expected_backends"]) for d in deployments]
    if shape != [(d["name"], d["expected_backends"]) for d in before["deployments"]]:
        return "the deployments and their expected backends never change"
    if after["state"] != "restarting" and after["client"] not in CLIENT_NEXT[before["client"]]:
        return f"the client cannot go from {before['client']} to {after['client']}"
    for index, now in enumerate(deployments):  # as many as before: their shape was compared above
        problem = _step_problem(before["deployments"][index], now)
        if problem is not None:
            return problem
    return None
