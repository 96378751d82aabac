"""Windows: the shards a submission gives attempts to, split into arrays that fit the scheduler now. Pure
(tests/test_rules_windows.py).

A scheduler bounds what one submission may ask for (`executor.Capacity`): the largest array task index (Slurm's
MaxArraySize less one), the most tasks in one array, and the room left under the tightest submit limit (a user's or
QOS's MaxSubmitJobs, the plan's max_queued: tasks queued now count against it). The shards are taken in ascending
order, as many as the room allows; the rest are deferred, for a later submission once earlier tasks have left the
queue. The shards taken are cut into arrays of at most `max_tasks` tasks (and at most `max_index` + 1); an array
whose shards all have indices at or below `max_index` keeps them as its task indices (so a run that fits looks as
it always did, and a sparse retry is a sparse array), and any other array numbers its tasks 0, 1, 2, ... (the
journal records which shard each is).
"""

from __future__ import annotations

from typing import NamedTuple


class Windows(NamedTuple):
    arrays: list[list[tuple[int, int]]]  # per array, (shard index, array task index) of each task, in shard order
    deferred: int  # shards left for a later submission


def cut(shards: list[int], max_index: int | None, max_tasks: int | None, room: int | None,
        least: int | None = None) -> Windows:
    """The arrays of ascending shard indices `shards` under these limits (None: no such limit). `least`: the fewest
    tasks a submission is worth while shards are left over (room for fewer waits, so that a queue draining task by
    task does not become a submission per task)."""
    taken = shards if room is None else shards[:max(room, 0)]
    if not taken or (least is not None and len(taken) < min(least, len(shards))):
        return Windows([], len(shards))
    bounds = [n for n in (max_tasks, None if max_index is None else max_index + 1) if n is not None and n > 0]
    size = min(bounds) if bounds else len(taken)  # an array numbered from 0 stays at or below max_index
    arrays = []
    for start in range(0, len(taken), size):
        chunk = taken[start:start + size]
        if max_index is None or chunk[-1] <= max_index:
            arrays.append([(shard, shard) for shard in chunk])
        else:
            arrays.append([(shard, position) for position, shard in enumerate(chunk)])
    return Windows(arrays, len(shards) - len(taken))
