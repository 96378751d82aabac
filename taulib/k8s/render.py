"""The workload status snapshot as text for people (`tau-observe --kubernetes NAME -o table`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from taulib import table

if TYPE_CHECKING:
    from taulib.jsonio import Record


def snapshot(doc: Record) -> str:
    kind = "RayJob" if doc["kind"] == "Job+RayJob" and doc["primary"] == "RayJob" else doc["kind"]  # its submitter
    lines = [f"{kind} {doc['name']} in namespace {doc['namespace']}: {doc['lifecycle']}",
             f"  {doc['stateDetail']}", f"  Tau v1alpha1 state: {doc['state']}"]
    if doc["degraded"]:
        lines.append("degraded:")
        lines.extend(f"  - {issue}" for issue in doc["issues"])
    reads = ", ".join(f"{what} {obs['state']}" + (f" ({obs['reason']})" if obs["reason"] else "")
                      for what, obs in doc["observations"].items())
    lines.append(f"reads: {reads}")
    if doc["podEvidence"]["state"] != "observed":
        lines.append(f"pod evidence: {doc['podEvidence']['reason']}")
    if doc["asOf"]:
        lines.append(f"as of: {doc['asOf']}")
    out = "\n".join(lines) + "\n"
    if doc["phases"]:
        out += "\n" + table.render(["PHASE", "STATUS", "DETAIL", "HINT"],
                                   [[p["name"], p["status"], _short(p["detail"]), p["hint"]] for p in doc["phases"]])
    if doc["workloads"]:
        out += "\n" + table.render(
            ["WORKLOAD", "OWNER", "QUEUE", "PHASE", "ADMITTED", "CHECKS", "REASON"],
            [[w["name"], w["owner"], w["queue"], w["phase"] + (" (evicted)" if w["evicted"] else ""),
              "yes" if w["admitted"] else "no",
              ", ".join(f"{c['name']}={c['state']}" + _controller(c) for c in w["admissionChecks"]) or None,
              ": ".join(p for p in (w["reason"], w["message"]) if p)
              or ": ".join(p for p in (w["evicted"] or {}).values() if p) or None] for w in doc["workloads"]])
    if doc["pods"]:
        out += "\n" + table.render(
            ["POD", "OWNER", "PHASE", "HEALTH", "NODE", "READY", "RESTARTS"],
            [[p["name"], p["owner"] + (f" ({p['role']})" if p["role"] else "") if p["owner"] else None,
              p["phase"], p["health"], p["node"], p["ready"], p["restarts"]] for p in doc["pods"]])
        out += "\n" + table.render(
            ["POD", "CONTAINER", "KIND", "STATE", "READY", "RESTARTS", "REASON", "EXIT", "LAST REASON", "LAST EXIT"],
            [[p["name"], c["name"], c["kind"], c["state"], "yes" if c["ready"] else "no", c["restartCount"],
              c["reason"], c["exitCode"], c["lastReason"], c["lastExitCode"]]
             for p in doc["pods"] for c in p["containers"]])
    elif doc["observations"]["pods"]["state"] == "observed":
        out += "\nno pods\n"
    return out


def _controller(check: Record) -> str:
    if check["controller"]:
        return f" ({check['controller']})"
    return " (controller: lookup failed)" if check["controllerLookupFailed"] else ""


def _short(text: str, width: int = 100) -> str:
    """A phase detail cut for a terminal line; the whole text is in the JSON snapshot."""
    return text if len(text) <= width else text[:width - 1] + "…"
