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
from taulib.slurm.script import render

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
    code = ("import json, sys; from taulib.slurm.script import render; "
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
