"""Services beside the client, under the local executor (tau-run(5) "Services", tau-attempt(1) "The order of
work"): real stand-in model servers (tests/clients/standin_server.py) started per attempt, probed until ready, their
endpoints given to the client, failing the attempt when one dies or never gets ready, and every one of their
processes gone, by pid, when the attempt ends, whatever ended it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from services_fixtures import attempt_dir, backend_pids, record, revisions, running, services_plan

from helpers import error_of, init_run, settle, snapshot, tau, wait_for
from taulib import jsonio


def submit(run_dir: Path, *args: str) -> None:
    proc = tau("tau-submit", str(run_dir), *args)
    assert proc.returncode == 0, proc.stderr


def allocation_log(run_dir: Path, submission: int = 1, task: int = 0) -> str:
    return (run_dir / "submissions" / f"submission-{submission:04d}" / "local" / f"task-{task:05d}.log").read_text()


def elapsed(result: dict) -> float:
    return jsonio.parse_time(result["completed_at"]) - jsonio.parse_time(result["started_at"])


def test_two_backends_become_ready_one_after_the_other_the_client_reaches_both_and_nothing_is_left(workspace):
    pids = workspace / "pids"
    run_dir = init_run(workspace, plan_doc=services_plan(pids, server=("--stagger", "1.5", "--child")))
    submit(run_dir)
    doc = settle(run_dir)
    assert doc["state"] == "succeeded", doc
    seen = revisions(allocation_log(run_dir))
    assert [(state, said, client) for _, state, said, client in seen] == [
        ("pending", "generator 0/2 pending", "waiting"), ("starting", "generator 0/2 starting", "waiting"),
        ("starting", "generator 1/2 starting", "waiting"), ("ready", "generator 2/2 ready", "waiting"),
        ("ready", "generator 2/2 ready", "running"), ("stopped", "generator 0/2 stopped", "ended")]
    numbers = [n for n, *_ in seen]
    assert numbers[0] == 1 and numbers == sorted(set(numbers))  # every write +1 (heartbeats between are unlogged)
    final = record(run_dir, "readiness.json")
    assert (final["schema_version"], final["state"], final["client"], final["revision"]) == (2, "stopped", "ended",
                                                                                           numbers[-1])
    rows = pq.read_table(attempt_dir(run_dir) / "dataset").to_pylist()
    assert [r["id"] for r in rows] == list(range(6))
    assert {r["answer"] for r in rows} == {f"{r['prompt'][::-1].upper()} [stand-in generator-{1 + r['id'] % 2}]"
                                           for r in rows}  # derived from the prompt, by both backends in turn
    endpoints = record(run_dir, "endpoints.json")
    urls = endpoints["services"][0]["urls"]
    assert {r["url"] for r in rows} == set(urls) and len(urls) == 2
    report = json.loads((pids / "client-shard-00000-attempt-0001.json").read_text())
    assert report["services"] == endpoints and report["env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert report["env"]["TAU_SERVICE_GENERATOR_URLS"] == ",".join(endpoints["services"][0]["urls"])
    assert report["env"]["TAU_SERVICE_GENERATOR_URL"] == endpoints["services"][0]["urls"][0]
    started = backend_pids(run_dir, pids)
    assert len(started) == 4  # two servers, each with a child in its process group
    assert running(started) == set()
    result = record(run_dir, "result.json")
    assert "leftovers" not in result and "error_code" not in result


def test_a_run_without_services_keeps_readiness_version_1_and_writes_nothing_of_services(workspace):
    run_dir = init_run(workspace, records=4, shards=1)
    submit(run_dir)
    assert settle(run_dir)["state"] == "succeeded"
    assert record(run_dir, "readiness.json")["schema_version"] == 1
    assert not (attempt_dir(run_dir) / "endpoints.json").exists() and not (attempt_dir(run_dir) / "services").exists()
    assert "services" not in json.loads((run_dir / "plan.json").read_text())
    assert "services" not in json.loads((run_dir / "run.json").read_text())["environment"]


def test_a_backend_killed_while_the_client_runs_fails_the_attempt_naming_it_and_the_retry_wins(workspace):
    pids = workspace / "pids"
    run_dir = init_run(workspace, plan_doc=services_plan(pids, client=("--sleep", "4"), server=("--child",)))
    submit(run_dir)
    ready = wait_for(lambda: (r := record(run_dir, "readiness.json")) and r["client"] == "running" and r,
                     what="the client running")
    victim = ready["deployments"][0]["backends"][1]["pid"]
    os.kill(victim, signal.SIGKILL)
    doc = settle(run_dir)
    shard = doc["shards"][0]
    assert shard["state"] == "failed"
    assert shard["reason"] == "service 'generator' backend 2 was killed by signal 9 while the client ran"
    result = record(run_dir, "result.json")
    assert (result["outcome"], result["error_code"], result["error"]) == ("failed", "exited", shard["reason"])
    final = record(run_dir, "readiness.json")
    assert final["state"] == "failed" and final["deployments"][0]["last_probe"]["reason_code"] == "exited"
    assert running(backend_pids(run_dir, pids)) == set()
    assert tau("tau-retry", str(run_dir)).returncode == 0
    doc = settle(run_dir)
    assert doc["state"] == "succeeded" and doc["shards"][0]["winner"] == "attempt-0002"
    assert running(backend_pids(run_dir, pids, attempt=2)) == set()


def test_a_service_that_never_gets_ready_fails_readiness_timeout_and_the_client_never_runs(workspace):
    pids = workspace / "pids"
    run_dir = init_run(workspace, plan_doc=services_plan(pids, server=("--never-ready",),
                                                         service={"start_timeout": 3}))
    submit(run_dir)
    doc = settle(run_dir)
    result = record(run_dir, "result.json")
    assert result["error_code"] == "readiness_timeout"
    assert result["error"] == ("readiness_timeout: service 'generator' had 0 of 2 backends ready after 3 s (its "
                               "start_timeout); the client was never started")
    assert doc["shards"][0]["reason"] == result["error"]
    assert elapsed(result) <= 3 + 10
    assert not (pids / "client-shard-00000-attempt-0001.json").exists()
    assert not (attempt_dir(run_dir) / "client.log").exists() or not (attempt_dir(run_dir) / "client.log").read_text()
    readiness = record(run_dir, "readiness.json")
    assert (readiness["state"], readiness["client"]) == ("failed", "waiting")
    assert readiness["deployments"][0]["endpoint"] == "failed"
    assert running(backend_pids(run_dir, pids)) == set()


def test_a_backend_that_exits_while_starting_fails_the_attempt_within_a_probe_period(workspace):
    pids = workspace / "pids"
    plan = services_plan(pids, server=("--exit-after", "1"), service={"probe_seconds": 5, "start_timeout": 600})
    run_dir = init_run(workspace, plan_doc=plan)
    submit(run_dir)
    settle(run_dir)
    result = record(run_dir, "result.json")
    assert result["error_code"] == "exited"
    assert result["error"].startswith("service 'generator' backend ")
    assert result["error"].endswith(" exited with status 3 before it was ready; the client was never started")
    assert elapsed(result) < 1 + 5, "not at the start timeout, and within a probe period"
    assert running(backend_pids(run_dir, pids)) == set()


def test_a_probe_with_expect_stays_unready_while_the_body_lacks_the_text(workspace):
    pids = workspace / "pids"
    plan = services_plan(pids, backends=1, service={"ready": {"http": "/v1/models", "expect": "another-model"},
                                                    "start_timeout": 6})
    run_dir = init_run(workspace, plan_doc=plan)
    submit(run_dir)
    seen = wait_for(lambda: (r := record(run_dir, "readiness.json")) and r["deployments"][0]["last_probe"]
                    and r["deployments"][0]["last_probe"]["reason_code"] == "expect_missing" and r,
                    what="a probe that answered without the text")
    deployment = seen["deployments"][0]
    assert (deployment["state"], deployment["ready_backends"], deployment["endpoint"]) == ("starting", 0, "pending")
    assert deployment["last_probe"]["message"] == "GET /v1/models answered 200 without 'another-model'"
    settle(run_dir)
    assert record(run_dir, "result.json")["error_code"] == "readiness_timeout"


def test_a_client_program_removed_after_init_fails_in_preflight_and_no_service_ever_starts(workspace):
    pids = workspace / "pids"
    program = workspace / "client.py"
    shutil.copy(Path(services_plan(pids)["command"][1]), program)
    program.chmod(0o700)
    plan = services_plan(pids)
    plan["command"] = [str(program), "--report", str(pids)]
    run_dir = init_run(workspace, plan_doc=plan)
    program.unlink()
    submit(run_dir)
    doc = settle(run_dir)
    result = record(run_dir, "result.json")
    assert result["error_code"] == "preflight"
    assert result["error"] == (f"the client program {str(program)!r} is no longer an executable file, as it was "
                               "when the run was made; the client was not started")
    assert doc["shards"][0]["reason"] == result["error"]
    assert list(pids.iterdir()) == [] and not (attempt_dir(run_dir) / "services").exists()
    readiness = record(run_dir, "readiness.json")
    assert [b["pid"] for b in readiness["deployments"][0]["backends"]] == [None, None]
    assert readiness["state"] == "stopped"


@pytest.mark.parametrize("when", ["readiness", "client"])
def test_a_cancel_while_services_start_or_while_the_client_runs_leaves_no_backend(workspace, when):
    pids = workspace / "pids"
    server = ("--never-ready", "--child") if when == "readiness" else ("--child",)
    run_dir = init_run(workspace, plan_doc=services_plan(pids, server=server, client=("--sleep", "60"),
                                                         service={"stop_grace": 2}))
    submit(run_dir)
    wait_for(lambda: (r := record(run_dir, "readiness.json")) and all(b["pid"] for b in r["deployments"][0]["backends"])
             and (when == "readiness" or r["client"] == "running"), what=f"the {when}")
    wait_for(lambda: len(list(pids.glob("*.child.pid"))) == 2, what="the servers' children")
    started = backend_pids(run_dir, pids)
    cancelled_at = time.monotonic()
    proc = tau("tau-cancel", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    wait_for(lambda: not running(started), timeout=15, what="every backend gone")
    assert time.monotonic() - cancelled_at < 2 + 5  # the grace, and the stop's own time
    doc = settle(run_dir)
    assert doc["state"] == "cancelled"
    assert record(run_dir, "readiness.json")["state"] == "stopped"


def test_a_process_the_client_started_with_setsid_is_stopped_when_its_attempt_ends_and_named(workspace):
    pids = workspace / "pids"
    run_dir = init_run(workspace, plan_doc=services_plan(pids, backends=1, client=("--setsid",)))
    submit(run_dir)
    assert settle(run_dir)["state"] == "succeeded"
    forgotten = int((pids / "setsid-shard-00000-attempt-0001.pid").read_text())
    assert running({forgotten}) == set()
    assert record(run_dir, "result.json")["leftovers"] == [{"pid": forgotten, "command": "sleep 3600"}]


def test_max_parallel_caps_the_runs_tasks_across_every_live_submission(workspace):
    from helpers import CLIENT, PYTHON

    plan = {"records": 6, "shards": 6, "command": [PYTHON, CLIENT, "--sleep", "1.5", "--fail-first", "shard-00000"],
            "scheduler": {"profile": "local", "local": {"max_parallel": 2}},
            "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5}}
    run_dir = init_run(workspace, plan_doc=plan)
    submit(run_dir, "--shard", "0", "--shard", "1")  # the first submission
    assert tau("tau-cancel", str(run_dir), "--shard", "5").returncode == 0
    submit(run_dir)  # the rest, but the cancelled shard
    wait_for(lambda: (d := json.loads(tau("tau-status", str(run_dir)).stdout)) and d["retryable"] == ["shard-00000"],
             what="shard-00000 failing")
    assert tau("tau-retry", str(run_dir)).returncode == 0  # a retry, while the second submission is live
    assert tau("tau-retry", str(run_dir), "--reopen", "--shard", "5").returncode == 0  # a reopened shard
    doc = settle(run_dir)
    assert doc["state"] == "succeeded", doc
    spans, records = [], {}
    for task in sorted(run_dir.glob("submissions/*/local/task-*.json")):
        record_ = json.loads(task.read_text())
        records[str(task.relative_to(run_dir))] = (record_["state"], record_["exit_code"])
        if record_["state"] == "finished":
            spans.append((jsonio.parse_time(record_["started_at"]), jsonio.parse_time(record_["finished_at"])))
    assert len({p.parts[-3] for p in run_dir.glob("submissions/*/local/task-*.json")}) >= 3
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    live = most = 0
    for _, step in events:
        live += step
        most = max(most, live)
    assert len(spans) == 7 and most == 2, (records, spans)


def test_gpus_are_split_between_backends_without_overlap_and_the_client_gets_none(workspace):
    pids = workspace / "pids"
    plan = services_plan(pids, shards=2, records=4, backends=1, service={"gpus": 2})
    plan["services"].append({**plan["services"][0], "name": "judge", "gpus": 1})
    plan["scheduler"]["local"]["gpus"] = [0, 1, 2, "GPU-3"]
    run_dir = init_run(workspace, plan_doc=plan)
    submit(run_dir)
    assert settle(run_dir)["state"] == "succeeded"
    given = {}
    for shard in (0, 1):
        readiness = record(run_dir, "readiness.json", shard)
        devices = {d["name"]: d["backends"][0]["devices"] for d in readiness["deployments"]}
        assert len(devices["generator"]) == 2 and len(devices["judge"]) == 1
        assert not set(devices["generator"]) & set(devices["judge"])
        for name in ("generator", "judge"):
            log = (attempt_dir(run_dir, shard) / "services" / f"{name}-1.log").read_text()
            assert f"devices {','.join(devices[name])!r}" in log.splitlines()[0]  # what the process itself saw
        client = json.loads((pids / f"client-shard-{shard:05d}-attempt-0001.json").read_text())
        assert client["env"]["CUDA_VISIBLE_DEVICES"] == ""
        given[shard] = set(devices["generator"]) | set(devices["judge"])
    tasks = [json.loads(p.read_text()) for p in sorted(run_dir.glob("submissions/*/local/task-*.json"))]
    first, second = sorted(tasks, key=lambda t: t["started_at"])
    assert first["finished_at"] <= second["started_at"], "3 of 4 GPUs each: the two tasks never ran at once"


@pytest.mark.parametrize("change, code, message", [
    (lambda p: p["services"][0].update(gpus=1), 65, "tau-init: plan on standard input: its services need 2 GPU(s) "
     "per task, but scheduler.local.gpus gives each task 0; give it at least 2 there"),
    (lambda p: p["services"][0].update(colour="blue"), 65, "tau-init: plan on standard input does not match schema "
     "'plan-request' at /services/0: unexpected property 'colour'"),
    (lambda p: p["services"][0]["ready"].update(tcp=True), 65, "tau-init: plan on standard input does not match "
     "schema 'plan-request' at /services/0/ready"),
    (lambda p: p["services"].append(dict(p["services"][0])), 65, "tau-init: plan on standard input: services[1] is "
     "named 'generator', and 'generator' already is"),
    (lambda p: p["services"][0].update(command=["no-such-server"]), 66, "tau-init: service 'generator''s program "
     "'no-such-server' is not on PATH"),
    (lambda p: p["services"][0].update(ready={"command": ["/nonexistent/probe"]}), 66, "tau-init: service "
     "'generator''s probe program '/nonexistent/probe' does not exist"),
    (lambda p: p.update(env={"CUDA_VISIBLE_DEVICES": "0"}), 65, "tau-init: plan on standard input names "
     "'CUDA_VISIBLE_DEVICES' in env or inherit_env, which tau sets itself in a run with services: each backend gets "
     "its own GPUs and the client none"),
    (lambda p: p.update(inherit_env=["ZE_AFFINITY_MASK"]), 65, "tau-init: plan on standard input names "
     "'ZE_AFFINITY_MASK' in env or inherit_env"),
])
def test_tau_init_refuses_services_it_could_never_run_and_writes_nothing(workspace, change, code, message):
    plan = services_plan(workspace / "pids")
    change(plan)
    before = snapshot(workspace)
    proc = tau("tau-init", str(workspace / "run"), input=json.dumps(plan))
    assert proc.returncode == code, proc.stderr
    assert error_of(proc)["message"].startswith(message)
    assert snapshot(workspace) == before


def test_a_service_log_is_shown_by_tau_logs_and_the_status_shows_deployments(workspace):
    pids = workspace / "pids"
    run_dir = init_run(workspace, plan_doc=services_plan(pids, client=("--sleep", "3")))
    submit(run_dir)
    doc = wait_for(lambda: (d := json.loads(tau("tau-status", str(run_dir)).stdout))["shards"][0]["progress"]
                   and d["shards"][0]["progress"]["state"] == "running" and d, what="the client running")
    progress = doc["shards"][0]["progress"]
    assert progress["deployments"] == [{"name": "generator", "state": "ready", "ready_backends": 2,
                                        "expected_backends": 2, "endpoint": "published",
                                        "last_probe": progress["deployments"][0]["last_probe"]}]
    table = tau("tau-status", str(run_dir), "-o", "table").stdout
    assert "generator 2/2 ready (GET /v1/models answered 200)" in table
    settle(run_dir)
    shown = tau("tau-logs", str(run_dir), "0", "--service", "generator-2")
    assert shown.returncode == 0 and shown.stdout.startswith("standin generator-2: pid ")
    assert "POST /v1/completions" in shown.stdout
    two = tau("tau-logs", str(run_dir), "0", "--service", "generator")
    assert two.returncode == 2 and error_of(two)["message"] == ("tau-logs: service 'generator' has 2 backends: name "
                                                                 "one, from generator-1 to generator-2")
    none = tau("tau-logs", str(run_dir), "0", "--service", "judge-1")
    assert none.returncode == 66 and error_of(none)["message"] == ("tau-logs: run 'run' has no service backend "
                                                                    "'judge-1'; its services: generator-1..generator-2")
    import taulib.api as api

    assert api.open(str(run_dir)).logs(0, service="generator-1").startswith("standin generator-1: pid ")
    assert stat.S_IMODE((attempt_dir(run_dir) / "services" / "generator-1.log").stat().st_mode) == 0o600


def test_each_executor_reads_the_gpus_its_allocation_was_given_and_how_many_a_task_gets():
    from taulib import executors

    slurm, local = executors.get("slurm"), executors.get("local")
    assert slurm.devices({"CUDA_VISIBLE_DEVICES": "2,3", "SLURM_JOB_GPUS": "0,1"}) == ["2", "3"]
    assert slurm.devices({"SLURM_JOB_GPUS": "0,1"}) == ["0", "1"]
    assert slurm.devices({"SLURM_JOB_ID": "7"}) is None
    assert local.devices({"TAU_LOCAL_GPUS": "GPU-a,GPU-b"}) == ["GPU-a", "GPU-b"]
    assert local.devices({"CUDA_VISIBLE_DEVICES": "0"}) is None  # a local task gets only what its supervisor gave
    assert (slurm.gpus({"gpus": 4}), slurm.gpus({}), local.gpus({"gpus": ["0", "1", "2"]}), local.gpus({})) == \
        (4, 0, 3, 0)


def test_a_slurm_plan_whose_services_need_gpus_it_does_not_ask_for_is_refused_and_one_that_asks_is_made(workspace):
    plan = services_plan(workspace / "pids", service={"gpus": 1})
    plan["scheduler"] = {"profile": "slurm", "slurm": {"partition": "debug"}}
    before = snapshot(workspace)
    proc = tau("tau-init", str(workspace / "run"), input=json.dumps(plan))
    assert proc.returncode == 65 and error_of(proc)["message"] == (
        "tau-init: plan on standard input: its services need 2 GPU(s) per task, but scheduler.slurm.gpus gives each "
        "task 0; give it at least 2 there")
    assert snapshot(workspace) == before
    plan["scheduler"]["slurm"]["gpus"] = 2
    assert tau("tau-init", str(workspace / "run"), input=json.dumps(plan)).returncode == 0
    resolved = json.loads((workspace / "run" / "plan.json").read_text())
    assert resolved["scheduler"]["slurm"] == {"partition": "debug", "gpus": 2}
    assert resolved["services"][0]["gpus"] == 1 and resolved["services"][0]["ports"] is None


def test_waiting_for_a_model_to_load_is_never_a_stall_while_the_heartbeat_goes_on(workspace):
    pids = workspace / "pids"
    plan = services_plan(pids, backends=1, server=("--ready-after", "6"), service={"probe_seconds": 1})
    # progress_stall_seconds (2) is what waiting must not trip; stall_seconds is the heartbeat's, which a busy
    # machine may delay by a second or two (10)
    plan["windows"].update(heartbeat_seconds=1, stall_seconds=10, progress_stall_seconds=2, stall_action="stop")
    run_dir = init_run(workspace, plan_doc=plan)
    submit(run_dir)
    waiting = []
    while not (readiness := record(run_dir, "readiness.json")) or readiness["client"] == "waiting":
        shard = json.loads(tau("tau-status", str(run_dir)).stdout)["shards"][0]
        if shard["progress"] and shard["progress"]["state"] == "starting":  # (the client may start meanwhile)
            waiting.append(shard["stalled"])
        time.sleep(0.5)
    assert len(waiting) >= 6, waiting  # looked at for longer than the progress stall window while the model loaded
    assert waiting == [None] * len(waiting), waiting
    assert settle(run_dir)["state"] == "succeeded"
    assert not (run_dir / "shards" / "shard-00000" / "attempts" / "attempt-0001" / "stop.json").exists()


def test_an_attempt_cancelled_as_its_allocation_starts_ends_cancelled_with_its_services_never_started(workspace):
    pids = workspace / "pids"
    run_dir = init_run(workspace, plan_doc=services_plan(pids))
    proc = tau("tau-submit", str(run_dir), env={"TAU_FAILPOINTS": "tau-attempt:attempt.recorded=delay:3"})
    assert proc.returncode == 0, proc.stderr
    wait_for(lambda: (attempt_dir(run_dir) / "attempt.json").exists(), what="the allocation fenced")
    assert tau("tau-cancel", str(run_dir)).returncode == 0
    doc = settle(run_dir)
    assert doc["state"] == "cancelled"
    readiness = record(run_dir, "readiness.json")
    assert (readiness["revision"], readiness["state"], readiness["client"]) == (1, "stopped", "waiting")
    assert readiness["message"].endswith("; the client was never started")
    assert not (attempt_dir(run_dir) / "services").exists() and list(pids.iterdir()) == []
