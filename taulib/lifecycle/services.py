"""An attempt's services inside its allocation (tau-run(5) "Services"): each deployment's backends started in
process groups of their own, on the ports and GPUs tau gives them, watched (their processes, their probes) until
all are ready, their endpoints published to the client, and every one of them stopped when the attempt ends.

Reads: the plan's services and the programs run.json fixed for them, the allocation's environment. Writes: each
backend's output, appended to `services/NAME-K.log` in the attempt's folder (through the one writer). The
deployments' states (`deployments()`) are recorded in readiness.json by `lifecycle.readiness`.
Promises: a backend that exits fails its deployment at once, before the start timeout and while the client runs;
a backend ready once fails after `probe_failures` failed probes in a row; `stop` sends every backend's process group
SIGTERM, then SIGKILL `stop_grace` seconds later, and returns once every group is empty; a backend started by an
allocation that is killed before it could stop it gets SIGTERM from the kernel (`processes.parent_death`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, NamedTuple

from taulib import executors, jsonio, processes
from taulib.lifecycle.probes import Prober, Probe
from taulib.rules import environment as environment_rules
from taulib.rules import readiness as readiness_rules
from taulib.rules import services as service_rules
from taulib.rundir import layout

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.lifecycle.containers import Images
    from taulib.rundir.run import Run

KILL_PATIENCE = 10.0  # seconds a stopped group may take to go after SIGKILL before it is reported and left


class Failure(NamedTuple):
    """Why a deployment failed: a reason code (not_started, exited, probe_failed, readiness_timeout, gpus) and a
    message naming the service and its backend."""

    code: str
    message: str


class Backend:
    """One copy of a service: its number (1, 2, ...), port, devices and process."""

    __slots__ = ("number", "port", "devices", "proc", "state", "failures", "prober", "seen")

    def __init__(self, number: int) -> None:
        self.number, self.port = number, 0
        self.devices: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.state = "pending"
        self.failures = 0  # failed probes in a row since it was ready
        self.prober: Prober | None = None
        self.seen = 0  # the prober's results read so far


class Deployment:
    """One service of the plan and its backends."""

    def __init__(self, service: Record, fixed: Record, restarting: bool) -> None:
        self.service, self.name = service, service["name"]
        self.program, self.probe_program = fixed["program"], fixed["probe"]
        self.backends = [Backend(k) for k in range(1, service["backends"] + 1)]
        self.state = "restarting" if restarting else "pending"
        for backend in self.backends:
            backend.state = self.state
        self.endpoint = "pending"
        self.urls: list[str] = []
        self.last_probe: Probe | None = None
        self.started = 0.0  # monotonic

    def ready_backends(self) -> int:
        return sum(1 for b in self.backends if b.state == "ready")


def _ended(code: int) -> str:
    return f"exited with status {code}" if code >= 0 else f"was killed by signal {-code}"


class Services:
    """The deployments of one attempt in this allocation; `client` is the client's phase (waiting, running,
    ended), which the allocation sets; `changed` says that a deployment changed since readiness was last written."""

    def __init__(self, run: Run, attempt: Record, restarting: bool) -> None:
        fixed = (run.environment or {})["services"]
        self.run, self.attempt = run, attempt
        self.deployments_ = [Deployment(s, fixed[s["name"]], restarting) for s in run.plan["services"]]
        self.client = "waiting"
        self.changed = False
        self.failure: Failure | None = None
        self.images: Images | None = None  # the attempt's images, checked: a service that names one runs in it

    # -- starting -----------------------------------------------------------------------------------------------

    def start(self, environ: dict[str, str], devices: list[str] | None) -> Failure | None:
        """Start every backend (GPUs split, ports given, each in a process group of its own, its output in its
        log), then their probes; a Failure when the GPUs are too few or a backend cannot start."""
        services = [d.service for d in self.deployments_]
        split = service_rules.split(devices or [], services)
        if split is None:
            need = service_rules.gpus_needed(services)
            return self._fail(self.deployments_[0], "gpus", f"the services need {need} GPU(s) but the allocation was "
                              f"given {len(devices or [])} ({','.join(devices or []) or 'none'}); no service started")
        ports = _free_ports(sum(len(d.backends) for d in self.deployments_ if d.service["ports"] is None))
        sid, aid = self.attempt["shard_id"], self.attempt["attempt_id"]
        self.run.dir.make_folders(layout.attempt_file(sid, aid, "services"))
        allocation = executors.of_attempt(self.attempt).allocation_variables(environ)
        fixed = self.run.environment or {}
        stop_on_death = processes.parent_death(signal.SIGTERM)
        for d, devices_of in zip(self.deployments_, split, strict=True):
            d.state, d.started = "starting", time.monotonic()
            for backend, given in zip(d.backends, devices_of, strict=True):
                backend.port = d.service["ports"][backend.number - 1] if d.service["ports"] else ports.pop(0)
                backend.devices, backend.state = list(given), "starting"
                argv = [d.program, *service_rules.argv(d.service["command"][1:], backend.port)]
                env = self._environment(d, backend, environ, allocation)
                role = f"service {d.name}"
                if self.images is not None and role in self.images.by_role:
                    argv, env = self.images.command(self.images.launch(role, argv, env, backend.devices,
                                                                       backend.number), environ)
                log = self.run.dir.open_append(layout.service_log(sid, aid, d.name, backend.number))
                try:
                    backend.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                                    env=env, cwd=fixed.get("cwd"), close_fds=True, process_group=0,
                                                    preexec_fn=stop_on_death)
                except OSError as exc:
                    return self._fail(d, "not_started", f"service {d.name!r} backend {backend.number} could not "
                                      f"start {argv[0]!r}: {exc.strerror or exc}", backend)
                finally:
                    os.close(log)
        self.changed = True
        for d in self.deployments_:  # threads only now: a fork with preexec_fn must not meet a thread
            for backend in d.backends:
                probe = None if d.probe_program is None else \
                    [d.probe_program, *service_rules.argv(d.service["ready"]["command"][1:], backend.port)]
                backend.prober = Prober(d.service["ready"], backend.port, probe,
                                        self._environment(d, backend, environ, allocation), fixed.get("cwd"),
                                        d.service["probe_seconds"])
                backend.prober.start()
        return None

    def _environment(self, d: Deployment, backend: Backend, environ: dict[str, str],
                     allocation: dict[str, str]) -> dict[str, str]:
        """A backend's environment: the run's (as the client's: PATH, the allocation's, inherited, the plan's
        env), the service's env, the attempt's ids and the backend's own name, number, port and devices."""
        fixed = self.run.environment or {}
        tau = {**environment_rules.attempt_variables(self.run.path, self.run.run_id, self.attempt,
                                                     self.run.shard(self.attempt["shard_id"])["index"]),
               **service_rules.backend_variables(d.service, backend.number, backend.port, backend.devices,
                                                 allocation)}
        return environment_rules.client_environment(
            path=fixed.get("path", os.defpath), env={**self.run.plan["env"], **d.service["env"]},
            inherit=self.run.plan["inherit_env"], environ=environ, allocation=allocation, tau=tau)

    # -- watching -----------------------------------------------------------------------------------------------

    def check(self, now: float) -> Failure | None:
        """Look at every backend's process and newest probe (`now`: monotonic); the first failure, if any."""
        if self.failure is not None:
            return self.failure
        when = "while the client ran" if self.client == "running" else "before it was ready"
        for d in self.deployments_:
            if d.state != "starting" and d.state != "ready":
                continue
            for backend in d.backends:
                code = None if backend.proc is None else backend.proc.poll()
                if code is not None:
                    return self._fail(d, "exited", f"service {d.name!r} backend {backend.number} {_ended(code)} "
                                      f"{when}", backend)
                failure = self._probed(d, backend, when)
                if failure is not None:
                    return failure
            if d.state == "starting" and now - d.started >= d.service["start_timeout"] and not self._all(d):
                return self._fail(d, "readiness_timeout", f"readiness_timeout: service {d.name!r} had "
                                  f"{d.ready_backends()} of {len(d.backends)} backends ready after "
                                  f"{d.service['start_timeout']} s (its start_timeout)")
        return None

    def _probed(self, d: Deployment, backend: Backend, when: str) -> Failure | None:
        prober = backend.prober
        if prober is None or prober.count == backend.seen or prober.latest is None:
            return None
        backend.seen, probe = prober.count, prober.latest
        self._evidence(d, probe)
        if probe.outcome == "success":
            backend.failures = 0
            if backend.state == "starting":
                backend.state, self.changed = "ready", True
            return None
        if backend.state != "ready":
            return None  # still starting: only the start timeout ends the wait
        backend.failures += 1
        if backend.failures < d.service["probe_failures"]:
            return None
        return self._fail(d, "probe_failed", f"service {d.name!r} backend {backend.number} failed "
                          f"{backend.failures} probes in a row {when} ({probe.message})", backend)

    def _evidence(self, d: Deployment, probe: Probe) -> None:
        if d.last_probe is None or probe.observed_at >= d.last_probe.observed_at:
            d.last_probe = probe

    def _fail(self, d: Deployment, code: str, message: str, backend: Backend | None = None) -> Failure:
        d.state, self.changed = "failed", True
        if d.endpoint == "pending":
            d.endpoint = "failed"
        if backend is not None:
            backend.state = "failed"
        at = time.time() if d.last_probe is None else max(time.time(), d.last_probe.observed_at)
        d.last_probe = Probe("failure", code, message, at)
        self.failure = Failure(code, message)
        return self.failure

    @staticmethod
    def _all(d: Deployment) -> bool:
        return d.ready_backends() == len(d.backends)

    def all_ready(self) -> bool:
        return all(d.state == "starting" and self._all(d) for d in self.deployments_)

    def publish(self) -> dict[str, list[str]]:
        """Every deployment ready and its endpoint published: its backends' URLs by service name."""
        for d in self.deployments_:
            d.state, d.endpoint = "ready", "published"
            d.urls = [service_rules.url(b.port) for b in d.backends]
        self.changed = True
        return {d.name: list(d.urls) for d in self.deployments_}

    # -- stopping -----------------------------------------------------------------------------------------------

    def stop(self, grace: float | None = None) -> list[str]:
        """Stop every backend: its probes, then SIGTERM to its process group, SIGKILL `stop_grace` seconds later
        (or `grace`, when shorter: a stop signal's own deadline), until every group is empty. Deployments that did
        not fail are stopped. Returns the groups that did not go (none, unless the kernel refuses)."""
        for d in self.deployments_:
            for backend in d.backends:
                if backend.prober is not None:
                    backend.prober.stop()
        groups: dict[int, float] = {}  # process group -> when SIGKILL is due
        now = time.monotonic()
        for d in self.deployments_:
            wait = d.service["stop_grace"] if grace is None else min(grace, d.service["stop_grace"])
            for backend in d.backends:
                if backend.proc is not None and _signal(backend.proc.pid, signal.SIGTERM):
                    groups[backend.proc.pid] = now + wait
        left = _drain(groups, [b.proc for d in self.deployments_ for b in d.backends if b.proc is not None])
        for d in self.deployments_:
            if d.state != "failed":
                d.state = "stopped"
            for backend in d.backends:
                if backend.state != "failed":
                    backend.state = "stopped"
        self.changed = True
        return [f"process group {pgid}" for pgid in left]

    # -- what readiness records -----------------------------------------------------------------------------------

    def deployments(self) -> list[Record]:
        """The deployments as readiness.json records them."""
        return [{"name": d.name, "state": d.state, "expected_backends": len(d.backends),
                 "ready_backends": d.ready_backends(), "endpoint": d.endpoint, "urls": list(d.urls),
                 "last_probe": None if d.last_probe is None else {
                     "observed_at": jsonio.format_time(d.last_probe.observed_at), "outcome": d.last_probe.outcome,
                     "reason_code": d.last_probe.reason_code, "message": readiness_rules.clean(d.last_probe.message)},
                 "backends": [{"backend": b.number, "state": b.state, "port": b.port or None,
                               "devices": list(b.devices), "pid": None if b.proc is None else b.proc.pid}
                              for b in d.backends]}
                for d in self.deployments_]

    def summary(self) -> str:
        """Each deployment's ready backends in words: `generator 1/2 ready, judge 0/1 ready`."""
        return ", ".join(f"{d.name} {d.ready_backends()}/{len(d.backends)} {d.state}" for d in self.deployments_)


def _free_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 now (held open together while they are picked). Another process
    may still take one before its backend binds it: that backend then exits, failing its deployment, and the
    attempt is retried like any other that failed; a plan that must avoid this fixes its ports."""
    held = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((service_rules.HOST, 0))
            held.append(sock)
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def _signal(pgid: int, signum: int) -> bool:
    """Signal a process group; False when it is empty."""
    try:
        os.killpg(pgid, signum)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _drain(groups: dict[int, float], procs: list[subprocess.Popen[bytes]]) -> list[int]:
    """Wait until every process group of `groups` is empty, sending SIGKILL to each when its time comes; the
    backends' own processes are collected through their Popen, and processes of the groups this process adopted
    (a backend's children whose parent died) as they end. Returns the groups still there after KILL_PATIENCE."""
    killed: dict[int, float] = {}
    owned = {proc.pid for proc in procs}  # collected by their Popen only, which would otherwise lose their status
    while groups:
        for proc in procs:
            proc.poll()
        for pid in processes.children():
            try:
                if pid not in owned and os.getpgid(pid) in groups:
                    processes.reap(pid)
            except ProcessLookupError:
                pass
        now = time.monotonic()
        for pgid, due in list(groups.items()):
            if not _signal(pgid, 0):
                del groups[pgid]
            elif now >= due and pgid not in killed:
                _signal(pgid, signal.SIGKILL)
                killed[pgid] = now
            elif pgid in killed and now - killed[pgid] > KILL_PATIENCE:
                print(f"tau-attempt: process group {pgid} did not end after SIGKILL", file=sys.stderr)
                return sorted(groups)
        time.sleep(processes.POLL)
    return []
