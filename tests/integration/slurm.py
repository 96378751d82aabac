"""Helpers for tests on the real Slurm test cluster (contrib/slurm/cluster-up.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from helpers import BIN, CLIENT, PYTHON, ROOT, init_run, tau, wait_for_lock
from helpers import wait_for as helpers_wait_for

CLUSTER_UP = str(ROOT / "contrib" / "slurm" / "cluster-up.sh")
CLUSTER_DOWN = str(ROOT / "contrib" / "slurm" / "cluster-down.sh")


def cluster_is_up() -> bool:
    try:
        proc = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False
    return "is UP" in proc.stdout


def require_cluster() -> None:
    if not cluster_is_up():
        pytest.fail("the Slurm test cluster is not running: start it with `make slurm-up` (as root); "
                    "`make check` starts and stops it by itself")


def slurm_plan(records: int = 40, shards: int = 4, client_args: tuple[str, ...] = (), **extra) -> dict:
    doc = {"records": records, "shards": shards,
           "command": [PYTHON, CLIENT, "--rows-per-file", "10", *client_args],
           "scheduler": {"profile": "slurm", "slurm": {"partition": "debug", "time": "10:00"}},
           "output": {"format": "parquet", "rows_per_partition": 25},
           "windows": {"accounting_lag_seconds": 30, "preemption_seconds": 60, "submission_visibility_seconds": 30}}
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return doc


def init_slurm_run(workspace: Path, name: str = "run", **plan_args) -> Path:
    return init_run(workspace, name, plan_doc=slurm_plan(**plan_args))


def finished_run(workspace: Path, timeout: float = 180, **plan_args) -> Path:
    """A Slurm run of `slurm_plan(**plan_args)`, submitted and settled with every shard won."""
    run_dir = init_slurm_run(workspace, **plan_args)
    submit(run_dir)
    status = wait_for(settled, run_dir, timeout=timeout, pause=0.5)
    assert status["state"] == "succeeded", status
    return run_dir


def data_bytes(folder: Path) -> dict[str, bytes]:
    """A collected dataset's files' bytes by name, but its _tau_collection.json (which names its collection)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != "_tau_collection.json"}


def submit(run_dir: Path, env: dict | None = None) -> dict:
    """tau-submit RUN_DIR, which must succeed; its summary."""
    proc = tau("tau-submit", str(run_dir), env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def clients_running(run_dir: Path, job: str, tasks: dict[int, str]) -> None:
    """Wait until squeue shows exactly `tasks` and each running task's client has started."""
    wait_until(lambda: task_states(job) == tasks, 60, f"squeue shows {tasks}", pause=0.3)
    for task, state in tasks.items():
        if state == "RUNNING":
            log = run_dir / "shards" / f"shard-{task:05d}" / "attempts" / "attempt-0001" / "client.log"
            wait_until(log.exists, 30, f"the client of task {task} runs", pause=0.2)
    time.sleep(0.5)  # the attempts are waiting for their clients, their signal handlers installed


def two_tasks_running(workspace: Path, sleep: int) -> tuple[Path, str]:
    """A submitted 2-shard run whose two clients sleep `sleep` seconds, both running: (run dir, array job id)."""
    run_dir = init_slurm_run(workspace, records=20, shards=2, client_args=("--sleep", str(sleep)))
    submit(run_dir)
    job = job_id(run_dir)
    clients_running(run_dir, job, {0: "RUNNING", 1: "RUNNING"})
    return run_dir, job


def job_id(run_dir: Path, submission: str = "submission-0001") -> str:
    return json.loads((run_dir / "submissions" / submission / "status.json").read_text())["job_id"]


def observe_reconcile(run_dir: Path, env: dict | None = None) -> dict:
    obs = tau("tau-observe", str(run_dir), env=env)
    assert obs.returncode == 0, obs.stderr
    rec = tau("tau-reconcile", str(run_dir), input=obs.stdout, env=env)
    assert rec.returncode == 0, rec.stderr
    return json.loads(rec.stdout)


def wait_for(predicate, run_dir: Path, timeout: float = 120, pause: float = 1.0) -> dict:
    """observe | reconcile until predicate(status) holds; returns that status."""
    deadline = time.monotonic() + timeout
    while True:
        status = observe_reconcile(run_dir)
        if predicate(status):
            return status
        assert time.monotonic() < deadline, f"condition not reached in {timeout}s: {json.dumps(status)[:2000]}"
        time.sleep(pause)


def shard(status: dict, sid: str) -> dict:
    return next(s for s in status["shards"] if s["id"] == sid)


def settled(status: dict) -> bool:
    return not any(status["counts"][k] for k in ("pending", "running", "accounting_lag", "candidate"))


def squeue_tasks(job: str) -> list[str]:
    proc = subprocess.run(["squeue", "--noheader", "--array", "--format=%i|%T", f"--jobs={job}"],
                          capture_output=True, text=True, timeout=30)
    return [line for line in proc.stdout.splitlines() if line.strip()]


def env_with(**values: str) -> dict:
    env = dict(os.environ)
    env.update(values)
    return env


# -- helpers for the scenario tests (test_slurm_*.py) --------------------------------------------------------------

SLURM_DAEMONS = {
    # name: (pid file, start command, readiness check)
    "slurmdbd": ("/run/slurm/slurmdbd.pid", ["/usr/sbin/slurmdbd"], ["sacctmgr", "-n", "list", "cluster"]),
    "slurmctld": ("/run/slurm/slurmctld.pid", ["/usr/sbin/slurmctld"], ["scontrol", "ping"]),
}


def run_cmd(*argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run a Slurm (or other) command; with `check`, a failure fails the test with its stderr."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr}"
    return proc


def wait_until(predicate, timeout: float, what: str, pause: float = 0.5):
    """Poll predicate() until it returns something truthy; returns that value (helpers.wait_for, every half
    second by default: the scheduler's commands are not free)."""
    return helpers_wait_for(predicate, timeout, what, pause)


def task_states(job: str) -> dict[int, str]:
    """squeue's view of an array job: task index -> state (tasks it no longer shows are absent). An array not yet
    split (`JOB_[1-2%1]`) is expanded; squeue failing fails the test (it never reads as "absent")."""
    from taulib.executors.slurm.parse import expand_array_spec

    proc = run_cmd("squeue", "--noheader", "--array", "--format=%i|%T", f"--jobs={job}")
    out = {}
    for line in proc.stdout.splitlines():
        if not line.strip():
            continue
        ident, state = line.split("|")
        _, _, task = ident.partition("_")
        tasks = expand_array_spec(task[1:-1]) if task.startswith("[") else [int(task)] if task.isdigit() else []
        for index in tasks:
            out[index] = state
    return out


def wait_task_state(job: str, task: int, state: str, timeout: float = 60) -> None:
    wait_until(lambda: task_states(job).get(task) == state, timeout, f"task {job}_{task} {state} in squeue",
               pause=0.3)


def wait_job_gone(job: str, timeout: float = 60) -> None:
    wait_until(lambda: not squeue_tasks(job), timeout, f"job {job} gone from squeue", pause=0.5)


def sacct_rows(job: str) -> list[dict]:
    """Every accounting row of a job (with requeue/preemption history: --duplicates), as dicts."""
    proc = run_cmd("sacct", "--noheader", "--parsable2", "--allocations", "--duplicates",
                   "--format=JobID,JobIDRaw,JobName%200,State,ExitCode", f"--jobs={job}")
    rows = []
    for line in proc.stdout.splitlines():
        if line.strip():
            jobid, raw, name, state, exit_code = line.split("|")
            rows.append({"job": jobid, "raw": raw, "name": name, "state": state, "exit_code": exit_code})
    return rows


def jobs_named(name: str) -> tuple[set[str], set[str]]:
    """Ids of the jobs with exactly this name, as squeue (all states) and sacct see them."""
    queue = run_cmd("squeue", "--noheader", "--array", "--states=all", f"--name={name}", "--format=%i|%j")
    acct = run_cmd("sacct", "--noheader", "--parsable2", "--allocations", f"--name={name}",
                   "--starttime=now-1hour", "--format=JobID,JobName%200")
    seen = []
    for text in (queue.stdout, acct.stdout):
        ids = set()
        for line in text.splitlines():
            if line.strip() and line.split("|")[1].strip() == name:
                ids.add(line.split("|")[0].strip().split("_")[0])
        seen.append(ids)
    return seen[0], seen[1]


def record(run_dir: Path, rel: str) -> dict:
    return json.loads((run_dir / rel).read_text())


def attempt_record(run_dir: Path, sid: str, aid: str = "attempt-0001", name: str = "attempt.json") -> dict:
    """A record of the attempt; for attempt.json, the attempt's record as tau reads it: its attempt.json, or (a run
    of this version, before the attempt first changes) the record its bound submission implies."""
    if name == "attempt.json" and not (run_dir / f"shards/{sid}/attempts/{aid}/{name}").exists():
        from taulib.rundir import state
        from taulib.rundir.run import Run

        with Run(str(run_dir)) as run:
            derived = state.attempt_record(run, sid, aid)
        assert derived is not None, f"{sid}/{aid} has no record"
        return derived
    return record(run_dir, f"shards/{sid}/attempts/{aid}/{name}")


def observation_of(status: dict, sid: str) -> dict | None:
    evidence = shard(status, sid)["evidence"]
    return None if evidence is None else evidence["observation"]


def run_job_ids(run_dir: Path) -> list[str]:
    """Every Slurm job id a run recorded: its submissions' and its collections'."""
    out = []
    for path in sorted([*(run_dir / "submissions").glob("submission-*/status.json"),
                        *(run_dir / "collections").glob("collection-*/status.json")]):
        job = json.loads(path.read_text()).get("job_id")
        if job:
            out.append(job)
    for path in sorted((run_dir / "collections").glob("collection-*/task-*.json")):  # a rerun task's earlier job
        job = json.loads(path.read_text()).get("job_id")
        if job and job not in out:
            out.append(job)
    return out


def cancel_jobs(job_ids) -> None:
    """scancel these jobs (by id) and wait until squeue no longer shows them."""
    ids = sorted({str(j) for j in job_ids if j})
    if not ids:
        return
    subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=30)
    for job in ids:
        wait_job_gone(job, timeout=60)


def cancel_workspace_jobs(workspace: Path, extra=()) -> None:
    """Teardown: cancel every job recorded by the runs under workspace, plus `extra` ids."""
    ids = list(extra)
    for run_dir in workspace.iterdir():
        if (run_dir / "submissions").is_dir():
            ids.extend(run_job_ids(run_dir))
    cancel_jobs(ids)


def _pid(pid_file: str) -> int | None:
    try:
        pid = int(Path(pid_file).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def stop_daemon(name: str, timeout: float = 30) -> None:
    """SIGTERM the daemon by the pid in its pid file and wait until it has exited."""
    pid_file = SLURM_DAEMONS[name][0]
    pid = _pid(pid_file)
    assert pid is not None, f"{name} is not running (pid file {pid_file})"
    os.kill(pid, 15)
    wait_until(lambda: _pid_gone(pid), timeout, f"{name} ({pid}) exits after SIGTERM", pause=0.1)


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def start_daemon(name: str, timeout: float = 60) -> None:
    """Start a stopped daemon again (it forks) and wait until it answers."""
    pid_file, start, ready = SLURM_DAEMONS[name]
    if _pid(pid_file) is None:
        subprocess.run(start, capture_output=True, text=True, timeout=60)

    def answers() -> bool:
        proc = subprocess.run(ready, capture_output=True, text=True, timeout=30)
        return proc.returncode == 0 and (name != "slurmctld" or "is UP" in proc.stdout)

    wait_until(answers, timeout, f"{name} answers again", pause=0.3)
    if name == "slurmctld":
        def node_usable() -> bool:
            proc = subprocess.run(["sinfo", "--noheader", "--nodes=localhost", "--format=%T"], capture_output=True,
                                  text=True, timeout=30)
            return proc.returncode == 0 and proc.stdout.strip().split("\n")[0] in ("idle", "mixed", "allocated")

        wait_until(node_usable, timeout, "the node is usable again", pause=0.3)


@contextmanager
def daemon_stopped(name: str):
    """Stop a Slurm daemon for the block; it is always started again afterwards."""
    stop_daemon(name)
    try:
        yield
    finally:
        start_daemon(name)


def fake_command(folder: Path, name: str, body: str) -> dict:
    """Write `body` as an executable `name` (a wrapper of a Slurm command, say) in folder; returns the env that puts
    it first on PATH (for tau())."""
    folder.mkdir(mode=0o700, exist_ok=True)
    script = folder / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o700)
    return {"PATH": f"{folder}:{BIN}:{os.environ.get('PATH', '')}"}


def fake_sbatch(folder: Path, body: str) -> dict:
    return fake_command(folder, "sbatch", body)


LOST_REPLY = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"


@contextmanager
def epilog_passes_held(run_dir: Path, timeout: float = 60):
    """While held, no pass of the EpilogSlurmctld hook (contrib/slurm/tau-reconcile-run) writes into `run_dir`:
    this waits for a pass that runs now to end (the hook holds `$TMPDIR/tau-epilog-UID/<cksum of the run>.lock`
    while it observes and reconciles), then holds that lock, so a pass that starts meanwhile leaves its request for
    later and writes nothing. For a test that compares a record's bytes across its own passes."""
    digest = subprocess.run(["cksum"], input=os.path.abspath(run_dir).encode(), capture_output=True,
                            check=True).stdout.split()[0].decode()
    held = []
    try:
        for tmp in dict.fromkeys([os.environ.get("TMPDIR") or "/tmp", "/tmp"]):
            folder = Path(tmp) / f"tau-epilog-{os.getuid()}"
            folder.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(folder / f"{digest}.lock", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            held.append(fd)
            wait_for_lock(fd, time.monotonic() + timeout, f"an epilog pass on {run_dir}", pause=0.1)
        yield
    finally:
        for fd in held:
            os.close(fd)
