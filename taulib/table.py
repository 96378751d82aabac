"""Plain-text tables for people (`-o table`). Columns are padded to their widest cell; no colours, no wrapping."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from taulib.jsonio import Record

# why an attempt that asked for memory can have no peak: Slurm samples it every JobAcctGatherFrequency seconds
UNSAMPLED = "job shorter than the sampling period; --acctg-freq=task=1 measures it"


def render(headers: list[str], rows: list[list[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in cells]
    return "\n".join(lines) + "\n"


def status(doc: Record) -> str:
    """A tau.status document (tau-reconcile and tau-status -o table): the run, then one line per shard."""
    counts = ", ".join(f"{k} {v}" for k, v in doc["counts"].items() if v)
    head = f"run {doc['run_id']}: {doc['state']} ({counts})\n"
    if doc.get("degraded"):
        head += f"degraded: {doc['reason']}\n"
    if doc.get("cancelled"):
        head += f"cancelled by the user at {doc['cancelled']['requested_at']}\n"
    budget = doc.get("budget")
    if budget:
        head += (f"budget: {budget['failed_attempts']} failed attempts, {budget['failed_shards']} failed shards "
                 f"(stops past {budget['max_failed_attempts']} attempts and {budget['max_failed_fraction']:.0%} of "
                 f"the shards); {budget['max_attempts']} attempts a shard"
                 + ("; stopped" if budget["stopped"] else "") + "\n")
    head += _efficiency(doc.get("efficiency"))
    for sub in doc.get("submissions") or []:
        head += f"submission {sub['submission_id']}: not resolved yet (sbatch's reply was lost), by {sub['deadline']}\n"
    for col in doc.get("collections") or []:
        tasks = f" ({col['tasks_done']} of {col['tasks']} tasks done)" if col.get("tasks", 1) > 1 \
            and col["state"] not in ("succeeded", "failed") else ""
        head += f"collection {col['collection_id']}: {col['state']} to {col['destination']}{tasks}\n"
    if doc.get("eta_seconds"):
        head += f"estimated time left: {_duration(doc['eta_seconds'])}\n"
    sources = doc.get("sources")
    if sources and (sources.get("queue") != "observed" or sources.get("accounting") != "observed"):
        head += (f"scheduler sources: queue {sources.get('queue')}, accounting {sources.get('accounting')}"
                 f"{': ' + sources['reason'] if sources.get('reason') else ''}\n")
    rows = []
    for shard in doc["shards"]:
        evidence = shard["evidence"] or {}
        obs = evidence.get("observation")
        live = evidence.get("attempt_state") in ("submitted", "running")
        # once the attempt has finished, non-terminal scheduler evidence is history, not news
        scheduler = obs["state"] if obs and (live or obs["terminal"]) else None
        progress = shard.get("progress")
        done = None
        if progress:
            done = (f"{progress['records_done']}/{progress['records']}" if progress["records_done"] is not None
                    else "-") + f" {progress['age_seconds']:.0f}s ago"
        reason = shard["reason"] + (f" (stalled: {shard['stalled']})" if shard.get("stalled") else "")
        if progress and progress.get("deployments"):
            reason += "; " + ", ".join(_deployment(d) for d in progress["deployments"])
        if shard.get("last_output"):
            reason += "; last output: " + " / ".join(shard["last_output"])
        if shard.get("log"):
            reason += f"; log {shard['log']}"
        tries = f"{shard['attempts']}/{shard['max_attempts']}" if "attempts" in shard else None
        rows.append([shard["id"], shard["state"], shard["attempt"], shard["winner"], tries, scheduler, done,
                     _used(shard.get("usage"), shard.get("request")), reason])
    return head + "\n" + render(["SHARD", "STATE", "ATTEMPT", "WINNER", "TRIES", "SCHEDULER", "PROGRESS", "USED",
                                 "REASON"], rows)


def _deployment(d: Record) -> str:
    """A running attempt's deployment in a few words, with its last probe's message: `generator 3/4 ready (GET
    /health answered 200)`, `generator 1/2 starting (GET /health answered 503)`."""
    probe = d.get("last_probe")
    said = f" ({probe['message']})" if probe else ""
    return f"{d['name']} {d['ready_backends']}/{d['expected_backends']} {d['state']}{said}"


def _efficiency(summary: Record | None) -> str:
    """seff's summary for a run: what its measured attempts cost, and how much of what they asked for they used."""
    if not summary or not (summary["measured"] or summary["unmeasured"]):
        return ""
    lagging = (f" ({summary['unmeasured']} finished attempts not measured yet: "
               f"{summary.get('reason') or 'accounting lags'})" if summary["unmeasured"] else "")
    text = (f"efficiency: {summary['measured']} attempts measured{lagging}; {summary['core_hours']:.4g} core-hours, "
            f"{summary['gpu_hours']:.4g} GPU-hours\n")
    if summary["measured"]:
        cpu = "-" if summary["cpu_efficiency"] is None else f"{summary['cpu_efficiency']:.1%}"
        unsampled = summary.get("memory_unmeasured") or 0  # absent from documents of earlier versions of tau
        if summary["memory_efficiency"] is not None:
            memory = (f"memory {summary['memory_efficiency']:.1%} of the request on average "
                      f"(at most {summary['memory_efficiency_max']:.1%})")
            if unsampled:
                memory += f"; memory of {unsampled} attempts not measured ({UNSAMPLED})"
        else:
            memory = f"memory not measured ({UNSAMPLED})" if unsampled else "no memory requested"
        peak = "" if summary["max_rss_bytes"] is None else f", peak {_size(summary['max_rss_bytes'])}"
        text += f"  CPU {cpu} of the cores' time; {memory}{peak}\n"
        text += "  slowest: " + ", ".join(f"{s['shard_id']} {s['attempt_id']} {_seconds(s['elapsed_seconds'])}"
                                          for s in summary["slowest"]) + "\n"
    return text


def _used(usage: Record | None, request: Record | None = None) -> str | None:
    """A shard's attempt's figures in one cell: wall time, CPU efficiency, peak memory (of the request), or that
    the memory it asked for was never measured. The request is the figure the executor measured, else the one the
    shard's `request` names in the scheduler's spelling."""
    if usage is None:
        return None
    if not usage["measured"]:
        return "not measured yet"
    cpu = "" if usage["cpu_efficiency"] is None else f" cpu {usage['cpu_efficiency']:.0%}"
    asked = (_size(usage["mem_requested_bytes"]) if usage["mem_requested_bytes"]
             else (request or {}).get("mem"))
    if usage["max_rss_bytes"] is not None:
        memory = f" {_size(usage['max_rss_bytes'])}"
        if usage["memory_efficiency"] is not None:
            memory += f" ({usage['memory_efficiency']:.0%} of {asked})"
        elif asked:
            memory += f" of {asked}"
    elif asked and usage["elapsed_seconds"]:  # a task that never started had nothing to measure
        memory = f" memory not measured of {asked}"
    else:
        memory = ""
    return f"{_seconds(usage['elapsed_seconds'])}{cpu}{memory}"


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 60 else _duration(int(seconds))


def _size(size: int) -> str:
    for unit, scale in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _duration(seconds: int) -> str:
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def observations(doc: Record) -> str:
    """A tau.observations document (tau-observe RUN_DIR -o table)."""
    sources = doc["sources"]
    head = (f"run {doc['run_id']} ({doc['executor']}) observed at {doc['observed_at']}: queue {sources['queue']}, "
            f"accounting {sources['accounting']}{': ' + sources['reason'] if sources.get('reason') else ''}\n")

    def seen(view: Record | None) -> str | None:
        if view is None:
            return None
        state: str = view["state"]
        return state + (f" ({view['reason']})" if view.get("reason") else "")

    rows = [[a["shard_id"], a["attempt_id"], f"{a['scheduler']['executor']} {a['scheduler']['job_id']}"
             f"_{a['scheduler']['task_index']}", seen(a["queue"]), seen(a["accounting"])] for a in doc["attempts"]]
    if not rows:
        return head + "no live attempts\n"
    return head + "\n" + render(["SHARD", "ATTEMPT", "SCHEDULER", "QUEUE", "ACCOUNTING"], rows)
