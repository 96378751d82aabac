"""The roles an engine plays for tau, each a small interface in engine-neutral words, and what they return.

An executor plays the five roles every engine has (`Plans`, `Submits`, `Observes`, `Stops`, `Allocation`: the
`Executor` class joins them) and those of the optional roles it has (`OPTIONAL`): a `Queue` whose limits are read
before every submission, a `Starter` of tau's own that must run for the tasks to start, a `Requeue` that starts an
allocation again, `Collects` that runs a collection as a job of its own. An executor without an optional role gets
its neutral answer here, once (no limit, nothing to start, never restarted, collected inline), never a copy of it;
the table's row names the optional roles it plays (`taulib.executors.EXECUTORS`), and tests/test_structure.py
checks that the row and the class agree. Pure declarations: reads and writes nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

if TYPE_CHECKING:
    from taulib.env import Var
    from taulib.rules.journal import Engine, Resolution
    from taulib.rundir.run import Run


class Limits(NamedTuple):
    """The limits that bound a run's submissions under an executor."""
    parallel: int | None  # tasks of one submission that run at once (None: as many as the scheduler gives)


class Capacity(NamedTuple):
    """What a submission may ask of the scheduler now: the largest task index (None: no limit), the most
    tasks in one array, the tasks that may still be queued (None: no limit applies), the limit that holds that
    room in words, and the limits that could not be read (never guessed)."""
    max_index: int | None
    max_tasks: int | None
    room: int | None
    holding: str | None
    unread: list[str]
    least: int | None = None  # the fewest tasks a window is worth while more shards wait (None: any)


UNLIMITED = Capacity(None, None, None, None, [])


class Observed(NamedTuple):
    """What an executor says about some attempts now: one view per attempt (`queue` and `accounting`, each a
    normalised state or None: schema `observations`), and whether each source could be asked."""
    views: list[dict[str, Any]]
    sources: dict[str, Any]  # {"queue": observed|unavailable, "accounting": ..., "reason": str | None}


class Resolved(NamedTuple):
    """How a PREPARED submission was settled: the verdict (`rules.journal.Resolution`), and the ids of the jobs the
    scheduler showed under its name (named in the error when they conflict)."""
    verdict: Resolution
    seen: list[str]


class Stopped(NamedTuple):
    """What stopping attempts did: the attempts signalled or cancelled, and why stopping failed (None: it did
    not)."""
    attempts: list[dict[str, Any]]
    problem: str | None


class Measured(NamedTuple):
    """What the finished tasks of some submissions used, as the executor measured it: {submission id: {task index:
    figures}} (schema `observations`, usage), only tasks whose figures are final; and why it could not be asked
    (None: it could)."""
    tasks: dict[str, dict[int, dict[str, Any]]]
    problem: str | None


OBSERVED = {"queue": "observed", "accounting": "observed", "reason": None}


class TaskEnd(NamedTuple):
    """How one task of a collection's job ended, by the scheduler's accounting: `state` in tau's words (those of
    attempts' accounting: out_of_memory, timed_out, cancelled, preempted, node_failed, failed, completed), `word`
    the scheduler's own (FAILED, OUT_OF_MEMORY), and `evidence`, what else named the end when the scheduler's word
    alone does not (a memory kill that accounting calls FAILED: the scheduler's line in the task's output), or None."""
    state: str
    word: str
    evidence: str | None = None


class CollectionJobs(ABC):
    """How an executor runs a collection as a job of its own (a CPU job without GPUs), for executors that do not
    collect inline. The collection's journal, fencing and waiting are `collect.job`'s; this is the scheduler's part."""

    engine: ClassVar[Engine]  # how the journal's reasons name the scheduler (`rules.journal.resolve`)

    @abstractmethod
    def request(self, plan: dict[str, Any]) -> dict[str, str | None]:
        """What each task of a collection's job asks for under the run's `plan`, as {"mem", "time"} in
        `rules.escalation`'s spelling (None where nothing is asked): the request `retry.escalate` grows after a
        task ran out of memory or time. Pure."""

    @abstractmethod
    def submit(self, run: Run, plan: dict[str, Any], job_name: str, task_indices: list[int], rerun: int = 0,
               request: dict[str, str | None] | None = None) -> str:
        """Render the collection's job script (an array of the collection's tasks `task_indices`; `rerun` > 0 for a
        job that runs unfinished tasks again, asking for `request` when it is not None, else for `self.request`),
        publish it in the collection's folder and submit it; its job id. Raises SubmitRefused (the scheduler refused
        it) or Ambiguous (it may have been submitted)."""

    @abstractmethod
    def find(self, job_name: str, created: float) -> dict[str, set[int | None]]:
        """This user's jobs of exactly this name submitted since `created` (epoch seconds): id -> tasks seen."""

    @abstractmethod
    def queued(self, job_id: str) -> bool:
        """Whether the job is still queued or running. Raises Unavailable when the scheduler cannot be asked."""

    @abstractmethod
    def accounted(self, run: Run, collection_id: str, job_id: str,
                  request: dict[str, str | None]) -> dict[int, TaskEnd] | None:
        """How each task of collection `collection_id`'s job `job_id` (which asked for `request`) ended, by task,
        for the tasks accounting has a final word on; None while accounting has no row of the job. Raises
        Unavailable when accounting cannot be asked."""

    @abstractmethod
    def identity(self, environ: dict[str, str]) -> str | None:
        """The job id this process runs as (an array's own id for an array task), from its environment (None: not
        inside a job of this executor)."""

    @abstractmethod
    def task(self, environ: dict[str, str]) -> int | None:
        """The array task this process runs as, from its environment (None: not an array task)."""

    @abstractmethod
    def cpus(self, environ: dict[str, str]) -> int | None:
        """The CPUs the scheduler gave this task, from its environment (None: not said); a collection task uses no
        more threads than these, whether or not the cluster binds it to them."""



class Plans(ABC):
    """The plan: the executor's section of it, what a first attempt asks for, how many tasks run at once."""

    request_fields: ClassVar[dict[str, str]]  # the plan section's field of each key of `request` it can set

    @abstractmethod
    def section(self, asked: dict[str, Any]) -> dict[str, Any]:
        """The plan's `scheduler.<name>` resolved from the request's (defaults filled in). Pure."""

    @abstractmethod
    def check_section(self, section: dict[str, Any]) -> None:
        """Refuse (BadInput) a value of this executor's plan section that could never be submitted. Pure."""

    def preflight(self, plan: dict[str, Any], run_dir: str, python: str) -> None:
        """For the run's own executor, at tau-init before anything is written: refuse a plan that could never be
        submitted from `run_dir` (UsageError or BadInput), as the first submission would find out (nothing, for an
        engine that needs nothing of the run directory's place)."""
        return None

    def check_site(self, section: dict[str, Any]) -> list[str]:
        """What is wrong with a site profile's section for this executor (`tau-site validate`), as far as the engine
        answers now (a partition it does not have); nothing when it cannot be asked."""
        return []

    def check_request(self, run: Run, request: dict[str, str]) -> None:
        """Refuse (BadInput) a request a person grants (tau-retry --mem/--time: {mem and/or time} in
        `rules.escalation`'s spelling: 4G, 1:00:00) that this executor's site could never give, as far as its limits
        can be read; what cannot be read is not guessed (the submission finds out)."""
        return None

    @abstractmethod
    def request(self, section: dict[str, Any]) -> dict[str, str | None]:
        """What each task of a first attempt asks for, as {"mem", "time"} in `rules.escalation`'s spelling, 4G and
        1:00:00 (None where this executor or the plan sets nothing): the request `retry.escalate` grows. Pure."""

    @abstractmethod
    def gpus(self, section: dict[str, Any]) -> int:
        """How many GPUs each task is given under this section of the plan (0: none), which the services' GPUs must
        fit (tau-init refuses a plan whose services need more). Pure."""

    @abstractmethod
    def limits(self, plan: dict[str, Any]) -> Limits:
        """The limits the plan sets on this run's submissions."""


class Submits(ABC):
    """Submissions: `lifecycle.submission`'s journal calls `render`, then `hand_off`, and `resolve` for an entry whose
    hand-off may or may not have happened."""

    def render(self, run: Run, plan: dict[str, Any]) -> str | None:
        """What the submission hands the scheduler (a job script), rendered before the journal entry is written
        so that a bad field is refused first; None when there is nothing to render (the engine reads the submission's
        plan itself)."""
        return None

    @abstractmethod
    def hand_off(self, run: Run, plan: dict[str, Any], text: str | None) -> str:
        """Hand a PREPARED submission's tasks to the scheduler; the job id. Raises SubmitRefused (definitely not
        submitted: the entry is retired) or Ambiguous (maybe submitted: the entry stays PREPARED for `resolve`)."""

    @abstractmethod
    def resolve(self, run: Run, plan: dict[str, Any], status: dict[str, Any]) -> Resolved:
        """Settle a PREPARED submission whose hand-off may or may not have happened: adopt its job, wait, retire
        it, or refuse (a conflict), as `rules.journal.resolve` decides."""


class Observes(ABC):
    """Attempts seen from outside: the queue's and accounting's word, what finished tasks used, the output file."""

    @abstractmethod
    def observe(self, run: Run, attempts: list[dict[str, Any]]) -> Observed:
        """The scheduler's word on each of these attempts now (read-only)."""

    @abstractmethod
    def usage(self, run: Run, submissions: list[tuple[dict[str, Any], str, set[int]]]) -> Measured:
        """What the finished tasks of these bound submissions ((plan, job id, the task indices already measured)
        each) used, for those whose figures are final; an executor may leave out the tasks already measured
        (tau-observe; tau-run(5) "usage.json")."""

    @abstractmethod
    def running(self, run: Run, attempt: dict[str, Any]) -> bool | None:
        """Whether the scheduler still has the attempt queued or running (None: it cannot be asked now)."""

    @abstractmethod
    def output_path(self, attempt: dict[str, Any]) -> str:
        """The allocation's own output file of an attempt, relative to the run directory."""


class Stops(ABC):
    """Stopping attempts the engine runs."""

    @abstractmethod
    def stop(self, run: Run, attempts: list[dict[str, Any]], whole_run: bool) -> Stopped:
        """Stop these live attempts (and with `whole_run`, whatever would start more of the run's tasks)."""


class Allocation(ABC):
    """Inside the allocation: who this process runs as (the fence), the GPUs it was given, its variables."""

    variables: ClassVar[tuple[Var[Any], ...]] = ()  # the variables it reads or sets (`env.Var`, read with env.read)

    @abstractmethod
    def identity(self, environ: dict[str, str]) -> dict[str, Any] | None:
        """The scheduler identity ({executor, job_id, task_index}) this process runs under, from its environment;
        None when it is not inside an allocation of this executor; Refused when it half is."""

    @abstractmethod
    def devices(self, environ: dict[str, str]) -> list[str] | None:
        """The GPUs this allocation was given, as CUDA_VISIBLE_DEVICES names them, in order (None: it says
        nothing of GPUs); tau splits them between the services' backends."""

    @abstractmethod
    def allocation_variables(self, environ: dict[str, str]) -> dict[str, str]:
        """The variables of the allocation's environment that its client gets (the scheduler's own, the devices it
        bound)."""


class Queue(ABC):
    """Optional: a queue shared with others, whose limits bound what a submission may ask now."""

    @abstractmethod
    def capacity(self, run: Run) -> Capacity:
        """What the scheduler lets this user queue now (asked before every submission): the array limits and the
        room the tightest submit limit leaves. Unavailable when the scheduler cannot be asked at all."""


class Starter(ABC):
    """Optional: a process of tau's own starts the tasks (a scheduler does not), and may die leaving a mess."""

    @abstractmethod
    def start(self, run: Run, plan: dict[str, Any]) -> None:
        """After a submission is bound to its job: whatever must run for its tasks to start (nothing under a
        scheduler that starts them itself)."""

    @abstractmethod
    def stalled(self, run: Run, plan: dict[str, Any]) -> bool:
        """Whether a bound submission's tasks wait on something that is gone (its starter died before starting
        them all): then `start` is called again."""

    @abstractmethod
    def sweep(self, run: Run) -> list[str]:
        """Tidy what the executor's own processes left when they died (run by tau-reconcile); what was swept."""


class Requeue(ABC):
    """Optional: the engine starts an allocation again (a requeue, a preemption)."""

    @abstractmethod
    def restarts(self, environ: dict[str, str]) -> int:
        """How many times the scheduler has started this allocation again (a requeue, a preemption): an attempt
        already running is taken up again only by the same allocation restarted."""


class Collects(ABC):
    """Optional: the engine runs a collection as a job of its own (a CPU job without GPUs)."""

    @abstractmethod
    def collection_jobs(self) -> CollectionJobs:
        """How a collection runs as a job of this executor's."""


OPTIONAL: dict[str, type] = {"queue": Queue, "starter": Starter, "requeue": Requeue, "collects": Collects}


class Executor(Plans, Submits, Observes, Stops, Allocation):
    """One executor: the five roles every engine plays, and the neutral answer of each optional role it does not
    (a subclass that plays one lists it among its bases, before `Executor`, and must implement it)."""

    name: ClassVar[str]

    def capacity(self, run: Run) -> Capacity:
        return UNLIMITED  # no queue of others: the engine runs what it is given, `limits` at a time

    def start(self, run: Run, plan: dict[str, Any]) -> None:
        return None  # the engine starts the tasks itself

    def stalled(self, run: Run, plan: dict[str, Any]) -> bool:
        return False  # nothing of tau's stands between a bound job and its tasks

    def sweep(self, run: Run) -> list[str]:
        return []  # no process of tau's own was left behind

    def restarts(self, environ: dict[str, str]) -> int:
        return 0  # an allocation is never started twice

    def collection_jobs(self) -> CollectionJobs | None:
        return None  # collected inline, in tau-collect itself, under its own locks
