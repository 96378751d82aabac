"""Images pinned by digest on the real Slurm test cluster, run by podman (with runc) inside the allocation: a client
in a pinned image wins every shard, its attempts record the digest, and its collection, made on the host or by the
collection job in the client image, is byte for byte a host run's. The images are built offline
(contrib/containers/test-images.sh, tests/containers.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from containers import PODMAN, RUNTIME_ARGS, container_name, container_pids, containers_of, images
from services_fixtures import running

from helpers import CLIENT, complete_run, tau
from slurm import data_bytes, init_slurm_run, job_id, record, run_cmd, settled, submit, wait_for, wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.containers]

DEMO = str(Path(CLIENT).parent)


def test_a_client_in_a_pinned_image_wins_every_shard_under_slurm_and_collects_as_on_the_host_or_in_the_image(
        cluster, workspace):
    out = workspace / "out"
    out.mkdir(mode=0o700)
    image = {"ref": images()["client"]["ref"], "runtime_command": PODMAN, "runtime_args": RUNTIME_ARGS,
             "mounts": [{"host": DEMO, "container": DEMO}, {"host": str(out), "container": "/out", "writable": True}]}
    run_dir = init_slurm_run(workspace, records=80, shards=4, command=["python3", CLIENT, "--rows-per-file", "10"],
                             image=image, collection={"image": "client"})
    submit(run_dir)
    status = wait_for(settled, run_dir, timeout=240, pause=0.5)
    assert status["state"] == "succeeded", status
    digest = images()["client"]["digest"]
    for sid in [s["id"] for s in status["shards"]]:
        result = record(run_dir, f"shards/{sid}/attempts/attempt-0001/result.json")
        assert result["image_digest"] == digest and result["outcome"] == "complete"
    host = complete_run(workspace, "host", records=80, shards=4,
                        output={"format": "parquet", "rows_per_partition": 25})
    assert tau("tau-collect", str(host), "--destination", str(workspace / "host-data")).returncode == 0
    proc = tau("tau-collect", str(run_dir), "--destination", str(out / "data"), "--tasks", "2", "--wait")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["state"] == "succeeded"
    assert data_bytes(out / "data") == data_bytes(workspace / "host-data")
    plan = record(run_dir, "collections/collection-0001/plan.json")
    assert plan["image"] == {"digest": digest, "runtime": "podman", "destination": "/out/data"}
    for task in (0, 1):  # the job's own records: each task ran in the image
        assert record(run_dir, f"collections/collection-0001/task-0000{task}.json")["image_digest"] == digest


def test_scancel_of_a_task_whose_client_runs_in_an_image_deaf_to_sigterm_leaves_no_process_and_no_container(
        cluster, workspace):
    image = {"ref": images()["client"]["ref"], "runtime_command": PODMAN, "runtime_args": RUNTIME_ARGS}
    run_dir = init_slurm_run(workspace, records=1, shards=1, command=["/bin/sh", "-c", "trap '' TERM; sleep 300"],
                             image=image)
    submit(run_dir)
    job = job_id(run_dir)
    name = container_name(run_dir, "shard-00000-attempt-0001-client")
    started = wait_until(lambda: container_pids(name), timeout=120, what="the client's container")
    assert len(started) == 2 and running(started) == started
    run_cmd("scancel", f"{job}_0")
    wait_until(lambda: not running(started), timeout=60, what="the container's processes gone")
    status = wait_for(settled, run_dir, timeout=120)
    assert status["shards"][0]["state"] in ("failed", "cancelled"), status
    assert containers_of(run_dir) == []
