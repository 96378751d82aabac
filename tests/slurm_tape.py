"""Slurm's replies, recorded from the real test cluster and played back, as submitit records sbatch's output: the
contract suite (tests/test_executor_contract.py) runs against the Slurm executor without a cluster, on the replies
Slurm gave to the very commands the executor runs.

Recording: `TAU_RECORD_SLURM=1 pytest -m slurm tests/test_executor_contract.py -k slurm` (the cluster up: make
slurm-up) writes tests/golden/slurm-replies.json, one tape per test. Every command the Slurm executor runs goes
through `taulib.executors.slurm.commands`' use of `subprocess.run`; the tape keeps, per command line, the replies in
the order Slurm gave them (exit code, standard output, standard error).

What differs from one run to the next is written as a placeholder: the run directory ({run}), the run's job-name
prefix ({job}), the user's id ({uid}), and every time Slurm prints (YYYY-MM-DDTHH:MM:SS, local time) as its offset in
seconds from the test's start ({t+12}; a time in a command line is {time}). Played back, each command line gets its
replies in order, and the last one again once they run out (a poll asks until the answer changes); a command line
the tape does not hold fails the test, naming it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

TAPES = Path(__file__).resolve().parent / "golden" / "slurm-replies.json"
STAMP = re.compile(r"\b[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\b")
USER = re.compile(r"(--user=|--uid=)[0-9]+")
OFFSET = re.compile(r"\{t([+-][0-9]+)\}")
FORMAT = "%Y-%m-%dT%H:%M:%S"


def recording() -> bool:
    return os.environ.get("TAU_RECORD_SLURM") == "1"


class Context:
    """What a tape's placeholders stand for in one run of a test."""

    def __init__(self) -> None:
        self.base = time.time()
        self.run_path: str | None = None
        self.job: str | None = None

    def bind(self, run: Any) -> None:
        from taulib.rundir import journal

        self.run_path = run.path
        self.job = journal.job_name(run, "X").removesuffix("-X")

    def _names(self) -> list[tuple[str, str]]:
        if self.run_path is None or self.job is None:
            return []
        return [("{run}", self.run_path), ("{job}", self.job)]

    def key(self, argv: list[str]) -> str:
        """A command line as the tape names it: its words as a JSON array, placeholders in them."""
        words = []
        for word in argv:
            for mark, value in self._names():
                word = word.replace(value, mark)
            words.append(USER.sub(r"\1{uid}", STAMP.sub("{time}", word)))
        return json.dumps(words)

    def to_tape(self, text: str) -> str:
        for mark, value in self._names():
            text = text.replace(value, mark)
        return STAMP.sub(lambda m: "{t%+d}" % round(time.mktime(time.strptime(m.group(), FORMAT)) - self.base),
                         text)

    def from_tape(self, text: str) -> str:
        text = OFFSET.sub(lambda m: time.strftime(FORMAT, time.localtime(self.base + int(m.group(1)))), text)
        for mark, value in self._names():
            text = text.replace(mark, value)
        return text


class Subprocess:
    """What `commands` uses of the subprocess module, with `run` recording into a tape or playing one back."""

    DEVNULL = subprocess.DEVNULL
    TimeoutExpired = subprocess.TimeoutExpired

    def __init__(self, context: Context, tape: dict[str, list[list[Any]]], record: bool) -> None:
        self.context, self.tape, self.record = context, tape, record
        self.played: dict[str, int] = {}

    def run(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        key = self.context.key(argv)
        if self.record:
            proc = subprocess.run(argv, **kwargs)
            self.tape.setdefault(key, []).append([proc.returncode, self.context.to_tape(proc.stdout),
                                                  self.context.to_tape(proc.stderr)])
            return proc
        replies = self.tape.get(key)
        assert replies, f"the tape holds no reply of Slurm to {key}: record it again (slurm_tape)"
        position = self.played.get(key, 0)
        self.played[key] = position + 1
        code, out, err = replies[min(position, len(replies) - 1)]
        return subprocess.CompletedProcess(argv, code, self.context.from_tape(out), self.context.from_tape(err))


def load() -> dict[str, dict[str, list[list[Any]]]]:
    return json.loads(TAPES.read_text()) if TAPES.is_file() else {}


def save(test: str, tape: dict[str, list[list[Any]]]) -> None:
    """Write one test's tape (the others kept as they are), keys sorted, one file for the suite."""
    tapes = load()
    tapes[test] = tape
    TAPES.parent.mkdir(exist_ok=True)
    TAPES.write_text(json.dumps(tapes, indent=1, sort_keys=True) + "\n")
