"""The contract every executor keeps, one suite run against each: the local executor, the real Slurm test cluster
(marker `slurm`), and a toy third executor written here, an in-process fake engine that touches no file of taulib
(its row is added to the table for the test, its plan section comes from its row): adding an executor is adding a
row and passing this suite (CONTRIBUTING.md "Adding an executor").

What every executor must do, through the same library calls the commands make:
  submit        a submission gives every shard an attempt bound to one job of the engine's, one task each
  observe       one view per attempt, each source's word normalised (observations.schema.json) or None
  ambiguous     a hand-off whose reply was lost (failpoint submit.handed_off) is resolved to that same job on the
                next call: never a second job
  stop          stopping one attempt stops exactly its task, and the engine ends it cancelled
  fence         the allocation's environment names exactly its job and task (None outside it); restarts counted
                where the engine requeues (0 where it never does)
  roles         the row and the class agree on the optional roles (tests/test_structure.py), and the answers of
                the roles it does not play are the neutral ones
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import CLIENT, PYTHON, wait_for

import slurm_tape
from taulib import executors
from taulib.errors import Ambiguous, FailpointError
from taulib.executors.roles import UNLIMITED, Executor, Limits, Measured, Observed, Requeue, Resolved, Stopped
from taulib.executors.slurm import commands
from taulib.rules import journal as journal_rules
from taulib.rundir.journal import task_indices

STATES = {"pending", "running", "completed", "failed", "cancelled", "timed_out", "node_failed", "out_of_memory",
          "preempted", "requeued"}


# -- the toy engine: jobs in a dict of this process, tasks that run when told to ---------------------------------------

class ToyEngine:
    """A fake scheduler in this process: each job is its name and its tasks' states (a task runs as soon as its job
    is submitted); `lose_next_reply` makes the next hand-off submit its job and then raise as a lost reply would."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.lose_next_reply = False

    def submit(self, name: str, tasks: list[int]) -> str:
        job = str(4000 + len(self.jobs))
        self.jobs[job] = {"name": name, "tasks": dict.fromkeys(tasks, "RUNNING"), "restarts": 0}
        return job


ENGINE = ToyEngine()
TOY = journal_rules.Engine("the toy engine", "toy-submit")


def _row(state: str) -> dict[str, Any]:
    normal = {"PENDING": "pending", "RUNNING": "running", "CANCELLED": "cancelled", "COMPLETED": "completed"}[state]
    return {"state": normal, "raw": state, "exit_code": 0 if state == "COMPLETED" else None, "reason": None}


class Toy(Requeue, Executor):
    name = "toy"
    request_fields: dict[str, str] = {}

    def section(self, asked: dict[str, Any]) -> dict[str, Any]:
        return {"lanes": asked.get("lanes", 2)}

    def check_section(self, section: dict[str, Any]) -> None:
        from taulib.errors import BadInput

        if not 1 <= section["lanes"] <= 64:
            raise BadInput("scheduler.toy.lanes is out of 1..64")

    def request(self, section: dict[str, Any]) -> dict[str, str | None]:
        return {"mem": None, "time": None}

    def gpus(self, section: dict[str, Any]) -> int:
        return 0

    def limits(self, plan: dict[str, Any]) -> Limits:
        return Limits(parallel=plan["scheduler"]["toy"]["lanes"])

    def hand_off(self, run: Any, plan: dict[str, Any], text: str | None) -> str:
        job = ENGINE.submit(plan["job_name"], list(task_indices(plan)))
        if ENGINE.lose_next_reply:
            ENGINE.lose_next_reply = False
            raise Ambiguous(f"the toy engine's reply to {plan['submission_id']} was lost")
        return job

    def resolve(self, run: Any, plan: dict[str, Any], status: dict[str, Any]) -> Resolved:
        found = {job: set(spec["tasks"]) for job, spec in ENGINE.jobs.items() if spec["name"] == plan["job_name"]}
        verdict = journal_rules.resolve(found, set(task_indices(plan)), False, plan["job_name"], TOY)
        return Resolved(verdict, sorted(found))

    def observe(self, run: Any, attempts: list[dict[str, Any]]) -> Observed:
        views = []
        for attempt in attempts:
            sched = attempt["scheduler"]
            state = ENGINE.jobs[sched["job_id"]]["tasks"][sched["task_index"]]
            live = state in ("PENDING", "RUNNING")
            views.append({"shard_id": attempt["shard_id"], "attempt_id": attempt["attempt_id"], "scheduler": sched,
                          "queue": _row(state) if live else None, "accounting": None if live else _row(state)})
        return Observed(views, {"queue": "observed", "accounting": "observed", "reason": None})

    def usage(self, run: Any, submissions: list[tuple[dict[str, Any], str, set[int]]]) -> Measured:
        return Measured({}, "the toy engine measures nothing")

    def running(self, run: Any, attempt: dict[str, Any]) -> bool | None:
        sched = attempt["scheduler"]
        return ENGINE.jobs[sched["job_id"]]["tasks"][sched["task_index"]] in ("PENDING", "RUNNING")

    def output_path(self, attempt: dict[str, Any]) -> str:
        return f"submissions/{attempt['submission_id']}/toy-{attempt['scheduler']['task_index']}.out"

    def stop(self, run: Any, attempts: list[dict[str, Any]], whole_run: bool) -> Stopped:
        for attempt in attempts:
            sched = attempt["scheduler"]
            ENGINE.jobs[sched["job_id"]]["tasks"][sched["task_index"]] = "CANCELLED"
        return Stopped(attempts, None)

    def identity(self, environ: dict[str, str]) -> dict[str, Any] | None:
        if "TOY_JOB" not in environ:
            return None
        return {"executor": self.name, "job_id": environ["TOY_JOB"], "task_index": int(environ["TOY_TASK"])}

    def devices(self, environ: dict[str, str]) -> list[str] | None:
        return None

    def allocation_variables(self, environ: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in environ.items() if k.startswith("TOY_")}

    def restarts(self, environ: dict[str, str]) -> int:
        return int(environ.get("TOY_RESTARTS", "0"))


EXECUTOR = Toy()


# -- how the suite drives each engine --------------------------------------------------------------------------------

class Harness:
    """What the suite needs of one engine besides the executor itself: a plan, a way to lose a hand-off's reply,
    the jobs it holds of a run, the environment of one of its allocations, and whether a stopped task ended."""

    name = ""
    client = [PYTHON, str(CLIENT), "--rows-per-file", "10", "--sleep", "120"]

    def scheduler(self) -> dict[str, Any]:
        raise NotImplementedError

    def plan(self) -> dict[str, Any]:
        return {"records": 20, "shards": 2, "command": self.client, "scheduler": self.scheduler(),
                "windows": {"submission_visibility_seconds": 30}}

    def lose_reply(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Make the next hand-off one whose reply is lost after the engine took the job."""
        monkeypatch.setattr("taulib.failpoints._ARMED", {"submit.handed_off": "error"})

    def reply_lost(self) -> type[Exception]:
        return FailpointError

    def keep_replies(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr("taulib.failpoints._ARMED", {})

    def jobs_named(self, job_name: str) -> list[str]:
        raise NotImplementedError

    def environ(self, job: str, task: int, restarts: int) -> dict[str, str]:
        raise NotImplementedError

    def start(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
        """Before the test: whatever the engine needs of this process."""

    def bind(self, run: Any) -> None:
        """The run the test made, once it is made."""

    def finish(self, request: pytest.FixtureRequest) -> None:
        """After the test, whatever it did."""

    def cleanup(self, run: Any) -> None:
        from taulib.lifecycle import cancel

        cancel.cancel(run)


class LocalHarness(Harness):
    name = "local"

    def scheduler(self) -> dict[str, Any]:
        return {"profile": "local", "local": {"max_parallel": 2}}

    def jobs_named(self, job_name: str) -> list[str]:  # the local job is its submission: one per entry
        return []

    def environ(self, job: str, task: int, restarts: int) -> dict[str, str]:
        return {"TAU_LOCAL_JOB_ID": job, "TAU_LOCAL_TASK_ID": str(task)}


class SlurmHarness(Harness):
    name = "slurm"

    def scheduler(self) -> dict[str, Any]:
        return {"profile": "slurm", "slurm": {"partition": "debug", "time": "10:00"}}

    def jobs_named(self, job_name: str) -> list[str]:
        from taulib.executors.slurm import commands

        return sorted(commands.find_by_name(job_name, os.getuid(), 0.0))

    def environ(self, job: str, task: int, restarts: int) -> dict[str, str]:
        return {"SLURM_JOB_ID": str(int(job) + task), "SLURM_ARRAY_JOB_ID": job, "SLURM_ARRAY_TASK_ID": str(task),
                "SLURM_RESTART_COUNT": str(restarts)}


class RecordingSlurmHarness(SlurmHarness):
    """The real cluster; with TAU_RECORD_SLURM=1, Slurm's replies are recorded as the test's tape (slurm_tape)."""

    def start(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
        from integration.slurm import require_cluster

        require_cluster()
        self.context, self.tape, self.failed = slurm_tape.Context(), {}, request.session.testsfailed
        if slurm_tape.recording():
            monkeypatch.setattr(commands, "subprocess", slurm_tape.Subprocess(self.context, self.tape, record=True))

    def bind(self, run: Any) -> None:
        self.context.bind(run)

    def finish(self, request: pytest.FixtureRequest) -> None:
        if slurm_tape.recording() and request.session.testsfailed == self.failed:  # its call passed
            slurm_tape.save(request.node.originalname, self.tape)


class RecordedSlurmHarness(SlurmHarness):
    """Slurm's replies played back from the test's tape, recorded on the real cluster (slurm_tape): the Slurm
    executor as it is, without a cluster."""

    def start(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
        self.context = slurm_tape.Context()
        tape = slurm_tape.load().get(request.node.originalname, {})
        monkeypatch.setattr(commands, "subprocess", slurm_tape.Subprocess(self.context, tape, record=False))

    def bind(self, run: Any) -> None:
        self.context.bind(run)


class ToyHarness(Harness):
    name = "toy"

    def scheduler(self) -> dict[str, Any]:
        return {"profile": "toy", "toy": {"lanes": 3}}

    def lose_reply(self, monkeypatch: pytest.MonkeyPatch) -> None:
        ENGINE.lose_next_reply = True

    def reply_lost(self) -> type[Exception]:
        return Ambiguous

    def keep_replies(self, monkeypatch: pytest.MonkeyPatch) -> None:
        ENGINE.lose_next_reply = False

    def jobs_named(self, job_name: str) -> list[str]:
        return sorted(job for job, spec in ENGINE.jobs.items() if spec["name"] == job_name)

    def environ(self, job: str, task: int, restarts: int) -> dict[str, str]:
        return {"TOY_JOB": job, "TOY_TASK": str(task), "TOY_RESTARTS": str(restarts)}

    def cleanup(self, run: Any) -> None:
        return None  # nothing runs: the toy's tasks are entries of a dict


@pytest.fixture(params=[pytest.param(LocalHarness, id="local"), pytest.param(ToyHarness, id="toy"),
                        pytest.param(RecordedSlurmHarness, id="slurm-recorded"),
                        pytest.param(RecordingSlurmHarness, id="slurm", marks=pytest.mark.slurm)])
def engine(request, monkeypatch):
    """The harness of one engine; the toy's row is in the table (and its plan section in the schemas) meanwhile."""
    from taulib import schema

    harness = request.param()
    harness.start(request, monkeypatch)
    if harness.name == "toy":
        monkeypatch.setitem(executors.EXECUTORS, "toy", executors.Row(__name__, frozenset({"requeue"}), {
            "type": "object", "additionalProperties": False,
            "properties": {"lanes": {"type": "integer", "minimum": 1, "maximum": 64}}}))
        ENGINE.jobs.clear()
    schema.load.cache_clear()
    yield harness
    schema.load.cache_clear()
    executors._LOADED.pop("toy", None)
    harness.finish(request)


@pytest.fixture
def run(engine, workspace):
    """A run of two shards under the engine, initialised as tau-init makes it; whatever it started is cancelled."""
    from taulib.lifecycle import init
    from taulib.rundir.run import Run

    run_dir = workspace / "run"
    init.init(str(run_dir), engine.plan())
    opened = Run(str(run_dir))
    engine.bind(opened)
    yield opened
    engine.cleanup(opened)


def submitted(run) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's newest journal entry (plan) and its shards' live attempts."""
    from taulib.lifecycle import observe, submission

    plan, status = submission.journal(run).entries()[-1]
    assert status is not None and status["state"] == "submitted", status
    return plan | {"job_id": status["job_id"]}, observe.live_attempts(run)


# -- the contract ----------------------------------------------------------------------------------------------------

def test_a_submission_gives_every_shard_an_attempt_bound_to_one_job_and_each_is_observed(engine, run):
    from taulib.lifecycle import retry

    result = retry.initial(run)
    assert (result["state"], len(result["tasks"])) == ("submitted", 2), result
    plan, attempts = submitted(run)
    assert sorted(a["shard_id"] for a in attempts) == ["shard-00000", "shard-00001"]
    assert {a["scheduler"]["executor"] for a in attempts} == {engine.name}
    assert {a["scheduler"]["job_id"] for a in attempts} == {plan["job_id"]}
    assert sorted(a["scheduler"]["task_index"] for a in attempts) == [0, 1]
    chosen = executors.of(run)
    assert chosen.name == engine.name
    observed = chosen.observe(run, attempts)
    assert [(v["shard_id"], v["attempt_id"]) for v in observed.views] == \
        [(a["shard_id"], a["attempt_id"]) for a in attempts]
    for view in observed.views:
        assert view["queue"] is not None or view["accounting"] is not None, view  # a live attempt is seen
        for row in (view["queue"], view["accounting"]):
            assert row is None or (row["state"] in STATES and isinstance(row["raw"], str)), view
    assert set(observed.sources) == {"queue", "accounting", "reason"}
    assert {observed.sources["queue"], observed.sources["accounting"]} <= {"observed", "unavailable"}
    from taulib.lifecycle import observe

    document = observe.observe(run)  # what tau-observe prints, valid against its schema
    assert document["executor"] == engine.name and len(document["attempts"]) == 2


def test_a_hand_off_whose_reply_was_lost_is_resolved_to_that_same_job_never_a_second(engine, run, monkeypatch):
    from taulib.lifecycle import retry, submission

    engine.lose_reply(monkeypatch)
    with pytest.raises(engine.reply_lost()):
        retry.initial(run)
    engine.keep_replies(monkeypatch)
    plan, status = submission.journal(run).entries()[-1]
    assert status is not None and status["state"] == "prepared", status
    before = engine.jobs_named(plan["job_name"])
    assert len(before) == (0 if engine.name == "local" else 1), before
    again = wait_for(lambda: _resolved(run), timeout=90, what="the lost hand-off's resolution")
    assert (again["state"], len(again["tasks"]), again["submission_id"]) == \
        ("submitted", 2, plan["submission_id"]), again
    bound, attempts = submitted(run)
    assert bound["submission_id"] == plan["submission_id"], "the entry was replaced, not resolved"
    assert engine.jobs_named(plan["job_name"]) == before, "a second job was submitted"
    if before:
        assert bound["job_id"] == before[0]
    assert {a["scheduler"]["job_id"] for a in attempts} == {bound["job_id"]}


def _resolved(run) -> dict[str, Any] | None:
    """tau-submit again; None while the engine does not show the job yet (Busy: try again)."""
    from taulib.errors import Busy
    from taulib.lifecycle import retry

    try:
        return retry.initial(run)
    except Busy:
        return None


def test_stopping_one_attempt_stops_exactly_its_task_and_the_engine_ends_it_cancelled(engine, run):
    from taulib.lifecycle import retry

    retry.initial(run)
    _, attempts = submitted(run)
    chosen = executors.of(run)
    wait_for(lambda: all(v["queue"] is not None and v["queue"]["state"] == "running"
                         for v in chosen.observe(run, attempts).views),
             timeout=120, what="both tasks running")
    first, second = sorted(attempts, key=lambda a: a["shard_id"])
    stopped = chosen.stop(run, [first], whole_run=False)
    assert stopped.problem is None
    assert [(a["shard_id"], a["attempt_id"]) for a in stopped.attempts] == [(first["shard_id"], first["attempt_id"])]

    def ended() -> dict[str, Any] | None:
        views = {v["shard_id"]: v for v in chosen.observe(run, attempts).views}
        done = views[first["shard_id"]]
        return views if done["queue"] is None and done["accounting"] is not None else None

    views = wait_for(ended, timeout=120, what="the stopped task's end")
    assert views[first["shard_id"]]["accounting"]["state"] == "cancelled", views
    assert views[second["shard_id"]]["queue"] is not None, "the other task was stopped too"


def test_the_fence_knows_an_allocation_by_its_environment_and_counts_its_restarts(engine, run):
    chosen = executors.get(engine.name)
    environ = engine.environ("4242", 1, 2)
    assert chosen.identity(environ) == {"executor": engine.name, "job_id": "4242", "task_index": 1}
    assert executors.identity(environ) == chosen.identity(environ), "the table asks it"
    assert chosen.identity({"PATH": "/usr/bin"}) is None
    expected = 2 if executors.plays(engine.name, "requeue") else 0
    assert chosen.restarts(environ) == expected
    passed = chosen.allocation_variables({**environ, "HOME": "/root", "PATH": "/usr/bin"})
    assert "HOME" not in passed and "PATH" not in passed, passed


def test_the_roles_it_plays_answer_and_the_others_give_the_neutral_answer(engine, run):
    chosen = executors.of(run)
    section = run.plan["scheduler"][engine.name]
    chosen.check_section(section)
    assert chosen.section(section) == section, "resolving a resolved section changes nothing"
    assert set(chosen.request(section)) == {"mem", "time"}
    assert chosen.gpus(section) >= 0
    parallel = chosen.limits(run.plan).parallel
    assert parallel is None or parallel >= 1
    capacity = chosen.capacity(run)
    if not executors.plays(engine.name, "queue"):
        assert capacity == UNLIMITED
    if not executors.plays(engine.name, "starter"):
        assert chosen.sweep(run) == [] and chosen.stalled(run, {}) is False
    assert (chosen.collection_jobs() is None) != executors.plays(engine.name, "collects")


def test_the_toy_is_this_module_and_its_row_no_file_of_taulib_or_of_the_schemas_names_it():
    root = Path(__file__).resolve().parent.parent
    files = [*(root / "taulib").rglob("*.py"), *(root / "share" / "schemas").glob("*.json")]
    named = [str(p.relative_to(root)) for p in files if re.search(r"""["']toy["']""", p.read_text(encoding="utf-8"))]
    assert len(files) > 150 and named == []
    assert "toy" not in executors.EXECUTORS, "the toy's row is the suite's, added only while it runs"
