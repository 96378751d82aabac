"""Races at 64 real processes, 10 rounds each (x TAU_ADVERSITY_SCALE): tau-retry, tau-collect, observe | reconcile
(with the status file), tau-winner, and tau-cancel against tau-retry. Each round starts from a fresh copy of the
same run; at the end there is exactly one of everything (submission, attempt, collection, dataset, winner,
observation revision, cancel record), every record in the run reads back valid (schema, canonical bytes), and no
temp file or stage is left."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from harness import REPORT, scaled
from test_cli_cancel import alive, process_groups

from helpers import module_workspace, BIN, PYTHON, complete_run, copy_run, env_for_tests, init_run, plan, settle, tau
from taulib.rundir.records import RunDir
from taulib.rundir.run import Run
from taulib.rundir.state import attempt_ids

pytestmark = pytest.mark.slow

RACERS = 64
ROUNDS = range(scaled(10))
ENV = {"TAU_LOCK_TIMEOUT": "300"}


def race(argvs: list[list[str]], stdin: str | None = None, timeout: float = 600) -> list[tuple[int, str, str]]:
    """Start every process at once, then wait for all; (exit code, stdout, stderr) of each, in order."""
    env = env_for_tests(ENV)
    procs = [subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for argv in argvs]
    if stdin is not None:
        for proc in procs:
            proc.stdin.write(stdin)
            proc.stdin.close()
    out = [(proc.wait(timeout=timeout), proc.stdout.read(), proc.stderr.read()) for proc in procs]
    REPORT["race_rounds"] += 1
    return out


def every_record_valid(run_dir: Path) -> int:
    """Read every JSON record of the run through the writer's reader (schema, kind, canonical bytes); their
    number. Also: no temp file, no stage, anywhere in the run."""
    count = 0
    with RunDir(str(run_dir)) as rd:
        for path in sorted(run_dir.rglob("*")):
            rel = str(path.relative_to(run_dir))
            assert not path.name.startswith(".tau."), f"debris {rel}"
            if path.suffix == ".json" and path.is_file() and "/local/" not in f"/{rel}":
                kind = json.loads(path.read_bytes())["kind"]
                assert rd.read(rel, kind) is not None, rel
                count += 1
    return count


def ok(results: list[tuple[int, str, str]]) -> list[dict]:
    for code, _out, err in results:
        assert code == 0, err
        assert err == "", err
    return [json.loads(out) for _, out, _ in results]


@pytest.fixture(scope="module")
def failed(tmp_path_factory) -> Path:
    """A settled run of 4 shards whose shard-00001 failed its first attempt."""
    ws = module_workspace(tmp_path_factory, "races-failed")
    run_dir = init_run(ws, records=40, shards=4, fail_first=("shard-00001",))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    assert settle(run_dir)["retryable"] == ["shard-00001"]
    return run_dir


@pytest.fixture(scope="module")
def complete(tmp_path_factory) -> Path:
    ws = module_workspace(tmp_path_factory, "races-complete")
    return complete_run(ws, records=40, shards=4)


@pytest.mark.parametrize("round_", ROUNDS)
def test_64_concurrent_retries_make_exactly_one_submission_and_one_attempt(failed, tmp_path, round_):
    run_dir = copy_run(failed, tmp_path / "c")
    docs = ok(race([[str(BIN / "tau-retry"), str(run_dir)] for _ in range(RACERS)]))
    created = [d for d in docs if d["created"]]
    assert len(created) == 1, [d["submission_id"] for d in created]
    assert created[0]["submission_id"] == "submission-0002"
    assert [t["shard_id"] for t in created[0]["tasks"]] == ["shard-00001"]
    for doc in docs:  # the others found nothing left to retry, or reported the same submission
        assert doc["submission_id"] in (None, "submission-0002"), doc
    assert sorted(os.listdir(run_dir / "submissions")) == ["submission-0001", "submission-0002"]
    with Run(str(run_dir)) as run:  # attempt-0002 may have no folder yet (format 2: its submission records it)
        assert attempt_ids(run, "shard-00001") == ["attempt-0001", "attempt-0002"]
    final = settle(run_dir)
    assert final["state"] == "succeeded", final
    every_record_valid(run_dir)


@pytest.mark.parametrize("round_", ROUNDS)
def test_64_concurrent_collections_publish_exactly_one_dataset(complete, tmp_path, round_):
    run_dir = copy_run(complete, tmp_path / "c")
    dest = run_dir.parent / "data"
    docs = ok(race([[str(BIN / "tau-collect"), str(run_dir), "--destination", str(dest)] for _ in range(RACERS)]))
    assert sum(d["created"] for d in docs) == 1, [d["created"] for d in docs]
    assert {d["collection_id"] for d in docs} == {"collection-0001"}
    assert {d["records"] for d in docs} == {40}
    assert os.listdir(run_dir / "collections") == ["collection-0001"]
    assert sorted(os.listdir(run_dir.parent)) == ["data", "run"]  # no stage, no reservation
    import pyarrow.parquet as pq

    assert sorted(pq.read_table(dest, columns=["id"]).column("id").to_pylist()) == list(range(40))
    every_record_valid(run_dir)


def seen_running(run_dir: Path, sid: str) -> None:
    """The evidence of a shard's attempt as an observer saw it while it ran (queue: running, a second ago)."""
    from taulib import jsonio

    rel = f"shards/{sid}/attempts/attempt-0001/observation.json"
    at = jsonio.format_time(jsonio.parse_time(jsonio.now_rfc3339()) - 1)
    with RunDir(str(run_dir)) as rd:
        assert rd.read(rel, "tau.observation") is None
        rd.replace(rel, {"kind": "tau.observation", "schema_version": 1, "run_id": "run", "shard_id": sid,
                         "attempt_id": "attempt-0001", "revision": 1, "state": "running", "source": "queue",
                         "terminal": False, "observed_at": at, "changed_at": at, "deadline": None,
                         "exit_code": None, "reason": None, "classification": None})


@pytest.mark.parametrize("round_", ROUNDS)
def test_64_concurrent_observe_reconcile_pipelines_change_the_evidence_once(failed, tmp_path, round_):
    run_dir = copy_run(failed, tmp_path / "c")
    obs_file = run_dir / "shards/shard-00001/attempts/attempt-0001/observation.json"
    seen_running(run_dir, "shard-00001")  # observed while it ran; it has finished since
    shutil.rmtree(run_dir / "index", ignore_errors=True)  # what the winners' publishers added: gone
    status_file = run_dir.parent / "run.status.json"
    script = (f'"{BIN}/tau-observe" "$1" | "{BIN}/tau-reconcile" "$1" --status-file "$2"')
    docs = ok(race([["sh", "-c", script, "sh", str(run_dir), str(status_file)] for _ in range(RACERS)]))
    changes = [c for d in docs for c in d["changes"] if c["shard_id"] == "shard-00001"]
    assert len(changes) == 1, changes  # each reads the local executor's accounting: one writes the evidence
    assert json.loads(obs_file.read_text())["revision"] == 2
    assert all(d["retryable"] == ["shard-00001"] for d in docs)
    assert json.loads(status_file.read_text())["retryable"] == ["shard-00001"]
    assert oct(status_file.stat().st_mode & 0o777) == "0o600"
    index = json.loads((run_dir / "index" / "sealed-0000.json").read_text())
    assert (index["revision"], index["ordinals"]) == (1, "1,0,1,1"), index  # the three sealed shards, added once
    assert sorted(os.listdir(run_dir.parent)) == ["run", "run.status.json"]
    every_record_valid(run_dir)


@pytest.mark.parametrize("round_", ROUNDS)
def test_64_concurrent_winners_publish_exactly_one(complete, tmp_path, round_):
    run_dir = copy_run(complete, tmp_path / "c")
    winner = run_dir / "shards/shard-00002/winner.json"
    before = json.loads(winner.read_text())
    winner.unlink()
    shutil.rmtree(run_dir / "index")
    docs = ok(race([[str(BIN / "tau-winner"), str(run_dir), "--shard", "shard-00002"] for _ in range(RACERS)]))
    outcomes = [d["shards"][0] for d in docs]
    assert sum(o["published"] for o in outcomes) == 1
    assert {(o["winner"], o["manifest_sha256"]) for o in outcomes} == {("attempt-0001", before["manifest"]["sha256"])}
    assert winner.stat().st_nlink == 1
    every_record_valid(run_dir)


@pytest.fixture(scope="module")
def all_failed(tmp_path_factory) -> Path:
    """A settled run of 8 shards that all failed once (retryable), with a budget that lets them be retried."""
    from test_cli_run_environment import PROBE

    ws = module_workspace(tmp_path_factory, "races-cancel")
    doc = plan(records=8, shards=8, command=[PYTHON, str(PROBE), "--fail"],
               retry={"max_attempts": 100, "max_failed_attempts": 1000})
    run_dir = init_run(ws, plan_doc=doc)
    assert tau("tau-submit", str(run_dir)).returncode == 0
    assert settle(run_dir)["counts"]["failed"] == 8
    return run_dir


@pytest.mark.parametrize("round_", ROUNDS)
def test_64_concurrent_cancels_and_retries_converge_to_cancelled(all_failed, tmp_path, round_):
    run_dir = copy_run(all_failed, tmp_path / "c")
    named = ["shard-00000", "shard-00002", "shard-00005", "shard-00007"]
    cancel = [str(BIN / "tau-cancel"), str(run_dir), *(a for s in named for a in ("--shard", s))]
    retry = [str(BIN / "tau-retry"), str(run_dir)]
    ok(race([cancel if n % 2 else retry for n in range(RACERS)]))
    doc = settle(run_dir)
    for shard in doc["shards"]:
        assert (shard["state"] == "cancelled") == (shard["id"] in named), shard
    for sid in named:
        record = json.loads((run_dir / "shards" / sid / "cancel.json").read_text())
        for path in (run_dir / "shards" / sid / "attempts").glob("*/attempt.json"):
            attempt = json.loads(path.read_text())
            assert attempt["created_at"] < record["requested_at"], f"{sid}/{attempt['attempt_id']} after the cancel"
            assert attempt["started_at"] is None or attempt["started_at"] < record["requested_at"], (
                f"{sid}/{attempt['attempt_id']} started after the cancel record")
    assert not alive(process_groups(run_dir))
    every_record_valid(run_dir)
