"""The sbatch script is a pure function of validated fields, pinned by golden files.

Accept an intended change with: TAU_ACCEPT_GOLDEN=1 .venv/bin/python -m pytest tests/test_slurm_script.py
"""

import json
import os
import subprocess
import sys

import pytest
from helpers import check_golden

from taulib.errors import BadInput
from taulib.executors.slurm.script import render

BASE = dict(job_name="tau-demo-6ddb4c9a-0001", run_dir="/scratch/alice/runs/demo", submission_id="submission-0001",
            python="/opt/tau/.venv/bin/python")


def test_a_full_array_with_every_profile_field_renders_its_golden_script():
    text = render(**BASE, task_indices=list(range(8)),
                  profile={"partition": "gpu", "account": "proj1", "qos": "normal", "time": "1-02:00:00",
                           "mem": "16G", "cpus_per_task": 4, "max_parallel": 3, "extra": ["--nice=10"]})
    check_golden("sbatch-full-array.sh", text)


def test_a_sparse_retry_array_reuses_each_shards_task_index():
    text = render(**{**BASE, "submission_id": "submission-0002", "job_name": "tau-demo-6ddb4c9a-0002"},
                  task_indices=[7, 1, 3, 4, 5], profile={"partition": "debug"})
    check_golden("sbatch-sparse-retry.sh", text)
    assert "#SBATCH --array=1,3-5,7\n" in text


def test_sbatch_lines_are_sorted_and_the_body_is_an_argument_vector():
    text = render(**BASE, task_indices=[0, 1], profile={"time": "10:00", "partition": "debug"})
    lines = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert lines == sorted(lines)
    assert text.rstrip().splitlines()[-1] == ("exec /opt/tau/.venv/bin/python -m taulib.cli.attempt run "
                                              "/scratch/alice/runs/demo --submission submission-0001")


def test_the_same_fields_always_give_the_same_bytes_whatever_their_order_and_the_interpreter():
    profile = {"partition": "debug", "max_parallel": 2, "time": "10:00", "mem": "4G", "extra": ["--nice=5"]}
    text = render(**BASE, task_indices=[2, 0, 1], profile=profile)
    assert "#SBATCH --array=0-2%2\n" in text
    # other orders of the same fields
    assert render(**BASE, task_indices=[0, 1, 2, 1], profile=dict(reversed(list(profile.items())))) == text
    # another interpreter, with another hash seed: nothing may depend on set or dict iteration order
    code = ("import json, sys; from taulib.executors.slurm.script import render; "
            "sys.stdout.write(render(**json.loads(sys.argv[1])))")
    args = json.dumps(dict(**BASE, task_indices=[1, 2, 0], profile=profile))
    for seed in ("1", "2"):
        proc = subprocess.run([sys.executable, "-c", code, args], capture_output=True, text=True, check=True,
                              env=dict(os.environ, PYTHONHASHSEED=seed))
        assert proc.stdout == text


def test_an_empty_array_is_refused_because_slurm_would_submit_a_plain_job():
    with pytest.raises(BadInput, match="empty --array"):
        render(**BASE, task_indices=[], profile={})


@pytest.mark.parametrize("field, value, message", [
    ("partition", "debug;rm -rf /", "partition"),
    ("time", "1 hour", "time"),
    ("mem", "16 GB", "mem"),
    ("account", "$(whoami)", "account"),
])
def test_a_profile_field_that_could_inject_is_refused(field, value, message):
    with pytest.raises(BadInput, match=message):
        render(**BASE, task_indices=[0], profile={field: value})


@pytest.mark.parametrize("extra", ["--array=0-9", "--output=/tmp/x", "--job-name=other", "--wrap=id"])
def test_an_extra_option_cannot_override_what_tau_sets(extra):
    with pytest.raises(BadInput, match="override"):
        render(**BASE, task_indices=[0], profile={"extra": [extra]})


def test_a_run_directory_with_a_space_is_refused():
    with pytest.raises(BadInput, match="run directory"):
        render(**{**BASE, "run_dir": "/scratch/my runs/demo"}, task_indices=[0], profile={})


def test_gpus_per_task_render_with_one_task_as_sbatch_needs_and_a_gpu_type_when_given():
    text = render(**{**BASE, "submission_id": "submission-0003", "job_name": "tau-demo-6ddb4c9a-0003"},
                  task_indices=[0, 1, 2, 3], profile={"partition": "gpu", "gpus": 2, "time": "4:00:00",
                                                      "cpus_per_task": 8, "mem": "64G"})
    check_golden("sbatch-gpus.sh", text)
    assert "#SBATCH --gpus-per-task=2\n" in text and "#SBATCH --ntasks=1\n" in text
    typed = render(**BASE, task_indices=[0], profile={"gpus": 1, "gpu_type": "a100"})
    assert "#SBATCH --gpus-per-task=a100:1\n" in typed


def test_gpus_as_a_generic_resource_where_the_site_asks_for_them_so():
    text = render(**BASE, task_indices=[0], profile={"gpus": 4, "gpu_option": "gres"})
    assert "#SBATCH --gres=gpu:4\n" in text and "--gpus-per-task" not in text and "--ntasks" not in text
    typed = render(**BASE, task_indices=[0], profile={"gpus": 4, "gpu_option": "gres", "gpu_type": "h100"})
    assert "#SBATCH --gres=gpu:h100:4\n" in typed
    assert "gpu" not in render(**BASE, task_indices=[0], profile={"gpu_option": None, "gpus": None})


@pytest.mark.parametrize("profile, message", [
    ({"gpus": 2, "extra": ["--gres=gpu:1"]}, "slurm extra option '--gres=gpu:1' contradicts scheduler.slurm.gpus, "
                                             "which asks for the GPUs; drop it"),
    ({"gpus": 2, "extra": ["--ntasks=4"]}, "slurm extra option '--ntasks=4' contradicts scheduler.slurm.gpus"),
    ({"gpus": 2, "extra": ["--gpus=8"]}, "slurm extra option '--gpus=8' contradicts scheduler.slurm.gpus"),
    ({"gpu_type": "a100"}, "scheduler.slurm.gpu_type and gpu_option say how to ask for gpus: set "
                           "scheduler.slurm.gpus too"),
    ({"gpu_option": "gres"}, "scheduler.slurm.gpu_type and gpu_option say how to ask for gpus"),
    ({"gpus": 1, "gpu_type": "a100;id"}, "slurm gpu type 'a100;id' is not allowed in an sbatch script"),
])
def test_gpu_fields_that_contradict_each_other_or_could_inject_are_refused(profile, message):
    with pytest.raises(BadInput) as err:
        render(**BASE, task_indices=[0], profile=profile)
    assert err.value.message.startswith(message)


def test_without_gpus_an_extra_gres_stays_the_sites_business():
    assert "#SBATCH --gres=gpu:1\n" in render(**BASE, task_indices=[0], profile={"extra": ["--gres=gpu:1"]})


COLLECTION = dict(job_name="tau-demo-6ddb4c9a-c0001", run_dir="/scratch/alice/runs/demo",
                  collection_id="collection-0001", python="/opt/tau/.venv/bin/python", task_indices=[0, 1, 2, 3])


def sbatch_lines(text: str) -> dict[str, str]:
    return dict(line.removeprefix("#SBATCH ").split("=", 1) for line in text.splitlines() if line.startswith("#SBATCH"))


def test_a_collection_job_asks_for_collect_mem_and_collect_time_where_set_else_the_shards_mem_and_time():
    from taulib.executors.slurm.script import collection_request, render_collection

    shards = {"partition": "debug", "mem": "16G", "time": "1-00:00:00"}
    assert collection_request(shards) == {"mem": "16G", "time": "1-00:00:00"}
    options = sbatch_lines(render_collection(**COLLECTION, profile=shards))
    assert (options["--mem"], options["--time"]) == ("16G", "1-00:00:00")
    own = dict(shards, collect_mem="2G", collect_time="30:00")
    assert collection_request(own) == {"mem": "2G", "time": "30:00"}
    options = sbatch_lines(render_collection(**COLLECTION, profile=own))
    assert (options["--mem"], options["--time"]) == ("2G", "30:00")
    assert collection_request({}) == {"mem": None, "time": None}
    assert "--mem" not in sbatch_lines(render_collection(**COLLECTION, profile={"partition": "debug"}))


def test_a_collection_rerun_asks_for_its_grown_request_and_nothing_else_changes():
    from taulib.executors.slurm.script import render_collection

    profile = {"partition": "debug", "mem": "16G", "collect_mem": "64M", "time": "10:00"}
    first = render_collection(**COLLECTION, profile=profile)
    rerun = render_collection(**dict(COLLECTION, job_name="tau-demo-6ddb4c9a-c0001r1", task_indices=[2]),
                              profile=profile, request={"mem": "256M", "time": "00:20:00"})
    before, after = sbatch_lines(first), sbatch_lines(rerun)
    assert (after["--mem"], after["--time"], after["--array"]) == ("256M", "00:20:00", "2")
    assert {k: v for k, v in after.items() if k not in ("--mem", "--time", "--array", "--job-name")} == {
        k: v for k, v in before.items() if k not in ("--mem", "--time", "--array", "--job-name")}
    assert "--time" not in sbatch_lines(render_collection(**COLLECTION, profile=profile,
                                                          request={"mem": "1G", "time": None}))


@pytest.mark.parametrize("field, value", [("collect_mem", "1 GB"), ("collect_time", "1 hour")])
def test_a_collection_request_that_could_inject_is_refused(field, value):
    from taulib.executors.slurm.script import render_collection, validate_profile

    with pytest.raises(BadInput, match=field.replace("_", " ")):
        validate_profile({field: value})
    with pytest.raises(BadInput):
        render_collection(**COLLECTION, profile={field: value})
