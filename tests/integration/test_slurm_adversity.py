"""Adversity on the real Slurm test cluster: overlapping writers of the status file (the EpilogSlurmctld hook of every
task, its delayed passes and the cron line), one run through a lost sbatch reply, a preemption and slurmdbd going
away, and the collection job: pinned to no GPU and no SBATCH_* environment, and failing inside its allocation.

Each test has its own run under `workspace`; every job it started is cancelled (by id) when it ends, and a daemon
it stops is always started again.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import ROOT, Sampler, error_of, tau
from slurm import (LOST_REPLY, attempt_record, daemon_stopped, fake_sbatch, init_slurm_run,
                   job_id, jobs_named, observation_of, record, run_cmd, sacct_rows, settled, shard, submit,
                   task_states, wait_for, wait_job_gone, wait_until)
from test_slurm_recipes import _cron_command

pytestmark = pytest.mark.slurm

INSTALLED_WORKER = Path("/etc/slurm/tau-reconcile-run")
NOT_CONCLUDED = ("failed", "unknown", "accounting_lag", "exhausted")


def _status_file(run_dir: Path) -> Path:
    return run_dir.parent / f"{run_dir.name}.status.json"


def _require_current_hook() -> None:
    """The hook's worker that cluster-up.sh installed must be this checkout's recipe (cluster-up.sh points its bin=
    line at the checkout): a cluster started before the recipe changed runs the old one."""
    recipe = (ROOT / "contrib" / "slurm" / "tau-reconcile-run").read_text()
    expected = recipe.replace("bin=${TAU_BIN:-$here/.venv/bin}", f"bin=${{TAU_BIN:-{ROOT}/.venv/bin}}")
    installed = INSTALLED_WORKER.read_text() if INSTALLED_WORKER.exists() else ""
    assert installed == expected, (f"{INSTALLED_WORKER} is not contrib/slurm/tau-reconcile-run of this checkout: "
                                   "run `make slurm-up` again (as root; it leaves running daemons alone) to install "
                                   "the current EpilogSlurmctld recipe")


class StatusSampler(Sampler):
    """Reads a status file every 0.1 s in a thread. Every read that finds the file is a sample: its mode (of the
    file that was read), and its document or why it is not a tau.status document."""

    interval = 0.1

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.samples: list[tuple[int, dict | None, str | None]] = []  # (mode, document, problem)

    def sample(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                mode = os.fstat(fh.fileno()).st_mode & 0o7777
                data = fh.read()
        except FileNotFoundError:
            return
        self.samples.append((mode, *self._parse(data)))

    @staticmethod
    def _parse(data: bytes) -> tuple[dict | None, str | None]:
        if not data:
            return None, "empty"
        try:
            doc = json.loads(data)
        except ValueError as exc:
            return None, f"not JSON ({exc}): {data[:80]!r}...{data[-80:]!r}"
        if not isinstance(doc, dict) or doc.get("kind") != "tau.status":
            return None, f"not a tau.status document: {data[:120]!r}"
        return doc, None

    def problems(self) -> list[str]:
        return [problem for _, _, problem in self.samples if problem]


def _processes_naming(path: Path) -> list[int]:
    """Pids of the processes with `path` as one of their arguments (the hook's passes, attempts, tau commands)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if os.fsencode(path) in argv:
            out.append(int(entry.name))
    return out


def _winners(run_dir: Path) -> int:
    return len(list(run_dir.glob("shards/shard-*/winner.json")))


def _cron_round(run_dir: Path, workspace: Path, count: int) -> list[subprocess.Popen]:
    """Start `count` cron lines at once, in cron's bare environment."""
    return [subprocess.Popen(["sh", "-c", _cron_command(run_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={"HOME": str(workspace), "LANG": "C.UTF-8"}) for _ in range(count)]


def test_overlapping_epilog_passes_and_cron_lines_never_show_a_partial_status_file_and_leave_no_temp_file(
        cluster, workspace, extra_jobs):
    _require_current_hook()
    run_dir = init_slurm_run(workspace, records=120, shards=12, client_args=("--sleep", "3"))
    path = _status_file(run_dir)
    crons: list[subprocess.Popen] = []
    with StatusSampler(path) as sampler:
        submit(run_dir)
        job = job_id(run_dir)
        try:
            for winners in (2, 6, 10):  # three rounds of two cron lines, while tasks end and their epilogs run
                wait_until(lambda w=winners: _winners(run_dir) >= w, 120, f"{winners} shards won", pause=0.2)
                crons += _cron_round(run_dir, workspace, 2)
            wait_job_gone(job, timeout=120)
            gone_at = time.time()
        finally:
            results = [(*proc.communicate(timeout=60), proc.returncode) for proc in crons]
        # the hook's delayed second passes (TAU_EPILOG_DELAY, 20 s) are the last writers: wait until nothing that
        # names the run is left, and the last pass has written
        wait_until(lambda: not _processes_naming(run_dir) and path.exists() and path.stat().st_mtime > gone_at + 10,
                   60, "the hook's delayed passes of the last tasks", pause=0.5)

    assert results == [("", "", 0)] * 6, results
    samples, problems = len(sampler.samples), sampler.problems()
    assert samples > 100 and not problems, f"{samples} samples of {path}, {len(problems)} invalid: {problems[:5]}"
    assert {mode for mode, _, _ in sampler.samples} == {0o600}, sorted({oct(m) for m, _, _ in sampler.samples})
    succeeded = [doc["counts"]["succeeded"] for _, doc, _ in sampler.samples]
    assert succeeded == sorted(succeeded), f"a status older than the one before it was seen: {succeeded}"
    assert succeeded[0] < 12, succeeded  # the sampler saw the run in progress, not only its end
    assert sorted(os.listdir(workspace)) == sorted([run_dir.name, path.name]), os.listdir(workspace)

    final = json.loads(path.read_text())
    assert (final["kind"], final["run_id"], final["state"]) == ("tau.status", run_dir.name, "succeeded"), final
    assert final["counts"]["succeeded"] == 12 and final["retryable"] == [], final["counts"]
    assert [(s["state"], s["winner"]) for s in final["shards"]] == [("succeeded", "attempt-0001")] * 12
    assert final["sources"] == {"queue": "observed", "accounting": "observed", "reason": None}, final["sources"]
    assert os.stat(path).st_mode & 0o7777 == 0o600


def _readiness(run_dir: Path, sid: str) -> str | None:
    try:
        return attempt_record(run_dir, sid, name="readiness.json")["state"]
    except (FileNotFoundError, ValueError):
        return None


def _queue_reasons(job: str) -> dict[int, tuple[str, str]]:
    proc = run_cmd("squeue", "--noheader", "--array", "--format=%i|%T|%r", f"--jobs={job}")
    out = {}
    for line in proc.stdout.splitlines():
        ident, state, reason = line.split("|")
        task = ident.partition("_")[2]
        if task.isdigit():
            out[int(task)] = (state, reason)
    return out


def _nothing_concluded(status: dict) -> None:
    """While slurmdbd is down: accounting is unavailable, the queue answers, and no shard is concluded from the
    missing accounting."""
    sources = status["sources"]
    assert (sources["queue"], sources["accounting"]) == ("observed", "unavailable"), sources
    assert "sacct" in sources["reason"], sources
    for s in status["shards"]:
        assert s["state"] not in NOT_CONCLUDED, s
    for change in status["changes"]:
        assert change["to"] not in NOT_CONCLUDED and "attempt" not in change, change


def test_a_run_through_a_lost_reply_a_preemption_and_slurmdbd_down_ends_with_one_winner_a_shard_and_one_job_each(
        cluster, workspace, extra_jobs):
    run_dir = init_slurm_run(workspace, records=40, shards=4, client_args=("--sleep", "15"))
    shard_ids = [f"shard-{i:05d}" for i in range(4)]

    # (a) sbatch submits, but its reply is lost: exit 75; tau-retry finds the job by its exact name and adopts it
    wrapped_id = workspace / "wrapped-job-id"
    lost = fake_sbatch(workspace / "lost-reply",
                       f'/usr/bin/sbatch "$@" > "{wrapped_id}" || exit $?\necho "{LOST_REPLY}" >&2\nexit 1\n')
    proc = tau("tau-submit", str(run_dir), env=lost)
    assert proc.returncode == 75, (proc.stdout, proc.stderr)
    err = error_of(proc)
    assert err["error"] == "busy" and "may still have submitted the job" in err["message"], err
    job = wrapped_id.read_text().strip()
    assert job.isdigit(), job
    extra_jobs.append(job)
    assert record(run_dir, "submissions/submission-0001/status.json")["state"] == "prepared"
    proc = tau("tau-retry", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    adopted = json.loads(proc.stdout)
    assert (adopted["adopted"], adopted["job_id"], adopted["submission_id"]) == (True, job, "submission-0001"), \
        adopted
    assert job_id(run_dir) == job

    # (b) a job of the high partition preempts one of the two running tasks: Slurm requeues it
    wait_until(lambda: task_states(job) == {0: "RUNNING", 1: "RUNNING", 2: "PENDING", 3: "PENDING"}, 60,
               "tasks 0 and 1 running (both CPUs), 2 and 3 pending")
    for sid in shard_ids[:2]:
        wait_until(lambda sid=sid: _readiness(run_dir, sid) == "running", 60, f"the client of {sid} runs", pause=0.2)
    high = run_cmd("sbatch", "--parsable", "--partition=high", "--job-name=tau-test-high",
                   f"--output={workspace}/high-%j.out", "--wrap", "sleep 5").stdout.strip()
    extra_jobs.append(high)
    preempted = wait_until(lambda: [t for t, (st, why) in _queue_reasons(job).items()
                                    if st == "PENDING" and why == "BeginTime"], 30, "a task requeued by preemption",
                           pause=0.3)
    assert len(preempted) == 1 and preempted[0] in (0, 1), preempted
    task = preempted[0]
    sid = f"shard-{task:05d}"
    wait_until(lambda: any(r["job"] == f"{job}_{task}" and r["state"] == "PREEMPTED" for r in sacct_rows(job)), 15,
               "a PREEMPTED row in sacct -D")

    # (c) slurmdbd goes away until the preempted attempt runs again and another shard has won meanwhile
    with daemon_stopped("slurmdbd"):
        cycles = []

        def down_and_on(status: dict) -> bool:
            _nothing_concluded(status)
            cycles.append(status["counts"])
            obs = observation_of(status, sid)
            return (shard(status, sid)["state"] == "running" and obs["source"] == "queue"
                    and attempt_record(run_dir, sid)["restarts"] == 1 and status["counts"]["succeeded"] >= 1)

        wait_for(down_and_on, run_dir, timeout=90, pause=0.5)
        assert attempt_record(run_dir, sid)["state"] == "running"
    assert len(cycles) >= 2, cycles

    status = wait_for(settled, run_dir, timeout=150)
    if status["retryable"]:
        proc = tau("tau-retry", str(run_dir))
        assert proc.returncode == 0, proc.stderr
        status = wait_for(settled, run_dir, timeout=90)
    assert status["state"] == "succeeded", status
    assert status["sources"]["accounting"] == "observed", status["sources"]
    for s in status["shards"]:
        assert s["state"] == "succeeded" and s["winner"] is not None, s
        winner = record(run_dir, f"shards/{s['id']}/winner.json")
        assert winner["attempt_id"] == s["winner"], winner
    assert shard(status, sid)["winner"] == "attempt-0001"
    assert attempt_record(run_dir, sid)["restarts"] == 1
    states = wait_until(lambda: (lambda rows: rows if rows[-1:] != ["RUNNING"] else None)(
        [r["state"] for r in sacct_rows(job) if r["job"] == f"{job}_{task}"]), 30, "the preempted task's end in sacct")
    assert states == ["PREEMPTED", "COMPLETED"], states

    submissions = sorted(p.name for p in (run_dir / "submissions").iterdir())
    for sub in submissions:
        name = record(run_dir, f"submissions/{sub}/plan.json")["job_name"]
        recorded = job_id(run_dir, sub)
        wait_until(lambda name=name, recorded=recorded: jobs_named(name)[1] == {recorded}, 30,
                   f"accounting shows exactly job {recorded} named {name}")
        assert jobs_named(name)[0] <= {recorded}

    destination = workspace / "dataset"
    proc = tau("tau-collect", str(run_dir), "--destination", str(destination), "--wait")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["state"], result["records"]) == ("succeeded", 40), result
    ids = pq.read_table(destination, columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(40)), ids


def _completed_run(workspace: Path) -> Path:
    run_dir = init_slurm_run(workspace, records=20, shards=2)
    submit(run_dir)
    status = wait_for(settled, run_dir, timeout=90)
    assert status["state"] == "succeeded", status
    return run_dir


def _environ_with(**values: str) -> dict:
    """This process's environment without SBATCH_* variables, plus `values`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBATCH_")}
    env.update(values)
    return env


GPU_AND_PARTITION = {"SBATCH_GRES": "gpu:1", "SBATCH_GPUS": "1", "SBATCH_PARTITION": "nonexistent"}


def test_the_collection_job_asks_for_no_gpu_whatever_sbatch_variables_its_submitter_has(
        cluster, workspace, extra_jobs):
    run_dir = _completed_run(workspace)
    destination = workspace / "dataset"
    proc = tau("tau-collect", str(run_dir), "--destination", str(destination), "--wait", env=GPU_AND_PARTITION)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["state"], result["collection_id"], result["records"]) == ("succeeded", "collection-0001", 20), \
        result
    assert sorted(pq.read_table(destination, columns=["id"]).column("id").to_pylist()) == list(range(20))

    script = run_dir / "collections" / "collection-0001" / "job.sh"
    directives = [line for line in script.read_text().splitlines() if line.startswith("#SBATCH ")]
    assert "#SBATCH --gres=none" in directives and "#SBATCH --partition=debug" in directives, directives
    assert not [line for line in directives if "gpu" in line.lower()], directives
    job = record(run_dir, "collections/collection-0001/status.json")["job_id"]
    # finished jobs stay for MinJobAge (300 s); RUNNING (the collection recorded, its batch script still exiting)
    # and COMPLETING (its epilog running) pass in a moment
    shown = wait_until(lambda: (text := run_cmd("scontrol", "show", "job", job).stdout)
                       and "JobState=COMPLETING" not in text and "JobState=RUNNING" not in text and text, 30,
                       "the collection job past RUNNING and COMPLETING")
    fields = dict(token.split("=", 1) for token in shown.split() if "=" in token)
    assert (fields["JobState"], fields["Partition"]) == ("COMPLETED", "debug"), shown
    assert "gpu" not in shown.lower() and "TresPerNode" not in fields, shown
    assert "gres" not in fields["TRES"], fields["TRES"]

    def accounting() -> list[str] | None:
        row = run_cmd("sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job}",
                      "--format=State,Partition,ReqTRES,AllocTRES").stdout.split("\n")[0].split("|")
        # the job's end can reach slurmdbd before its start: a row COMPLETED without partition or TRES, for a while
        return row if row[0] == "COMPLETED" and all(row) else None

    _, partition, req_tres, alloc_tres = wait_until(accounting, 30, "the collection job's whole accounting row")
    assert partition == "debug" and "cpu=" in req_tres and "cpu=" in alloc_tres, (req_tres, alloc_tres)
    assert "gpu" not in req_tres + alloc_tres and "gres" not in req_tres + alloc_tres, (req_tres, alloc_tres)

    # the pin matters: the same script submitted by plain sbatch with one of those variables asks for what it says
    # (a GPU of this cluster's four fake ones, a partition that does not exist), while without them it asks for none
    for name, value in GPU_AND_PARTITION.items():
        plain = subprocess.run(["sbatch", "--parsable", "--hold", str(script)], capture_output=True, text=True,
                               timeout=30, env=_environ_with(**{name: value}))
        if name == "SBATCH_PARTITION":
            assert plain.returncode != 0 and "invalid partition specified" in plain.stderr, (name, plain.stderr)
            continue
        assert plain.returncode == 0, (name, plain.stderr)
        other = plain.stdout.strip().split(";")[0]
        extra_jobs.append(other)
        held = run_cmd("scontrol", "show", "job", other).stdout
        run_cmd("scancel", other)
        assert "gres:gpu:1" in held or "gres/gpu" in held, (name, held)
    trial = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=30,
                           env=_environ_with())
    assert trial.returncode == 0 and "to start at" in trial.stderr, trial.stderr


def test_a_collection_that_fails_inside_its_job_is_retired_leaves_nothing_and_the_next_one_succeeds(
        cluster, workspace, extra_jobs):
    run_dir = _completed_run(workspace)
    destination = workspace / "dataset"
    # armed for tau-collect only, so only in the worker: sbatch exports tau-collect's environment to its job
    failing = {"TAU_FAILPOINTS": "tau-collect:collect.staged=error"}
    proc = tau("tau-collect", str(run_dir), "--destination", str(destination), "--wait", env=failing)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    err = error_of(proc)
    assert (err["error"], err["code"], err["command"]) == ("check_failed", 1, "tau-collect"), err
    assert "collection collection-0001 failed" in err["message"], err
    assert "failpoint 'collect.staged' injected an error" in err["message"], err

    journal = record(run_dir, "collections/collection-0001/status.json")
    assert journal["state"] == "failed", journal
    assert "failpoint 'collect.staged' injected an error" in journal["reason"], journal
    job = journal["job_id"]
    wait_job_gone(job)
    out = (run_dir / "collections" / "collection-0001" / f"slurm-{job}_0.out").read_text()  # its one array task
    errors = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(errors) == 1 and errors[0]["code"] == 74 and "collect.staged" in errors[0]["message"], out
    wait_until(lambda: [(r["state"], r["exit_code"]) for r in sacct_rows(job)] == [("FAILED", "74:0")], 30,
               "the worker's job FAILED with exit code 74 in accounting")
    assert not destination.exists()
    assert not list(workspace.glob(f".{destination.name}.tau-stage-*")), os.listdir(workspace)
    assert not list(workspace.glob(f".{destination.name}*")), os.listdir(workspace)

    proc = tau("tau-collect", str(run_dir), "--destination", str(destination), "--wait")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["state"], result["collection_id"], result["records"]) == ("succeeded", "collection-0002", 20), \
        result
    assert record(run_dir, "collections/collection-0002/status.json")["state"] == "succeeded"
    assert record(run_dir, "collections/collection-0001/status.json") == journal  # the failed entry stays retired
    assert sorted(pq.read_table(destination, columns=["id"]).column("id").to_pylist()) == list(range(20))
    assert not list(workspace.glob(f".{destination.name}.tau-stage-*")), os.listdir(workspace)


# -- a crash right after sbatch returned (the job exists, nothing records it) --------------------------------------

def test_tau_submit_killed_right_after_sbatch_returned_is_finished_by_the_next_call_with_the_same_job(
        cluster, workspace, extra_jobs):
    run_dir = init_slurm_run(workspace, records=20, shards=2)
    crashed = tau("tau-submit", str(run_dir), env={"TAU_FAILPOINTS": "tau-submit:submit.sbatch_returned=crash"})
    assert crashed.returncode == -9, crashed.stderr
    plan = record(run_dir, "submissions/submission-0001/plan.json")
    assert record(run_dir, "submissions/submission-0001/status.json")["state"] == "prepared"
    queue, _ = jobs_named(plan["job_name"])
    assert len(queue) == 1, queue  # the job was submitted; only its id was lost with the process
    extra_jobs.extend(queue)
    again = tau("tau-submit", str(run_dir))
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert (doc["adopted"], doc["created"], doc["job_id"], doc["state"]) == (True, False, next(iter(queue)),
                                                                             "submitted"), doc
    status = wait_for(settled, run_dir, timeout=90)
    assert status["state"] == "succeeded", status
    accounted = wait_until(lambda: jobs_named(plan["job_name"])[1] or None, 30, "the job in sacct", pause=0.5)
    assert accounted == queue  # one job, ever


def test_tau_collect_killed_right_after_sbatch_returned_adopts_its_job_and_collects_once(
        cluster, workspace, extra_jobs):
    run_dir = _completed_run(workspace)
    dest = workspace / "data"
    crashed = tau("tau-collect", str(run_dir), "--destination", str(dest), "--format", "csv",
                  env={"TAU_FAILPOINTS": "tau-collect:collect.sbatch_returned=crash"})
    assert crashed.returncode == -9, crashed.stderr
    prepared = record(run_dir, "collections/collection-0001/status.json")
    assert prepared["state"] == "prepared"
    # the ambiguous entry is found by its job's name only when asked for in its own shape: the plan's Parquet here
    # is another collection, refused (73) before any job is looked for or submitted
    other = tau("tau-collect", str(run_dir), "--destination", str(dest))
    assert other.returncode == 73, other.stderr
    assert "is being collected by collection-0001 as csv" in error_of(other)["message"]
    assert record(run_dir, "collections/collection-0001/status.json") == prepared
    again = tau("tau-collect", str(run_dir), "--destination", str(dest), "--format", "csv", "--wait")
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert (doc["collection_id"], doc["state"], doc["format"], doc["records"]) == (
        "collection-0001", "succeeded", "csv", 20), doc
    assert os.listdir(run_dir / "collections") == ["collection-0001"]
    rows = [line for f in doc["files"] for line in (dest / f["path"]).read_text().splitlines()[1:]]
    assert sorted(int(line.split(",", 1)[0]) for line in rows) == list(range(20))
