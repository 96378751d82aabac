"""The memory of a collection process: one budget (tau-collect --memory, recorded in the collection's plan as
`memory`; DEFAULT when it says nothing) that its lanes' readers, read-ahead, copy buffers and writers share
(tau-collect(1) "Memory").

Pure but for `held()`, which reads the process's own resident size (/proc/self/statm). How: what the process
already holds when its lanes start (the interpreter, pyarrow's libraries: ~92 MiB measured) and SLACK are taken
off the budget; each lane needs its fixed buffers and its writer's rows (the rows a format holds before it writes
and the reader's batches in flight, at the winners' widest bytes per row once decoded, DECODED times over: the
rows held, the encoder's copy of them, and what is being decoded); as many lanes as there are CPUs run while each
gets that, fewer when it would not (one at least, whatever the budget); what is left of a lane's share is its
BUFFERS input buffers, each at most CEILING. A winner file larger than an input buffer is never held: it is
hashed in a first pass and copied or decoded from its descriptor, a piece at a time, in a second, so no winner,
whatever its size or its row groups', takes more than its lane's share.
Measured: a lane decoding and encoding 200-character texts holds 74 MiB at its peak (its 98,304 rows of ~208
bytes, 3.2 times over, and 12 MiB of fixed buffers), which DECODED = 3 and SLACK give.
Promises: the budget changes how the work is spread, never a byte of the output (the partitions' bytes are a
function of the winners and the shape only).
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

DEFAULT = 256 << 20
LEAST = 128 << 20  # --memory below this is refused: pyarrow's libraries alone take most of it
MOST = 1 << 50  # --memory above this (1 PiB) is refused: no machine has it, and a record's integer must hold it
SLACK = 16 << 20  # thread stacks, Python objects, the allocator's own
BUFFERS = 2  # input buffers a lane keeps: one read into while the writer still copies or decodes from the other
FLOOR = 4 << 20  # an input buffer smaller than this is not worth keeping: files are then read twice
CEILING = 64 << 20  # the largest input buffer (a larger one saves nothing: the file is read from the page cache)
GRAIN = 4 << 20  # an input buffer's size is rounded down to this
DECODED = 3  # a lane's bytes per decoded byte of the rows its writer and reader hold (module docstring)


class Budget(NamedTuple):
    lanes: int  # partitions written at the same time
    input_buffer: int  # a winner file of at most this many bytes is read once, into one of BUFFERS buffers; 0: none


def parse(text: str) -> int | None:
    """Bytes of a size such as 256M, 1G, 512MiB or 300000000; None when it is not one."""
    found = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if found is None:
        return None
    return int(found.group(1)) << (10 * " KMGT".index(found.group(2) or " "))


def held() -> int:
    """Bytes this process holds now (its resident set)."""
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def plan(memory: int, base: int, cpus: int, rows_held: int, row_bytes: float, fixed: int) -> Budget:
    """How `memory` bytes are spread, for a process that holds `base` bytes already and may use `cpus` lanes, each
    of which holds `fixed` bytes of buffers and `rows_held` rows of at most `row_bytes` bytes each, decoded."""
    need = fixed + int(rows_held * row_bytes * DECODED)
    free = memory - base - SLACK
    lanes = max(1, min(cpus, free // need))
    buffer = min(CEILING, (free // lanes - need) // BUFFERS // GRAIN * GRAIN)
    return Budget(lanes, buffer if buffer >= FLOOR else 0)
