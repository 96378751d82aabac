"""A collection job that left the queue with tasks unfinished: what the collection does next. Pure
(tests/test_rules_collection.py).

A collection's tasks run as one array job, and one array asks one request for all of its tasks (tau-collect(1)
"Tasks"). When the job has ended and some tasks have no record, how each of those ended, as the scheduler's
accounting says (tau's words: `out_of_memory`, `timed_out`, `cancelled`, `preempted`, `node_failed`, `failed`...;
None where accounting has no final word on it), decides:
  - a task that ran out of memory (or time) is rerun asking for the request it was killed at, grown as a shard's
    retry grows it (`escalation.next_request`: the plan's `retry.escalate`, its factors and caps). When nothing grows
    it (the plan grows no memory, the request set none, or its cap holds it where it was), a rerun would ask the same
    and be killed the same: the collection fails at once, its cause Slurm's word for the end (OUT_OF_MEMORY,
    TIMEOUT). A request killed for memory or time is never asked again;
  - any other end (killed, cancelled, preempted, its node lost, an error, or no word at all) reruns the task with the
    same request.
The rerun is one array of the unfinished tasks, asking for the largest of their requests (memory and time each):
the tasks of one collection are of one size, and one array is what the collection's fence names. Reruns are bounded
(`most`, whatever ended them, growth included); past them the collection fails, its cause an out-of-memory or
timeout among the last job's ends, if there is one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from taulib.rules.escalation import CAPS, mem_mib, next_request, time_seconds

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

CAUSES = {"out_of_memory": "OUT_OF_MEMORY", "timed_out": "TIMEOUT"}  # Slurm's words for the ends that grow a request
READ: dict[str, Callable[[str], float]] = {"mem": mem_mib, "time": time_seconds}


class Next(NamedTuple):
    """What a collection whose job ended unfinished does: `action` rerun (its unfinished tasks, one array asking
    `request`) or fail (`reason` says why, `cause` OUT_OF_MEMORY or TIMEOUT when such an end decided it). `grown` is
    each unfinished task's own next request (what a rerun of it alone would ask)."""

    action: str
    request: dict[str, str | None]
    grown: dict[int, dict[str, str | None]]
    cause: str | None = None
    reason: str | None = None


def after_job(ends: Mapping[int, str | None], asked: Mapping[str, str | None], escalate: Mapping[str, Any] | None,
              reruns: int, most: int, count: int) -> Next:
    """The next step of a collection of `count` tasks whose job asked for `asked` ({mem, time}, Slurm's spelling,
    None where not set) and ended with the tasks `ends` (task -> its end) unfinished, after `reruns` reruns of at
    most `most`."""
    grown = {task: next_request(asked, end, escalate) for task, end in sorted(ends.items())}
    for end, (key, cap, what, _option) in CAPS.items():
        stuck = [task for task, state in sorted(ends.items()) if state == end and grown[task][key] == asked[key]]
        if stuck:
            return Next("fail", dict(asked), grown, CAUSES[end],
                        f"{_tasks(stuck, count)} ran out of {what} ({CAUSES[end]}) "
                        f"{_why(asked[key], what, cap, escalate, key)}: a rerun would ask the same and be killed the "
                        "same; collect from a new run (tau-init --from) whose plan asks for more")
    request = {key: _largest([g[key] for g in grown.values()], READ[key]) for key in ("mem", "time")}
    if reruns < most:
        return Next("rerun", request, grown)
    grew = [end for end in CAUSES if any(state == end for state in ends.values())]
    return Next("fail", dict(asked), grown, CAUSES[grew[0]] if grew else None,
                f"{_tasks(sorted(ends), count)} never finished, in {most + 1} jobs (the last ended "
                f"{_ends(ends)})")


def _why(value: str | None, what: str, cap: str, escalate: Mapping[str, Any] | None, key: str) -> str:
    """Why a request killed for `what` does not grow."""
    if value is None:
        return f"asking for no {what} of its own (the cluster's default), which retry.escalate never grows"
    if escalate and escalate.get(key, 1) != 1:
        return f"asking for {value}, the cap (retry.escalate.{cap})"
    return f"asking for {value}, and retry.escalate grows no {what}"


def _largest(values: list[str | None], read: Callable[[str], float]) -> str | None:
    """The largest of requests spelt as Slurm spells them (None: none set; the tasks of one array all set one or
    none, since a request is never invented)."""
    found = [v for v in values if v is not None]
    return max(found, key=read) if found else None


def _tasks(tasks: list[int], count: int) -> str:
    """Tasks named for a reason: "task 2 of 4", "tasks 0, 2 of 4" (the first 20)."""
    shown = ", ".join(map(str, tasks[:20])) + (f" and {len(tasks) - 20} more" if len(tasks) > 20 else "")
    return f"task{'s' if len(tasks) > 1 else ''} {shown} of {count}"


def _ends(ends: Mapping[int, str | None]) -> str:
    """How tasks ended, in words: "out_of_memory 2, cancelled 1", in the order first met."""
    counted: dict[str, int] = {}
    for task in sorted(ends):
        word = ends[task] or "unknown to accounting"
        counted[word] = counted.get(word, 0) + 1
    return ", ".join(f"{word} {n}" for word, n in counted.items())
