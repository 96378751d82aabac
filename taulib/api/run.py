"""A run for Python programs: `create` and `open` return a `Run`, whose methods make the same library call as the
command of the same name (tau-init, tau-submit, tau-status, tau-observe | tau-reconcile, tau-drive, tau-retry,
tau-cancel, tau-logs, tau-collect) and return its document as a typed value (`taulib.api.values`).

Reads and Writes: only through those library calls, exactly as the commands do; this module applies no rule of its
own. Promises: a `Run` holds no open file: each call opens the run directory (`taulib.rundir.run.Run`), makes its
one call and closes it, so a long-lived process leaks no descriptor and sees every change made by others; a failure
is a `taulib.errors.TauError` whose `code` is the exit status the command would have (an operating-system error
is an `IOFailure`, 74, as the commands report it); nothing heavy (pyarrow, the Kubernetes and Azure clients) is
imported before a call needs it.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from taulib.api.values import Cancellation, Collection, DriveResult, RunStatus, Submission
from taulib.errors import BadInput, Busy, CheckFailed, IOFailure, TauError, UsageError

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from taulib.rundir.run import Run as Opened

Shard = str | int  # "shard-00007", "7" or 7
Shards = Shard | Iterable[Shard] | None


class Timeout(Busy, TimeoutError):
    """`Run.wait` or `Run.drive(timeout=...)` ran out of time before the run finished: a `Busy` (75: not yet
    known, try again) that is also Python's TimeoutError."""


def create(run_dir: str | os.PathLike[str], plan: dict[str, Any], *,
           from_run: str | os.PathLike[str] | None = None) -> Run:
    """Create the run `run_dir` from `plan` (the plan request tau-init reads, as a dict) and return it, as
    `tau-init RUN_DIR [--from OLD_RUN] < plan.json` does. Creating it again with the same plan is a no-op; with
    another plan it raises Conflict (73). A bad plan raises BadInput (65) with tau-init's message; a missing client
    program NotFound (66). The client's program and its relative paths are resolved against the current folder,
    as tau-init resolves them against the shell's.

    With `from_run`, every valid winner of that older run whose shard has the same record range is adopted
    (tau-init(1) "A new run from an old one"); `Run.created["adopted"]` says which.

    >>> plan = {"records": 800, "shards": 8, "command": ["python3", "client.py"]}
    >>> run = tau.create("runs/demo", plan)  # doctest: +SKIP
    >>> run.created["shard_count"]  # doctest: +SKIP
    8
    """
    from taulib import jsonio
    from taulib.lifecycle import adopt

    path = os.fspath(run_dir)
    try:  # exactly the JSON document tau-init would read (tuples are arrays; a Path is refused, not guessed)
        request = jsonio.loads(jsonio.canonical(plan), "plan")
    except TypeError as exc:
        raise BadInput(f"plan is not a JSON document: {exc}") from None
    with _errors():
        result = adopt.create(path, request, None if from_run is None else os.fspath(from_run))
    return Run(result["run_dir"], created=result)


def open(run_dir: str | os.PathLike[str]) -> Run:
    """The existing run `run_dir`; NotFound (66) when it is not a tau run."""
    run = Run(os.fspath(run_dir))
    with run._opened():
        pass
    return run


class Run:
    """A tau run, named by its folder. Every method opens the run directory, makes the library call of the command
    it is named after, and closes it again; the object holds nothing open and may live as long as the program.

    `path` is the run directory (absolute); `run_id`, `shard_count` and `plan` (the resolved plan, tau-run(5)) are
    read when the run is opened; `created` is tau-init's document when this object came from `create`.
    """

    def __init__(self, path: str, created: dict[str, Any] | None = None) -> None:
        from taulib.rundir.run import Run as Opened

        with _errors(), Opened(path) as run:
            self.path: str = run.path
            self.run_id: str = run.run_id
            self.shard_count: int = run.shard_count
            self.plan: dict[str, Any] = run.plan
        self.created = created

    def __repr__(self) -> str:
        return f"Run({self.path!r})"

    # -- the run's shards moving --------------------------------------------------------------------------------

    def submit(self, limit: int | None = None, shards: Shards = None) -> Submission:
        """Give every shard without an attempt its first one (tau-submit); idempotent. `limit` (the first N shards)
        or `shards` (these shards, by id or number) submits a canary: the next `submit` (or `drive`) submits the
        rest."""
        from taulib.lifecycle import retry

        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise UsageError(f"limit {limit!r} is not a whole number of shards from 1")
        with self._opened() as run:
            return Submission.of(retry.initial(run, limit=limit, shards=_shard_ids(shards)))

    def retry(self, shards: Shards = None, reopen: bool = False, mem: str | None = None,
              time: str | None = None) -> Submission:
        """Submit a new attempt for every retryable shard, or for the named ones (an exhausted shard named is
        granted one more), as one submission (tau-retry); idempotent. With `reopen`, the cancellation of the named
        shards (none named: of the run) is lifted first; with `mem` or `time` (Slurm's spelling), the named shards
        are granted that request (tau-retry --mem/--time). `reason` says why nothing was submitted."""
        from taulib.lifecycle import retry

        with self._opened() as run:
            return Submission.of(retry.retry(run, _shard_ids(shards), reopen=reopen, grant={"mem": mem, "time": time}))

    def cancel(self, shards: Shards = None, attempt: bool = False) -> Cancellation:
        """Cancel the run, or the named shards (tau-cancel): recorded first, then their live attempts stopped; a
        cancelled shard is never started again until `retry(reopen=True)`. With `attempt`, only the live attempt of
        each named shard is stopped (it fails, 'stopped by the user'), and the shard stays retryable. What already
        ended is left alone (`noop` says so). Unavailable (69) when an attempt could not be stopped (the
        cancellation is recorded all the same)."""
        from taulib.errors import Unavailable
        from taulib.lifecycle import cancel

        with self._opened() as run:
            result = cancel.cancel(run, _shard_ids(shards), attempt=attempt)
        if result["problem"]:
            raise Unavailable(result["problem"], result=result)
        return Cancellation.of(result)

    # -- looking at it ------------------------------------------------------------------------------------------

    def status(self) -> RunStatus:
        """The run's status now, read-only (tau-status): the executor asked, the rules applied, nothing written."""
        from taulib.lifecycle import status

        with self._opened() as run:
            return RunStatus.of(status.status(run))

    def reconcile(self) -> RunStatus:
        """Ask the executor about the live attempts and apply what it says under the run's locks, then return the
        status (`tau-observe RUN | tau-reconcile RUN`, as tau-drive's cycle does it)."""
        from taulib.lifecycle import observe

        with self._opened() as run:
            return RunStatus.of(observe.observe_and_reconcile(run))

    def logs(self, shard: Shard, attempt: str | None = None, service: str | None = None) -> str:
        """The output of the shard's newest attempt (or of `attempt`, such as "attempt-0001"), as tau-logs prints
        it: the client's stdout and stderr, then the allocation's own output headed by its path; with `service`
        ("generator-2", or a service's name when it has one backend), that backend's output instead. NotFound
        (66) for a shard, an attempt or a service backend the run does not have; UsageError (2) for the name of a
        service of several backends."""
        from taulib.lifecycle import logs

        with self._opened() as run:
            return logs.render(run, _shard_id(shard), attempt, service).text().decode("utf-8", "replace")

    # -- driving it to the end ----------------------------------------------------------------------------------

    def drive(self, interval: float = 10.0, *, once: bool = False, notify: str | None = None,
              status_file: str | None = None, timeout: float | None = None,
              on_cycle: Callable[[DriveResult], None] | None = None,
              collect: str | os.PathLike[str] | None = None, allow_missing: bool = False) -> DriveResult:
        """Keep the run moving, as tau-drive does: each cycle observes and reconciles it, publishes winners, stops
        stalled attempts, submits what was never submitted or was deferred, and retries within the budget; cycles
        `interval` seconds apart until the run succeeded or stopped (budget, cancellation). `once` does one cycle.
        `notify` is a shell command run once per change a person is owed (tau-drive --notify); `on_cycle` is called
        with each cycle's result. A run that finished without succeeding is returned, not raised (see `wait`).
        With `collect` (a destination, as `Run.collect` takes it), the run is collected there once it succeeded, as
        tau-drive --collect does (the merge waited for under Slurm; a destination that already holds this
        collection is reported, not redone): the result's `collection`, None when nothing was collected. With
        `allow_missing` too, a run that finished without succeeding is collected with the winners there are
        (tau-drive --allow-missing). With `timeout` (seconds), Timeout (75) is raised once the next cycle would
        begin past it. A bad `limit`, `interval` or shard (neither an id nor a number), or `allow_missing` without
        `collect`, is a UsageError (2), as a bad option is for a command."""
        from taulib.lifecycle import drive

        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0.1 <= interval <= 3600:
            raise UsageError(f"interval {interval!r} is not a number of seconds from 0.1 to 3600 (as tau-drive's)")
        if allow_missing and collect is None:
            raise UsageError("allow_missing says how collect collects: give collect=DESTINATION too")
        how = None if collect is None else drive.Collect(os.fspath(collect), allow_missing)
        with self._opened() as run:
            if once:
                def told(doc: dict[str, Any]) -> None:
                    if on_cycle is not None:
                        on_cycle(DriveResult.of(doc))

                return DriveResult.of(drive.once(run, notify, status_file, told, collect=how))
            deadline = None if timeout is None else time.monotonic() + timeout

            def shown(doc: dict[str, Any]) -> None:
                if on_cycle is not None:
                    on_cycle(DriveResult.of(doc))
                if doc["finished"] is None:
                    self._in_time(deadline, interval, doc["state"])

            def hitch(exc: TauError) -> None:  # a busy lock, a scheduler that did not answer: tried again
                self._in_time(deadline, interval, f"waiting ({exc.message})")

            return DriveResult.of(drive.drive(run, interval, notify, status_file, shown, hitch=hitch, collect=how))

    def wait(self, timeout: float | None = None, interval: float = 10.0, *,
             notify: str | None = None) -> RunStatus:
        """Drive the run until it has finished (`drive`) and return its final status; CheckFailed (1) when it
        finished without succeeding (as tau-drive exits 1), Timeout (75) after `timeout` seconds.

        >>> run.wait(timeout=3600).counts  # doctest: +SKIP
        {'succeeded': 8, ...}
        """
        result = self.drive(interval, notify=notify, timeout=timeout)
        if not result.succeeded:
            raise CheckFailed(f"run {result.run_id!r} finished without succeeding: {result.finished}",
                              state=result.state, finished=result.finished)
        return result.status

    # -- its dataset --------------------------------------------------------------------------------------------

    def collect(self, destination: str | os.PathLike[str], fmt: str | None = None, *,
                rows_per_partition: int | None = None, allow_missing: bool = False, wait: bool = True,
                progress: bool | None = False) -> Collection:
        """Merge every shard's winner into one dataset at `destination` (tau-collect): below the run's workspace or
        an allowed root of the plan, and not existing yet (Conflict, 73, otherwise); in the plan's format and
        partition size unless `fmt` (parquet, csv, jsonl, ...) or `rows_per_partition` say otherwise. With
        `allow_missing`, the winners there are, the shards without one recorded in `missing`. Under Slurm the
        merge runs as a CPU job, followed to its end unless `wait` is False. Asked again with the same destination
        and shape, the collection is reported, not redone. `progress` shows progress on standard error (None: when
        it is a terminal)."""
        from taulib.collect import collection

        with self._opened() as run:
            return Collection.of(collection.collect(run, os.fspath(destination), wait=wait, fmt=fmt,
                                                    rows_per_partition=rows_per_partition, progress=progress,
                                                    allow_missing=allow_missing))

    # -- helpers ------------------------------------------------------------------------------------------------

    def _opened(self) -> AbstractContextManager[Opened]:
        """The run directory, opened for one call and closed after it, its errors as the commands report them."""
        return _open_run(self.path)

    def _in_time(self, deadline: float | None, interval: float, state: str) -> None:
        if deadline is not None and time.monotonic() + interval > deadline:
            raise Timeout(f"run {self.run_id!r} has not finished in time: {state}", run_dir=self.path)


@contextmanager
def _open_run(path: str) -> Iterator[Opened]:
    from taulib.rundir.run import Run as Opened

    with _errors(), Opened(path) as run:
        yield run


@contextmanager
def _errors() -> Iterator[None]:
    """An operating-system error as the commands report it: IOFailure (74), the OSError as its cause."""
    try:
        yield
    except TauError:  # Timeout is an OSError too (TimeoutError), and stays what it is
        raise
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise IOFailure(f"{exc.strerror or exc}{where}; nothing that was committed is lost, run the call again "
                        "once the cause is gone", errno=exc.errno) from exc


def _shard_id(shard: Shard) -> str:
    """A shard as a person names it (`"shard-00007"`, `"7"`, `7`), as its canonical id; what is no shard's name is
    passed on as given, for the library to refuse (NotFound, 66), as the commands do."""
    from taulib.rundir import layout

    if isinstance(shard, bool) or not isinstance(shard, (str, int)):
        raise UsageError(f"a shard is named by its id or its number ('shard-00007' or 7), not {shard!r}")
    return layout.canonical_shard_id(str(shard))


def _shard_ids(shards: Shards) -> list[str] | None:
    if shards is None:
        return None
    if isinstance(shards, (str, int)):
        return [_shard_id(shards)]
    return [_shard_id(s) for s in shards] or None
