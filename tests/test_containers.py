"""Clients, services and collections in images pinned by digest, run for real by podman (with runc) on the local
executor: the images are built offline by contrib/containers/test-images.sh (tests/containers.py). What a runtime
that cannot be installed here does is held by golden command lines (tests/test_runtimes.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from containers import PODMAN, RUNTIME_ARGS, container_name, container_pids, containers_of, images
from services_fixtures import SERVER, attempt_dir, record, running, services_plan

from helpers import CLIENT, ROOT, error_of, init_run, plan, settle, snapshot, start_paused, tau, wait_for

pytestmark = pytest.mark.containers

DEMO = str(Path(CLIENT).parent)
IN_IMAGE_CLIENT = ["python3", CLIENT, "--rows-per-file", "10"]


def image_of(kind: str = "client", **extra) -> dict:
    built = images()[kind]
    return {"ref": built["ref"], "runtime": "podman", "runtime_command": PODMAN, "runtime_args": RUNTIME_ARGS,
            "mounts": [{"host": DEMO, "container": DEMO}], **extra}


def contained_plan(**extra) -> dict:
    return plan(records=40, shards=4, **{"command": IN_IMAGE_CLIENT, "image": image_of(), **extra})


def run_to_the_end(run_dir: Path) -> dict:
    proc = tau("tau-submit", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    return settle(run_dir)


def collect(run_dir: Path, dest: Path, *args: str) -> subprocess.CompletedProcess:
    return tau("tau-collect", str(run_dir), "--destination", str(dest), *args)


def data_files(dest: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(dest.iterdir()) if not p.name.startswith("_")}


def test_a_client_in_a_pinned_image_writes_through_its_mount_wins_every_shard_and_collects_as_on_the_host(
        workspace):
    host = init_run(workspace, "host", plan_doc=plan(records=40, shards=4))
    assert run_to_the_end(host)["state"] == "succeeded"
    run_dir = init_run(workspace, "boxed", plan_doc=contained_plan())
    doc = run_to_the_end(run_dir)
    assert doc["state"] == "succeeded", doc
    digest = images()["client"]["digest"]
    for index in range(4):
        result = record(run_dir, "result.json", index)
        assert result["image_digest"] == digest and result["outcome"] == "complete"
    assert collect(host, workspace / "host-data").returncode == 0
    proc = collect(run_dir, workspace / "boxed-data")
    assert proc.returncode == 0, proc.stderr
    assert data_files(workspace / "boxed-data") == data_files(workspace / "host-data")
    assert containers_of(run_dir) == []


def test_the_client_gets_exactly_tau_s_environment_and_the_images_path_never_the_hosts(workspace):
    printer = ["/bin/sh", "-c", "env > \"$TAU_OUTPUT_DIR/../env.txt\"; exec python3 \"$0\" --rows-per-file 10",
               CLIENT]
    run_dir = init_run(workspace, plan_doc=plan(records=4, shards=1, command=printer, image=image_of(),
                                                env={"GREETING": "hello"}))
    assert run_to_the_end(run_dir)["state"] == "succeeded"
    seen = dict(line.split("=", 1) for line in
                (run_dir / "shards/shard-00000/attempts/attempt-0001/env.txt").read_text().splitlines() if "=" in line)
    assert seen["GREETING"] == "hello" and seen["TAU_SHARD_ID"] == "shard-00000"
    assert seen["PATH"].startswith("/opt/tau/bin:")  # the image's, not the host's
    assert seen["TAU_OUTPUT_DIR"] == str(run_dir / "shards/shard-00000/attempts/attempt-0001/dataset")
    assert not {"HOME_OF_HOST", "VIRTUAL_ENV", "PYTHONPATH", "http_proxy"} & set(seen)


def test_a_program_that_is_not_in_the_image_fails_the_preflight_naming_it_and_nothing_starts(workspace):
    run_dir = init_run(workspace, plan_doc=plan(records=4, shards=1, command=["no-such-program", "--x"],
                                                image=image_of()))
    doc = run_to_the_end(run_dir)
    result = record(run_dir, "result.json")
    assert result["error_code"] == "preflight"
    assert result["error"].startswith("client's program 'no-such-program' is not in image "
                                      f"{images()['client']['ref'].split(':1')[0]}")
    assert doc["shards"][0]["state"] == "failed"


def test_an_image_file_rewritten_after_init_fails_image_changed_before_its_client_starts_and_is_not_retried(
        workspace, tmp_path):
    built = images()["file"]
    copy = tmp_path / "client.oci.tar"
    shutil.copyfile(built["path"], copy)
    image = {**image_of(), "file": str(copy), "sha256": built["sha256"]}
    del image["ref"]
    run_dir = init_run(workspace, plan_doc=plan(records=8, shards=2, command=IN_IMAGE_CLIENT, image=image))
    with open(copy, "ab") as fh:  # rewritten: one byte more
        fh.write(b"\0")
    changed = "sha256:" + hashlib.sha256(copy.read_bytes()).hexdigest()
    doc = run_to_the_end(run_dir)
    for index in range(2):
        result = record(run_dir, "result.json", index)
        assert result["error_code"] == "image_changed" and result["exit_code"] is None
        assert result["error"] == (f"image changed: {copy} has {changed}, the run pins sha256:{built['sha256']}; a "
                                   "different image is a different run (tau-init NEW --from RUN with the new sha256) "
                                   "(client's image)")
        assert not (record(run_dir, "result.json", index) or {}).get("image_digest")
        assert not (run_dir / f"shards/shard-0000{index}/attempts/attempt-0001/client.log").exists() or \
            (run_dir / f"shards/shard-0000{index}/attempts/attempt-0001/client.log").read_text() == ""
    shard = doc["shards"][0]
    assert shard["state"] == "exhausted" and shard["attempts"] == 1
    assert shard["reason"].endswith("not retried: a different image is a different run (tau-init NEW --from RUN, "
                                    "with the image pinned anew)")
    before = snapshot(run_dir)
    retry = tau("tau-retry", str(run_dir))
    assert retry.returncode == 0, retry.stderr
    said = json.loads(retry.stdout)
    assert said["submission_id"] is None and [e["shard_id"] for e in said["exhausted"]] == ["shard-00000",
                                                                                           "shard-00001"]
    assert all("image changed" in e["reason"] for e in said["exhausted"]) and said["reason"]
    assert snapshot(run_dir) == before
    status = tau("tau-status", str(run_dir))
    assert "image changed" in json.loads(status.stdout)["shards"][1]["reason"]


def test_an_image_file_pinned_by_its_sha256_runs_what_podman_loaded_from_it(workspace):
    built = images()["file"]
    image = {**image_of(), "file": built["path"], "sha256": built["sha256"]}
    del image["ref"]
    run_dir = init_run(workspace, plan_doc=plan(records=8, shards=2, command=IN_IMAGE_CLIENT, image=image))
    assert run_to_the_end(run_dir)["state"] == "succeeded"
    assert record(run_dir, "result.json")["image_digest"] == "sha256:" + built["sha256"]


def test_a_service_in_one_pinned_image_and_the_client_in_another_both_digests_recorded_ready_as_without(
        workspace):
    pids = workspace / "pids"
    doc = services_plan(pids, backends=1)
    clients = str(ROOT / "tests" / "clients")
    mounts = [{"host": clients, "container": clients}, {"host": str(pids), "container": str(pids), "writable": True}]
    doc["services"][0]["command"] = ["python3", SERVER, "--port", "{port}", "--pid-dir", str(pids)]
    doc["services"][0]["image"] = image_of("service", mounts=mounts)
    doc["command"] = ["python3", *doc["command"][1:]]
    doc["image"] = image_of(mounts=mounts)
    run_dir = init_run(workspace, plan_doc=doc)
    assert run_to_the_end(run_dir)["state"] == "succeeded"
    result = record(run_dir, "result.json")
    assert result["image_digest"] == images()["client"]["digest"]
    assert result["service_images"] == {"generator": images()["service"]["digest"]}
    ready = record(run_dir, "readiness.json")
    assert ready["state"] == "stopped" and [d["state"] for d in ready["deployments"]] == ["stopped"]
    assert ready["deployments"][0]["ready_backends"] == 0 and ready["deployments"][0]["endpoint"] != "pending"
    assert containers_of(run_dir) == []


def test_a_collection_in_the_client_image_writes_the_same_bytes_and_records_where_the_dataset_is_inside(
        workspace):
    out = workspace / "out"
    out.mkdir(mode=0o700)
    shelf = workspace / "shelf"
    shelf.mkdir(mode=0o700)
    image = image_of(mounts=[{"host": DEMO, "container": DEMO},
                             {"host": str(out), "container": "/data/out", "writable": True},
                             {"host": str(shelf), "container": "/shelf"}])
    run_dir = init_run(workspace, plan_doc=plan(records=40, shards=4, command=IN_IMAGE_CLIENT, image=image,
                                                collection={"image": "client"}))
    assert run_to_the_end(run_dir)["state"] == "succeeded"
    host = init_run(workspace, "host", plan_doc=plan(records=40, shards=4))
    assert run_to_the_end(host)["state"] == "succeeded"
    assert collect(host, workspace / "host-data").returncode == 0
    refused = collect(run_dir, shelf / "data")
    assert refused.returncode == 77
    assert error_of(refused)["message"] == (
        f"tau-collect: destination '{shelf}/data' is below the read-only mount '{shelf}' -> '/shelf' of the client's "
        "image, where the collection runs: mount it writable (image.mounts[].writable)")
    nowhere = collect(run_dir, workspace / "loose" / "data")
    assert nowhere.returncode == 77
    assert error_of(nowhere)["message"] == (
        f"tau-collect: destination '{workspace}/loose/data' is below no mount of the client's image, where the "
        "collection runs (plan collection.image client): mount its folder writable (image.mounts)")
    assert not (shelf / "data").exists() and not (workspace / "loose").exists()
    assert not (run_dir / "collections").exists()
    proc = collect(run_dir, out / "data")
    assert proc.returncode == 0, proc.stderr
    assert data_files(out / "data") == data_files(workspace / "host-data")
    collection = json.loads((run_dir / "collections/collection-0001/plan.json").read_text())
    assert collection["destination"] == str(out / "data")
    assert collection["image"] == {"digest": images()["client"]["digest"], "runtime": "podman",
                                   "destination": "/data/out/data"}
    assert containers_of(run_dir) == []


def test_a_collection_in_an_image_without_tau_is_refused_saying_what_to_install(workspace, tmp_path):
    bare = subprocess.run([*PODMAN, "image", "inspect", "--format", "{{.Digest}}", "localhost/tau-test-base"],
                          capture_output=True, text=True, check=True).stdout.strip()
    out = workspace / "out"
    out.mkdir(mode=0o700)
    image = {**image_of(), "ref": f"localhost/tau-test-base@{bare}",
             "mounts": [{"host": str(out), "container": "/out", "writable": True}]}
    run_dir = init_run(workspace, plan_doc=plan(records=4, shards=1, collection={"image": "client"}, image=image,
                                                command=["/bin/sh", "-c", "exit 3"]))
    refused = collect(run_dir, out / "data")
    assert refused.returncode == 77
    assert error_of(refused)["message"].startswith(
        f"tau-collect: tau is not installed in the client image localhost/tau-test-base@{bare}, where the "
        "collection runs (plan collection.image client): install it there (pip install tau)")
    assert not (out / "data").exists()


def test_a_site_profile_holds_the_podman_flags_and_mounts_for_two_runs_and_editing_it_changes_neither(
        workspace, tmp_path):
    sites = tmp_path / "sites"
    sites.mkdir()
    profile = {"schema_version": 1, "image": {"runtime": "podman", "runtime_command": PODMAN,
                         "runtime_args": [*RUNTIME_ARGS, "--env", "SITE_MARK=v1"],
                         "mounts": [{"host": DEMO, "container": DEMO}]}}
    (sites / "lab.json").write_text(json.dumps(profile))
    env = {"TAU_SITE_PATH": str(sites)}
    printer = ["/bin/sh", "-c", "echo mark=$SITE_MARK; exec python3 \"$0\" --rows-per-file 10", CLIENT]
    request = {"records": 8, "shards": 2, "command": printer, "image": images()["client"]["ref"],
               "scheduler": {"site": "lab"}}
    runs = []
    for name in ("one", "two"):
        proc = tau("tau-init", str(workspace / name), input=json.dumps(request), env=env)
        assert proc.returncode == 0, proc.stderr
        runs.append((workspace / name, json.loads(proc.stdout)["plan_sha256"]))
    assert run_to_the_end(runs[0][0])["state"] == "succeeded"
    profile["image"]["runtime_args"][-1] = "SITE_MARK=v2"
    (sites / "lab.json").write_text(json.dumps(profile))
    assert run_to_the_end(runs[1][0])["state"] == "succeeded"  # made before the edit: runs as then
    for run_dir, digest in runs:
        stored = json.loads((run_dir / "run.json").read_text())["plan"]["sha256"]
        assert stored == digest == hashlib.sha256((run_dir / "plan.json").read_bytes()).hexdigest()
        logs = [p.read_text() for p in sorted(run_dir.glob("shards/*/attempts/*/client.log"))]
        assert logs and all(log.startswith("mark=v1\n") for log in logs)
        assert json.loads((run_dir / "plan.json").read_text())["site"]["name"] == "lab"
    broken = {"schema_version": 1, "image": {"runtime": "podman", "runtime_command": ["podman-missing"]}}
    (sites / "broken.json").write_text(json.dumps(broken))
    checked = tau("tau-site", "validate", "broken", env=env)
    assert checked.returncode == 1
    assert json.loads(checked.stdout)["problems"] == ["image.runtime_command's program 'podman-missing' is not on PATH"]
    refused = tau("tau-init", str(workspace / "three"), input=json.dumps({**request, "scheduler": {"site": "broken"}}),
                  env=env)
    assert refused.returncode == 66
    assert "program 'podman-missing' is not on PATH" in error_of(refused)["message"]
    assert not (workspace / "three").exists()


@pytest.mark.parametrize("how", ["cancel", "time limit"])
def test_a_contained_client_stopped_by_a_cancel_or_its_time_limit_leaves_no_process_and_no_container(
        workspace, how):
    sleeper = ["/bin/sh", "-c", "trap '' TERM; sleep 300"]  # deaf to SIGTERM: it must be killed
    local = {"max_parallel": 1, **({"time_limit": 6} if how == "time limit" else {})}
    run_dir = init_run(workspace, plan_doc=plan(records=1, shards=1, command=sleeper, image=image_of(),
                                                scheduler={"profile": "local", "local": local}))
    assert tau("tau-submit", str(run_dir)).returncode == 0
    name = container_name(run_dir, "shard-00000-attempt-0001-client")
    started = wait_for(lambda: container_pids(name), timeout=60, what="the client's container")
    assert len(started) == 2 and running(started) == started
    if how == "cancel":
        assert tau("tau-cancel", str(run_dir)).returncode == 0
    wait_for(lambda: not running(started), timeout=40, what="the container's processes gone")
    doc = settle(run_dir)
    assert doc["state"] in ("cancelled", "failed"), doc
    assert containers_of(run_dir) == []


def test_a_service_whose_program_is_not_in_its_image_fails_the_preflight_and_nothing_starts(workspace):
    pids = workspace / "pids"
    doc = services_plan(pids, backends=1)
    doc["services"][0]["command"] = ["no-such-server", "--port", "{port}"]
    doc["services"][0]["image"] = image_of("service")
    run_dir = init_run(workspace, plan_doc=doc)
    run_to_the_end(run_dir)
    result = record(run_dir, "result.json")
    assert result["error_code"] == "preflight"
    assert result["error"].startswith("service generator's program 'no-such-server' is not in image "
                                      "localhost/tau-test-service@sha256:")
    assert result["error"].endswith("; nothing was started")
    assert not list((run_dir / "shards/shard-00000/attempts/attempt-0001").glob("services/*.log"))
    assert containers_of(run_dir) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_collection_in_the_image_stopped_by_a_signal_leaves_no_stage_no_container_and_the_next_call_collects(
        workspace, signum):
    out = workspace / "out"
    out.mkdir(mode=0o700)
    image = image_of(mounts=[{"host": DEMO, "container": DEMO},
                             {"host": str(out), "container": "/data/out", "writable": True}])
    run_dir = init_run(workspace, plan_doc=plan(records=40, shards=4, command=IN_IMAGE_CLIENT, image=image,
                                                collection={"image": "client"}))
    assert run_to_the_end(run_dir)["state"] == "succeeded"
    trace = out / "trace"  # written by the tau in the image, through the mount
    proc = start_paused("tau-collect", str(run_dir), "--destination", str(out / "data"), failpoint="collect.staged",
                        trace=trace, timeout=120)
    assert [p.name for p in out.iterdir() if "tau-stage" in p.name]  # the complete stage, not yet published
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=90)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, err
    error = error_of(subprocess.CompletedProcess(proc.args, proc.returncode, "", err.lstrip("\n")))  # one object
    assert error["message"] == f"tau-collect: interrupted by {name}"
    assert sorted(p.name for p in out.iterdir()) == ["trace"]  # no stage, no dataset
    assert containers_of(run_dir) == [] and not subprocess.run(
        [*PODMAN, "ps", "--all", "--quiet", "--filter", f"name=tau-{run_dir.name}-collect-"],
        capture_output=True, text=True, check=True).stdout.strip()
    again = collect(run_dir, out / "data")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["records"] == 40


@pytest.fixture
def cdi_gpus(tmp_path):
    """Two fake GPUs podman really injects: character devices (copies of /dev/null) named by a CDI spec in
    /var/run/cdi (podman's runtime spec folder) as nvidia.com/gpu=tau-test-N, removed again afterwards."""
    folder = tmp_path / "gpus"
    folder.mkdir()
    names = []
    for index in range(2):
        os.mknod(folder / f"gpu{index}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        names.append(f"tau-test-{os.getpid()}-{index}")
    spec = Path("/var/run/cdi") / f"tau-test-{os.getpid()}.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text('cdiVersion: "0.5.0"\nkind: "nvidia.com/gpu"\ndevices:\n' + "".join(
        f'  - name: "{name}"\n    containerEdits:\n      deviceNodes:\n        - path: "{folder}/gpu{index}"\n'
        for index, name in enumerate(names)))
    yield folder, names
    spec.unlink()


def test_each_backend_in_an_image_gets_exactly_its_gpu_inside_numbered_from_zero(workspace, cdi_gpus):
    folder, names = cdi_gpus
    pids = workspace / "pids"
    doc = services_plan(pids, backends=2, service={"gpus": 1})
    seen = f"ls {folder} > {pids}/devices-$TAU_SERVICE_BACKEND; echo $CUDA_VISIBLE_DEVICES >> {pids}/devices-" \
           "$TAU_SERVICE_BACKEND; exec python3 \"$0\" --port \"$1\" --pid-dir \"$2\""
    doc["services"][0]["command"] = ["/bin/sh", "-c", seen, SERVER, "{port}", str(pids)]
    clients = str(ROOT / "tests" / "clients")
    doc["services"][0]["image"] = image_of("service", mounts=[
        {"host": clients, "container": clients}, {"host": str(pids), "container": str(pids), "writable": True}])
    doc["scheduler"]["local"]["gpus"] = names
    run_dir = init_run(workspace, plan_doc=doc)
    assert run_to_the_end(run_dir)["state"] == "succeeded"
    inside = {n: (pids / f"devices-{n}").read_text().split() for n in (1, 2)}
    assert sorted(inside.values()) == [["gpu0", "0"], ["gpu1", "0"]]  # one device each, numbered 0 inside
    assert record(run_dir, "result.json")["service_images"] == {"generator": images()["service"]["digest"]}


def test_an_image_file_podman_does_not_hold_is_loaded_once_then_run_by_its_id(workspace):
    store = Path(tempfile.mkdtemp(prefix="tau-"))  # podman's runroot must be under 50 characters
    own = [*PODMAN, "--root", str(store / "root"), "--runroot", str(store / "run")]  # a store of its own: empty
    built = images()["file"]
    image = {**image_of(), "file": built["path"], "sha256": built["sha256"], "runtime_command": own}
    del image["ref"]
    try:
        run_dir = init_run(workspace, plan_doc=plan(records=8, shards=2, command=IN_IMAGE_CLIENT, image=image))
        assert run_to_the_end(run_dir)["state"] == "succeeded"
        ids = subprocess.run([*own, "images", "--quiet", "--no-trunc"], capture_output=True, text=True,
                             check=True).stdout.split()
        assert len(ids) == 1  # loaded by the first attempt; the second found it held
        for index in range(2):
            assert record(run_dir, "result.json", index)["image_digest"] == "sha256:" + built["sha256"]
    finally:
        subprocess.run([*own, "system", "reset", "--force"], capture_output=True, check=False)
        shutil.rmtree(store, ignore_errors=True)


def test_a_client_in_a_pinned_image_reads_its_rows_and_the_source_only_read_only_at_its_own_path(workspace):
    from input_fixtures import CLIENT as INPUT_CLIENT
    from input_fixtures import read, request, rows, write

    data = rows(600)
    source = write(workspace / "input", "parquet", data, files=2, row_group=100)
    clients = str(Path(INPUT_CLIENT).parent)
    image = image_of(mounts=[{"host": clients, "container": clients}])
    doc = request(source, shards=3, command=["python3", INPUT_CLIENT], image=image,
                  env={"INPUT_CLIENT_SOURCE": "1"})
    run_dir = init_run(workspace, plan_doc=doc)
    doc = settle(run_dir) if tau("tau-submit", str(run_dir)).returncode == 0 else None
    assert doc is not None and doc["state"] == "succeeded", doc and doc["shards"]
    for index in range(3):
        assert record(run_dir, "result.json", index)["image_digest"] == images()["client"]["digest"]
        got = read(attempt_dir(run_dir, index) / "input.parquet", "parquet")
        assert got == data[index * 200:(index + 1) * 200]
        checked = json.loads((attempt_dir(run_dir, index) / "source-check.json").read_text())
        assert checked == {"head": "PAR1", "append": "Read-only file system"}
    dest = workspace / "out"
    assert tau("tau-collect", str(run_dir), "--destination", str(dest)).returncode == 0
    import pyarrow.dataset as ds

    assert ds.dataset(str(dest), format="parquet").to_table().column("id").to_pylist() == list(range(600))
