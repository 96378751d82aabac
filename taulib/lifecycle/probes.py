"""Probing a service's backends for readiness (tau-run(5) "Services"): an HTTP GET that must answer 2xx (and,
with `expect`, a body holding that text), a TCP connection, or a command that must exit 0, each bounded by a
timeout, each described by a reason code and a message fit for readiness.json.

Reads: the backend's port on 127.0.0.1 (its HTTP answer, at most BODY bytes of it), a probe command's exit status.
Writes nothing; a probe command runs in a process group of its own and is killed, group and all, when it outlives
its timeout or the prober is stopped. A `Prober` probes one backend in a thread of its own, every period, so that
a slow answer never holds up the allocation; the allocation reads its latest result.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import NamedTuple

from taulib.rules import services as service_rules

BODY = 1 << 20  # bytes of an HTTP answer read for `expect`, at most
TIMEOUT = 30.0  # seconds a probe may take, at most, whatever its period


class Probe(NamedTuple):
    """One probe's result: success or failure, its reason code (ok, http_status, expect_missing,
    connection_refused, probe_timeout, probe_error, command_failed), a message, and when (epoch seconds)."""

    outcome: str
    reason_code: str
    message: str
    observed_at: float


def _result(ok: bool, code: str, message: str) -> Probe:
    return Probe("success" if ok else "failure", code, message, time.time())


def http(port: int, path: str, expect: str | None, timeout: float) -> Probe:
    """GET http://127.0.0.1:PORT/PATH: a success when it answers 2xx (and its body holds `expect`)."""
    import http.client

    what = f"GET {path}"
    conn = http.client.HTTPConnection(service_rules.HOST, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"User-Agent": "tau-probe", "Connection": "close"})
        answer = conn.getresponse()
        body = answer.read(BODY)
    except ConnectionRefusedError:
        return _result(False, "connection_refused", f"{what}: connection refused")
    except TimeoutError:
        return _result(False, "probe_timeout", f"{what}: no answer within {timeout:g} s")
    except (OSError, http.client.HTTPException) as exc:
        return _result(False, "probe_error", f"{what}: {type(exc).__name__}: {exc}")
    finally:
        conn.close()
    if not 200 <= answer.status < 300:
        return _result(False, "http_status", f"{what} answered {answer.status}")
    if expect is not None and expect.encode() not in body:
        return _result(False, "expect_missing", f"{what} answered {answer.status} without {expect!r}")
    return _result(True, "ok", f"{what} answered {answer.status}")


def tcp(port: int, timeout: float) -> Probe:
    """A TCP connection to 127.0.0.1:PORT: a success when it is accepted."""
    import socket

    try:
        with socket.create_connection((service_rules.HOST, port), timeout=timeout):
            return _result(True, "ok", f"port {port} accepts connections")
    except ConnectionRefusedError:
        return _result(False, "connection_refused", f"port {port}: connection refused")
    except TimeoutError:
        return _result(False, "probe_timeout", f"port {port}: no answer within {timeout:g} s")
    except OSError as exc:
        return _result(False, "probe_error", f"port {port}: {exc.strerror or exc}")


class Prober(threading.Thread):
    """Probes one backend every `period` seconds (the first time at once) until `stop()`; `latest` is the newest
    result and `count` how many there were."""

    def __init__(self, ready: dict[str, object], port: int, command: list[str] | None, env: dict[str, str],
                 cwd: str | None, period: float) -> None:
        super().__init__(daemon=True, name=f"probe-{port}")
        self.ready, self.port, self.command, self.env, self.cwd = ready, port, command, env, cwd
        self.period = period
        self.timeout = min(float(period), TIMEOUT)
        self.latest: Probe | None = None
        self.count = 0
        self._stopped = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self._stopped.is_set():
            result = self.once()
            if self._stopped.is_set():
                return
            self.latest, self.count = result, self.count + 1
            self._stopped.wait(self.period)

    def once(self) -> Probe:
        if self.command is not None:
            return self._command()
        if "http" in self.ready:
            expect = self.ready.get("expect")
            return http(self.port, str(self.ready["http"]), None if expect is None else str(expect), self.timeout)
        return tcp(self.port, self.timeout)

    def _command(self) -> Probe:
        assert self.command is not None
        with self._lock:
            if self._stopped.is_set():
                return _result(False, "probe_error", "stopped")
            try:
                self._proc = proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL,
                                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                     env=self.env, cwd=self.cwd, close_fds=True, process_group=0)
            except OSError as exc:
                return _result(False, "probe_error", f"cannot run the probe command: {exc.strerror or exc}")
        try:
            code = proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            return _result(False, "probe_timeout", f"the probe command did not exit within {self.timeout:g} s")
        finally:
            with self._lock:
                self._proc = None
        if code == 0:
            return _result(True, "ok", "the probe command exited 0")
        if code < 0:
            return _result(False, "command_failed", f"the probe command was killed by signal {-code}")
        return _result(False, "command_failed", f"the probe command exited with status {code}")

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()

    def stop(self) -> None:
        """Stop probing: a probe command running now is killed (an HTTP or TCP probe under way is left to its
        timeout: its result is never read)."""
        self._stopped.set()
        with self._lock:
            proc = self._proc
        if proc is not None:
            self._kill(proc)
        self.join(timeout=1.0)
