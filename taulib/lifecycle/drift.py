"""A running client's Parquet files, checked as it writes them (the allocation's side, `tau-attempt run`): each
file's columns are compared with the run's output schema as soon as the file is complete, so that a client whose
columns drift is stopped seconds after its first file instead of failing after all its work (tau-attempt(1)).

Reads: the names in the attempt's dataset folder; of each `*.parquet` file not checked yet, its size and
modification time, its last four bytes and, once complete, its Parquet footer (through the run's RunDir: never
through a symlink); the run's schema.json. Writes: nothing.
Promises: a file is complete when its last four bytes are Parquet's footer magic `PAR1` and its size and
modification time have not changed since the previous look (one `CANCEL_CHECK` of `lifecycle.client` earlier); it
is then read once, footer only, and held to the rule a winner is held to (`candidate.columns_problem`): against the
run's schema when it is fixed (by the plan, or by the run's first winner; without the input columns the output
keeps, which tau joins in at the attempt's end), else against this attempt's own first file. pyarrow is imported
only when there is a file to read. A file that cannot be read is not judged here: the attempt's end describes it,
as it always has.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from taulib.errors import TauError

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run

MAGIC = b"PAR1"


class Watch:
    """The dataset folder of one attempt, looked at again by each `check` while its client runs."""

    def __init__(self, run: Run, attempt: Record) -> None:
        self.run, self.dataset = run, attempt["dataset"]
        self.pending: dict[str, tuple[int, int]] = {}  # name -> (size, mtime) at the previous look
        self.done: set[str] = set()  # checked, or unreadable at a size that has not changed since
        self.first: tuple[str, list[dict[str, str]]] | None = None  # this attempt's first file, when no run schema
        self.stopped: str | None = None  # why the client is stopped, once a file drifted

    def check(self) -> str | None:
        """Why the client must be stopped (a complete file whose columns are not the run's, naming the field), or
        None."""
        try:
            entries = self.run.dir.scan(self.dataset)
        except (TauError, OSError):  # not made yet, or gone: nothing to check now
            return None
        for name, kind in entries:
            if kind == "file" and name.endswith(".parquet") and name not in self.done:
                self.stopped = self._look(name)
                if self.stopped is not None:
                    return self.stopped
        return None

    def _look(self, name: str) -> str | None:
        shown = f"{self.dataset}/{name}"
        try:
            fd = self.run.dir.open_read(shown)
        except (TauError, OSError):
            return None
        try:
            st = os.fstat(fd)
            now = (st.st_size, st.st_mtime_ns)
            stable, self.pending[name] = self.pending.get(name) == now, now
            if not stable or st.st_size < 2 * len(MAGIC) or os.pread(fd, 4, st.st_size - 4) != MAGIC:
                return None  # still being written: the next look sees it again
            from taulib.lifecycle import candidate

            self.done.add(name)
            try:
                fields = candidate.footer_fields(fd, shown)
            except TauError:
                return None
        finally:
            os.close(fd)
        return self._against(name, fields)

    def _against(self, name: str, fields: list[dict[str, str]]) -> str | None:
        from taulib.lifecycle import candidate
        from taulib.rules import fields as rules_fields

        record = candidate.run_schema(self.run)
        kept = set(self.run.plan["output"].get("keep_input") or ())
        if record is not None and kept:  # the client writes the run's columns but the kept ones (`inputs.keep`)
            record = dict(record, fields=[f for f in record["fields"] if f["name"] not in kept])
        if record is not None:
            problem = candidate.columns_problem(record, fields)
        elif self.first is None:
            self.first, problem = (name, fields), None
        else:
            found = rules_fields.differences(self.first[1], fields, f"{self.first[0]}'s")
            problem = (f"the client wrote Parquet files of different schemas: {rules_fields.describe(found)}"
                       if found else None)
        if problem is None:
            return None
        return f"{problem} (in {name}, stopped while it ran)"
