"""Shared helpers for tau's tests: run commands as real processes, make runs, snapshot run directories."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
PYTHON = str(BIN / "python") if (BIN / "python").exists() else sys.executable
CLIENT = str(ROOT / "contrib" / "demo" / "client.py")
COMMANDS = ("tau-init", "tau-submit", "tau-attempt", "tau-observe", "tau-reconcile", "tau-winner", "tau-retry",
            "tau-collect")


def env_for_tests(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    env.setdefault("TAU_LOCK_TIMEOUT", "10")
    env.pop("TAU_FAILPOINTS", None)
    if extra:
        env.update(extra)
    return env


def tau(command: str, *args: str, input: str | bytes | None = None, env: dict | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a tau command (e.g. "tau-init") as a real process; stdout/stderr as text."""
    if isinstance(input, bytes):
        input = input.decode()
    proc = subprocess.run([str(BIN / command), *args], input=input, capture_output=True, text=True,
                          env=env_for_tests(env), timeout=timeout)
    check_printed(proc.stdout, command)
    return proc


def check_statuses(doc: object, what: str = "a tau.status document") -> int:
    """Validate every `tau.status` document in `doc` (the document itself, or one it carries at any depth, as
    tau-drive's result carries its status) against share/schemas/status.schema.json; an AssertionError with the
    schema's message when one does not match. Returns how many were validated."""
    from taulib import schema

    found = 0
    pending = [doc]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            if node.get("kind") == "tau.status":
                try:
                    schema.validate(node, "status", what)
                except schema.SchemaViolation as exc:
                    raise AssertionError(exc.message) from None
                found += 1
            else:
                pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return found


def check_printed(stdout: str, command: str) -> int:
    """`check_statuses` over what a command printed: one JSON document, or JSON Lines (each line that is one);
    anything else (a table, an empty output) holds no status. Returns how many statuses were validated."""
    if "tau.status" not in stdout:
        return 0
    try:
        docs = [json.loads(stdout)]
    except ValueError:
        docs = []
        for line in stdout.splitlines():
            try:
                docs.append(json.loads(line))
            except ValueError:
                continue
    return sum(check_statuses(doc, f"{command}'s output") for doc in docs)


def tau_on_terminal(command: str, *args: str, env: dict | None = None,
                    timeout: float = 120, input: str | None = None) -> tuple[int, str, str]:
    """Run a tau command with its standard error on a real pseudo-terminal (the `pty` module's slave; standard
    output a pipe; standard input `input`, or nothing): (exit code, standard output, everything the terminal
    received, as text)."""
    import pty
    import select
    import threading

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([str(BIN / command), *args], stdin=subprocess.DEVNULL if input is None else
                                subprocess.PIPE, stdout=subprocess.PIPE, stderr=slave, env=env_for_tests(env))
    finally:
        os.close(slave)
    if input is not None:
        assert proc.stdin is not None
        proc.stdin.write(input.encode())
        proc.stdin.close()
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()))
    reader.start()
    seen = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer of the terminal has closed it
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        proc.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        os.close(master)
        reader.join(timeout=10)
        proc.stdout.close()
    printed = b"".join(out).decode()
    check_printed(printed, command)
    return proc.returncode, printed, seen.decode()


def start_paused(command: str, *args: str, failpoint: str, trace: Path, env: dict | None = None,
                 timeout: float = 60) -> subprocess.Popen:
    """Start a tau command armed to pause (60 s) at `failpoint`, and return once it is there (its failpoint trace
    in `trace` says so): the moment to send it a signal. Standard output and error are text pipes."""
    environ = dict(env or {}, TAU_FAILPOINTS=f"{command}:{failpoint}=delay:60", TAU_FAILPOINT_TRACE=str(trace))
    proc = subprocess.Popen([str(BIN / command), *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env_for_tests(environ))
    reached = f"{command} {failpoint}\n"
    deadline = time.monotonic() + timeout
    while not (trace.exists() and reached in trace.read_text()):
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"{command} ended ({proc.returncode}) before {failpoint}: {err}")
        assert time.monotonic() < deadline, f"{command} did not reach {failpoint}"
        time.sleep(0.02)
    return proc


GOLDEN = ROOT / "tests" / "golden"


def check_golden(name: str, text: str) -> None:
    """`text` equals tests/golden/NAME; with TAU_ACCEPT_GOLDEN=1 it is written there first (an intended change)."""
    path = GOLDEN / name
    if os.environ.get("TAU_ACCEPT_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with TAU_ACCEPT_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{name} differs from its golden file (TAU_ACCEPT_GOLDEN=1 accepts it)"


def error_of(proc: subprocess.CompletedProcess) -> dict:
    """The one JSON error object a failing command printed on stderr (asserts there is exactly one)."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one JSON error line on stderr, got: {proc.stderr!r}"
    assert "Traceback" not in proc.stderr
    return json.loads(lines[0])


def plan(records: int = 80, shards: int = 4, fail_first: tuple[str, ...] = (), **extra) -> dict:
    command = [PYTHON, CLIENT, "--rows-per-file", "10"]
    for sid in fail_first:
        command += ["--fail-first", sid]
    doc = {"records": records, "shards": shards, "command": command,
           "scheduler": {"profile": "local", "local": {"max_parallel": 4}},
           "output": {"format": "parquet", "rows_per_partition": 30},
           "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}
    doc.update(extra)
    return doc


def init_run(workspace: Path, name: str = "run", plan_doc: dict | None = None, **plan_args) -> Path:
    """tau-init WORKSPACE/NAME from `plan_doc`, or from plan(**plan_args)."""
    run_dir = workspace / name
    proc = tau("tau-init", str(run_dir), input=json.dumps(plan_doc if plan_doc is not None else plan(**plan_args)))
    assert proc.returncode == 0, proc.stderr
    return run_dir


def as_format_1(run_dir: Path) -> Path:
    """Turn a run fresh from tau-init into one made by an earlier version of tau (format 1), as that tau-init wrote
    it: run.json without `run_format`, and one shards/shard-NNNNN/shard.json per shard (canonical, 0600, in 0700
    folders). Nothing else differs until the run is submitted."""
    from taulib import jsonio
    from taulib.rules.shards import shard_range

    record = json.loads((run_dir / "run.json").read_bytes())
    assert record.pop("run_format") == 2 and not (run_dir / "submissions").exists()
    resolved = json.loads((run_dir / "plan.json").read_bytes())
    for index in range(record["shard_count"]):
        sid = f"shard-{index:05d}"
        folder = run_dir / "shards" / sid
        folder.mkdir(mode=0o700)
        start, end = shard_range(resolved, index)
        (folder / "shard.json").write_bytes(jsonio.canonical({
            "kind": "tau.shard", "schema_version": 1, "run_id": record["run_id"], "shard_id": sid, "index": index,
            "record_start": start, "record_end": end}))
        os.chmod(folder / "shard.json", 0o600)
    (run_dir / "run.json").write_bytes(jsonio.canonical(record))
    return run_dir


def wait_for(predicate, timeout: float = 60, what: str = "it", pause: float = 0.2):
    """The first true value of predicate(), asked every `pause` seconds; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} did not happen in {timeout}s"
        time.sleep(pause)


def status(run_dir: Path) -> dict:
    obs = tau("tau-observe", str(run_dir))
    assert obs.returncode == 0, obs.stderr
    rec = tau("tau-reconcile", str(run_dir), input=obs.stdout)
    assert rec.returncode == 0, rec.stderr
    return json.loads(rec.stdout)


def wait_settled(run_dir: Path, timeout: float = 120) -> dict:
    """observe | reconcile until no shard is pending, running, in accounting lag or waiting for its winner."""
    deadline = time.monotonic() + timeout
    while True:
        doc = status(run_dir)
        if not any(doc["counts"][k] for k in ("pending", "running", "accounting_lag", "candidate")):
            return doc
        assert time.monotonic() < deadline, f"run did not settle: {doc['counts']}"
        time.sleep(0.3)


def quiesce(run_dir: Path, timeout: float = 60) -> None:
    """Wait until the local supervisor of every submission has started and exited (it writes supervisor.json under
    a lock it holds for its lifetime): then every attempt process has ended and nothing writes into the run behind
    the test's back."""
    from taulib.executors.local import records as local_records

    deadline = time.monotonic() + timeout
    submissions = run_dir / "submissions"
    for sub in sorted(p for p in submissions.iterdir() if re.fullmatch(r"submission-[0-9]{4,}", p.name)) \
            if submissions.exists() else []:
        while not (sub / "local" / "supervisor.json").exists():
            assert time.monotonic() < deadline, f"the supervisor of {sub} did not start"
            time.sleep(0.02)
        with open(run_dir / "locks" / f"{local_records.supervisor_lock(sub.name)}.lock", "a") as fh:
            wait_for_lock(fh.fileno(), deadline, f"the supervisor of {sub}")


def wait_for_lock(fd: int, deadline: float, holder: str, pause: float = 0.02) -> None:
    """Take an exclusive flock(2) on `fd` (what portalocker takes, and the shell's flock(1)), waiting while another
    process holds it; it is held until `fd` is closed. Fails the test when `holder` still holds it at `deadline`
    (time.monotonic())."""
    import fcntl

    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            assert time.monotonic() < deadline, f"{holder} did not let its lock go"
            time.sleep(pause)


def settle(run_dir: Path) -> dict:
    """Wait for the run's attempt processes (which publish winners) to end, then observe | reconcile until
    settled (an attempt that vanished waits out the accounting-lag window)."""
    quiesce(run_dir)
    return wait_settled(run_dir)


def copy_run(src: Path, parent: Path) -> Path:
    parent.mkdir(mode=0o700)
    dst = parent / src.name
    shutil.copytree(src, dst, symlinks=True)
    return dst


def complete_run(workspace: Path, name: str = "run", **plan_args) -> Path:
    """A run whose shards have all won (submit, settle, retry what failed, settle)."""
    run_dir = init_run(workspace, name, **plan_args)
    assert tau("tau-submit", str(run_dir)).returncode == 0
    doc = settle(run_dir)
    if doc["retryable"]:
        assert tau("tau-retry", str(run_dir)).returncode == 0
        doc = settle(run_dir)
    assert doc["state"] == "succeeded", doc
    return run_dir


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root with its type, mode, owner and content, for byte-for-byte comparisons."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", st.st_mode, st.st_uid)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", st.st_mode, st.st_uid, path.read_bytes())
            else:  # a FIFO or a device is never opened: reading one could block
                out[rel] = ("other", st.st_mode, st.st_uid)
    return out


@contextmanager
def hold_lock(run_dir: Path, name: str = "run", shared: bool = False):
    """Hold `locks/<name>.lock` from another process for the duration of the block: exclusively, or `shared` (as
    every tau command holds the run lock)."""
    code = ("import portalocker, sys, time\n"
            "fh = open(sys.argv[1], 'a')\n"
            f"portalocker.lock(fh, portalocker.{'LOCK_SH' if shared else 'LOCK_EX'})\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n")
    lock_path = run_dir / "locks" / f"{name}.lock"
    lock_path.parent.mkdir(mode=0o700, exist_ok=True)
    proc = subprocess.Popen([PYTHON, "-c", code, str(lock_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


class Listener:
    """A loopback port that counts the connections made to it and closes each at once (it answers nothing): a proxy
    or an endpoint that must never be asked. Use it in a with, or call close()."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Listener":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Sampler:
    """Calls `sample()` every `interval` seconds in a thread of its own, from the start of a with block to its end
    (the thread is joined on the way out). A subclass defines `sample`."""

    interval = 0.1

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def module_workspace(tmp_path_factory, name: str) -> Path:
    """A private (0700) workspace folder of its own for a module-scoped fixture."""
    ws = tmp_path_factory.mktemp(name) / "ws"
    ws.mkdir(mode=0o700)
    return ws
