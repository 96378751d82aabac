"""The order of work inside an allocation once it is fenced (tau-attempt(1) "The order of work"):

  1. the client's preflight (`client.command`): its program still an executable file, its inherited variables
     there, its folder and its dataset folder usable; with images (`lifecycle.containers`), each image checked
     against its pin (a changed one fails the attempt "image changed", not retried) and the client's program looked
     up inside its image; in a run over a dataset, the shard's rows cut into the attempt's folder, every piece
     verified as it is read (`inputs.cut`: a changed input fails the attempt "input changed", not retried); a
     failure ends the attempt before any service starts;
  2. the services (`lifecycle.services`), when the plan has any: every backend started on its GPUs and port;
  3. their probes, until every backend is ready or a start timeout passes, a backend that exits failing its
     deployment at once; readiness.json written at every change and every heartbeat meanwhile, so that a model
     still loading is never taken for a stall; a stop signal or a cancellation ends the wait;
  4. the endpoints published: endpoints.json, and TAU_SERVICE_<NAME>_URL(S) and TAU_SERVICES_FILE for the client;
  5. the client (`client.run_client`), the services watched while it runs;
  6. `cleanup`, the one cleanup owner, whatever ended the attempt: every service stopped (SIGTERM to its process
     group, SIGKILL after its grace), then every process left behind (a client's daemon, a service's orphan),
     adopted by this process as their subreaper, stopped and named.

Reads: the plan, the run's fixed environment, the allocation's environment, the cancellation records. Writes:
readiness.json (`lifecycle.readiness`) and endpoints.json (through the one writer, under the shard lock).
Promises: no service outlives its attempt; the client never starts before every deployment is ready; the
allocation ends only once everything it started is gone.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from taulib import executors, failpoints, jsonio, processes
from taulib.lifecycle import client, readiness
from taulib.lifecycle.client import ClientOutcome
from taulib.rules import services as service_rules
from taulib.rundir import layout, locks

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.inputs.cut import Cut
    from taulib.lifecycle.containers import Images
    from taulib.lifecycle.services import Failure, Services
    from taulib.rundir.run import Run

WAIT_POLL = 0.2  # seconds between looks at the services while they start
WRITE_WAIT = 10.0  # seconds a readiness change waits for its locks (a heartbeat waits client.STOP_LOCK_WAIT)
LEFTOVER_GRACE = 5.0  # seconds a process left behind has between SIGTERM and SIGKILL
SIGNAL_GRACE = 2.0  # the same, and a service's grace at most, once the scheduler has signalled the allocation


def work(run: Run, attempt: Record, environ: dict[str, str], stop: client.Stop,
         services: Services | None, images: Images | None = None) -> ClientOutcome:
    """Steps 1 to 5 of the module docstring; the caller runs `cleanup` whatever happens."""
    started = jsonio.now_rfc3339()
    prepared, problem = client.command(run, attempt, environ)
    if problem is not None:
        return ClientOutcome(started, None, None, problem, None, code="preflight")
    if images is not None:
        failed = images.check(environ)
        for role, argv in _programs(run, prepared, images).items():
            why = None if failed is not None else images.lookup(role, argv, environ)
            failed = failed if why is None else ("preflight", f"{why}; nothing was started")
        if failed is not None:
            return ClientOutcome(started, None, None, failed[1], None, code=failed[0], images=images.digests())
    sha = None
    if run.plan.get("input") is not None:
        cut = _cut(run, attempt, stop, services)
        if cut is None:
            return ClientOutcome(started, None, stop.signum, None, stop.signum)
        if cut.code is not None:
            return _digests(ClientOutcome(started, None, None, cut.error, None, code=cut.code), images)
        prepared.env.update(cut.variables)
        sha = cut.sha256
    return _digests(_services_and_client(run, attempt, environ, stop, services, images, prepared, started), images,
                    sha)


def _services_and_client(run: Run, attempt: Record, environ: dict[str, str], stop: client.Stop,
                         services: Services | None, images: Images | None, prepared: client.Prepared,
                         started: str) -> ClientOutcome:
    """Steps 2 to 5."""
    if services is None:
        return client.run_client(run, attempt, _contained(prepared, images, environ, attempt, stop), stop)
    failure = services.start(environ, executors.of_attempt(attempt).devices(environ))
    failpoints.hit("attempt.services_started")
    if failure is None:
        outcome = _await_ready(run, attempt, services, stop, started)
        if outcome is not None:
            return outcome
        urls = services.publish()
        path = os.path.join(run.path, _publish(run, attempt, urls))
        _write(run, attempt, services, WRITE_WAIT)
        failpoints.hit("attempt.endpoints_published")
        prepared.env.update(service_rules.endpoint_variables(urls, path))
        return client.run_client(run, attempt, _contained(prepared, images, environ, attempt, stop, gpus=False),
                                 stop, services)
    _write(run, attempt, services, WRITE_WAIT)
    return _failed(started, failure)


class _Stopped(Exception):
    """A stop signal arrived while the input was cut."""


def _cut(run: Run, attempt: Record, stop: client.Stop, services: Services | None) -> Cut | None:
    """The attempt's input cut (`inputs.cut`), readiness written every heartbeat meanwhile; None when a stop signal
    ended it."""
    from taulib.inputs import cut

    heartbeat = run.plan["windows"]["heartbeat_seconds"]
    next_beat = time.monotonic() + heartbeat

    def stopping() -> None:
        nonlocal next_beat
        if stop.signum is not None:
            raise _Stopped()
        if time.monotonic() >= next_beat:
            next_beat = time.monotonic() + heartbeat
            client.briefly(run, attempt, client.STOP_LOCK_WAIT,
                           lambda: readiness.write(run, attempt, "starting", "cutting the shard's input rows",
                                                   services=services))

    try:
        return cut.prepare(run, attempt, stopping)
    except _Stopped:
        return None


def _programs(run: Run, prepared: client.Prepared, images: Images) -> dict[str, list[str]]:
    """The command of each program that runs in an image (the client's, each service's), to look up there."""
    found = {"client": prepared.argv} if "client" in images.by_role else {}
    for service in run.plan.get("services") or []:
        if f"service {service['name']}" in images.by_role:
            found[f"service {service['name']}"] = list(service["command"])
    return found


def _digests(outcome: ClientOutcome, images: Images | None, input_sha256: str | None = None) -> ClientOutcome:
    """The outcome with the digest each image ran in, and its input file's as cut."""
    if input_sha256 is not None:
        outcome = outcome._replace(input_sha256=input_sha256)
    return outcome if images is None else outcome._replace(images=images.digests())


def _contained(prepared: client.Prepared, images: Images | None, environ: dict[str, str], attempt: Record,
               stop: client.Stop, gpus: bool = True) -> client.Prepared:
    """The client's command as it runs: itself, or its image's runtime running it (with the allocation's GPUs,
    none beside services); a container the runtime's own stop does not end is removed by force (`stop.hurry`)."""
    if images is None or "client" not in images.by_role:
        return prepared
    devices = (executors.of_attempt(attempt).devices(environ) or []) if gpus else []
    launch = images.launch("client", prepared.argv, prepared.env, devices)
    argv, env = images.command(launch, environ)
    stop.hurry = lambda: images.remove(launch, environ)
    return client.Prepared(argv, env, prepared.cwd)


def _failed(started: str, failure: Failure) -> ClientOutcome:
    return ClientOutcome(started, None, None, f"{failure.message}; the client was never started", None,
                         code=failure.code)


def _await_ready(run: Run, attempt: Record, services: Services, stop: client.Stop,
                 started: str) -> ClientOutcome | None:
    """Wait until every deployment is ready (None), or what ended the wait: a deployment's failure, a stop signal,
    a cancellation."""
    heartbeat = run.plan["windows"]["heartbeat_seconds"]
    now = time.monotonic()
    next_beat, next_check = now, now + client.CANCEL_CHECK
    while True:
        if stop.signum is not None:
            return ClientOutcome(started, None, stop.signum, None, stop.signum)
        now = time.monotonic()
        failure = services.check(now)
        if failure is not None:
            _write(run, attempt, services, WRITE_WAIT)
            return _failed(started, failure)
        if services.all_ready():
            return None
        if now >= next_check:
            next_check = now + client.CANCEL_CHECK
            why = client.cancelled(run, attempt)
            if why is not None:
                return ClientOutcome(started, None, None, None, None, f"{why}; the client was never started")
        if services.changed or now >= next_beat:
            next_beat = now + heartbeat
            _write(run, attempt, services, WRITE_WAIT if services.changed else client.STOP_LOCK_WAIT)
        stop.wait(WAIT_POLL)


def _write(run: Run, attempt: Record, services: Services, wait: float, message: str | None = None) -> None:
    """Readiness now (version 2), waiting `wait` seconds at most for the locks (else left to the next write)."""
    client.briefly(run, attempt, wait, lambda: readiness.write(run, attempt, "starting", message, services=services))


def _publish(run: Run, attempt: Record, urls: dict[str, list[str]]) -> str:
    """endpoints.json: every service's URLs, for the client (TAU_SERVICES_FILE); its path in the run."""
    rel = layout.attempt_file(attempt["shard_id"], attempt["attempt_id"], layout.ENDPOINTS)
    with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, locks.shard_lock_name(attempt["shard_id"])):
        current = run.dir.read(rel, "tau.endpoints")
        run.dir.replace(rel, {
            "kind": "tau.endpoints", "schema_version": 1, "run_id": run.run_id, "shard_id": attempt["shard_id"],
            "attempt_id": attempt["attempt_id"], "revision": 1 if current is None else current["revision"] + 1,
            "restarts": attempt["restarts"], "published_at": jsonio.now_rfc3339(),
            "services": [{"name": name, "url": found[0], "urls": found} for name, found in urls.items()]})
    return rel


def cleanup(run: Run, attempt: Record, services: Services | None, stop: client.Stop,
            images: Images | None = None, environ: dict[str, str] | None = None) -> list[Record]:
    """The one cleanup owner (step 6): every service stopped, then every process left behind stopped and named
    ({pid, command}). Shorter graces once the scheduler has signalled the allocation (it kills what is left soon)."""
    signalled = stop.signum is not None
    if services is not None:
        services.stop(SIGNAL_GRACE if signalled else None)
    left = processes.sweep(grace=SIGNAL_GRACE if signalled else LEFTOVER_GRACE)
    if images is not None:  # a runtime killed mid-run leaves its container's record: removed
        images.cleanup(environ if environ is not None else {})
    if services is not None and signalled:  # the record of the stop, now with the services stopped
        _write(run, attempt, services, client.STOP_LOCK_WAIT,
               f"stopped by signal {stop.signum}; the scheduler's evidence decides the attempt")
    return left
