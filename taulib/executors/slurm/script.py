"""The sbatch script of a submission: a pure function of validated fields (pinned by golden files).

Every `#SBATCH` line comes from a field validated here; the lines are sorted, so the same submission always gives
the same bytes. The body runs the in-allocation side as an argument vector (no shell fragment from data):

  exec PYTHON -m taulib.cli.attempt run RUN_DIR --submission SUBMISSION_ID

One job array per submission: `--array` lists the tasks' indices (each shard keeps its index across retries, so a
retry is a sparse array), throttled with `%max_parallel` when set. An empty index list is refused, because
`--array=` with nothing silently submits a job that is not an array. Output goes to
`submissions/<id>/slurm-%A_%a.out` (appended across requeues).
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from taulib.errors import BadInput
from taulib.executors.slurm import records
from taulib.executors.slurm.parse import compress_indices

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
_TIME = re.compile(r"^([0-9]+-)?[0-9]+(:[0-9]{1,2}){0,2}\Z")
_MEM = re.compile(r"^[0-9]+[KMGT]?\Z")
_EXTRA = re.compile(r"^--[a-z][a-z-]*(=[A-Za-z0-9_.,:=/+@%-]*)?\Z")
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9_.,:=/+@%-]*\Z")
_PROFILE_OPTIONS = {"--partition", "--account", "--qos", "--time", "--mem", "--cpus-per-task"}
_RESERVED = {"--array", "--job-name", "--output", "--error", "--chdir", "--open-mode", "--requeue", "--no-requeue",
             "--export", "--parsable", "--wrap"}
_GPU_OPTIONS = {"--gres", "--gpus", "--gpus-per-task", "--gpus-per-node", "--gpus-per-socket", "--ntasks",
                "--ntasks-per-node"}  # what asking for gpus sets: an extra option beside it would contradict it


def _check(pattern: re.Pattern[str], value: str, what: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise BadInput(f"slurm {what} {value!r} is not allowed in an sbatch script")
    return value


def validate_profile(profile: dict[str, Any]) -> None:
    """Refuse (BadInput) any field of a plan's `scheduler.slurm` that could not go into an sbatch script."""
    for key, pattern in (("partition", _NAME), ("collect_partition", _NAME), ("account", _NAME), ("qos", _NAME),
                         ("time", _TIME), ("mem", _MEM), ("collect_time", _TIME), ("collect_mem", _MEM)):
        if profile.get(key):
            _check(pattern, profile[key], key.replace("_", " "))
    if profile.get("gpu_type"):
        _check(_NAME, profile["gpu_type"], "gpu type")
    if (profile.get("gpu_type") or profile.get("gpu_option")) and not profile.get("gpus"):
        raise BadInput("scheduler.slurm.gpu_type and gpu_option say how to ask for gpus: set scheduler.slurm.gpus too")
    for extra in profile.get("extra", []):
        _check(_EXTRA, extra, "extra option")
        if extra.split("=", 1)[0] in _RESERVED | _PROFILE_OPTIONS:
            raise BadInput(f"slurm extra option {extra!r} would override one tau sets itself")
        if profile.get("gpus") and extra.split("=", 1)[0] in _GPU_OPTIONS:
            raise BadInput(f"slurm extra option {extra!r} contradicts scheduler.slurm.gpus, which asks for the GPUs; "
                           "drop it")


def _profile_options(profile: dict[str, Any], partition: str | None) -> dict[str, str]:
    """The #SBATCH options that come from the plan's Slurm profile (validated)."""
    options = {}
    if partition:
        options["--partition"] = _check(_NAME, partition, "partition")
    for key, option, pattern in (("account", "--account", _NAME), ("qos", "--qos", _NAME),
                                 ("time", "--time", _TIME), ("mem", "--mem", _MEM)):
        if profile.get(key):
            options[option] = _check(pattern, profile[key], key)
    return options


def gpu_options(profile: dict[str, Any]) -> dict[str, str]:
    """The #SBATCH options that ask for the plan's GPUs per task: `--gpus-per-task=[TYPE:]N` with `--ntasks=1`
    (which --gpus-per-task needs), or `--gres=gpu:[TYPE:]N` where the site asks for GPUs as a generic resource."""
    if not profile.get("gpus"):
        return {}
    count = str(int(profile["gpus"]))
    if profile.get("gpu_type"):
        count = f"{_check(_NAME, profile['gpu_type'], 'gpu type')}:{count}"
    if profile.get("gpu_option") == "gres":
        return {"--gres": f"gpu:{count}"}
    return {"--gpus-per-task": count, "--ntasks": "1"}


def check_path(path: str, what: str) -> str:
    return _check(_SAFE_PATH, path, what)


def render(*, job_name: str, run_dir: str, submission_id: str, task_indices: list[int], python: str,
           profile: dict[str, Any]) -> str:
    """The script text. `profile` is the plan's `scheduler.slurm` (partition, time, account, qos, cpus_per_task,
    mem, gpus, gpu_option, gpu_type, max_parallel, extra)."""
    if not task_indices:
        raise BadInput("a submission needs at least one task: refusing to render an empty --array")
    _check(_NAME, job_name, "job name")
    _check(_SAFE_PATH, run_dir, "run directory")
    _check(_SAFE_PATH, python, "python path")
    _check(_NAME, submission_id, "submission id")
    validate_profile(profile)
    array = compress_indices(task_indices)
    if profile.get("max_parallel"):
        array += f"%{int(profile['max_parallel'])}"
    folder = f"{run_dir}/submissions/{submission_id}"
    options = {
        "--array": array,
        "--chdir": folder,
        "--job-name": job_name,
        "--open-mode": "append",
        "--output": f"{folder}/{records.OUTPUT}",
        "--requeue": None,
    }
    options.update(_profile_options(profile, profile.get("partition")))
    if profile.get("cpus_per_task"):
        options["--cpus-per-task"] = str(int(profile["cpus_per_task"]))
    options.update(gpu_options(profile))
    lines = [f"#SBATCH {key}" if value is None else f"#SBATCH {key}={value}" for key, value in options.items()]
    for extra in profile.get("extra", []):
        _check(_EXTRA, extra, "extra option")
        if extra.split("=", 1)[0] in _RESERVED or extra.split("=", 1)[0] in options:
            raise BadInput(f"slurm extra option {extra!r} would override one tau sets itself")
        lines.append(f"#SBATCH {extra}")
    argv = [python, "-m", "taulib.cli.attempt", "run", run_dir, "--submission", submission_id]
    return "\n".join(["#!/bin/sh", "# generated by tau-submit: one array task per shard attempt",
                      *sorted(lines), "", "exec " + shlex.join(argv), ""])


def collection_request(profile: dict[str, Any]) -> dict[str, str | None]:
    """What each task of a collection's job asks for under the plan's `scheduler.slurm`: `collect_mem` and
    `collect_time` where set, else the shards' `mem` and `time` (None where neither is)."""
    return {"mem": profile.get("collect_mem") or profile.get("mem") or None,
            "time": profile.get("collect_time") or profile.get("time") or None}


def render_collection(*, job_name: str, run_dir: str, collection_id: str, python: str,
                      profile: dict[str, Any], task_indices: list[int],
                      request: dict[str, str | None] | None = None) -> str:
    """The zero-GPU CPU job of a collection: an array of one task per collection task in `task_indices`, each
    with its own CPUs and no GPU request, running `tau-collect --worker` (which takes its task from
    SLURM_ARRAY_TASK_ID). Its --mem and --time are `request` ({mem, time}: a rerun's, grown after a task ran out of
    memory or time), else the plan's (`collection_request`)."""
    _check(_NAME, job_name, "job name")
    _check(_SAFE_PATH, run_dir, "run directory")
    _check(_SAFE_PATH, python, "python path")
    _check(_NAME, collection_id, "collection id")
    if not task_indices:
        raise BadInput("a collection job needs at least one task: refusing to render an empty --array")
    folder = f"{run_dir}/collections/{collection_id}"
    options = {"--chdir": folder, "--job-name": job_name, "--nodes": "1", "--ntasks": "1",
               "--cpus-per-task": str(int(profile.get("cpus_per_task") or 1)),
               "--array": compress_indices(task_indices),
               "--output": f"{folder}/{records.OUTPUT}", "--open-mode": "append",
               "--gres": "none"}  # pinned: no GPU, whatever a cluster's defaults (the submitter drops SBATCH_*)
    asked = collection_request(profile) if request is None else request
    options.update(_profile_options(dict(profile, mem=asked["mem"], time=asked["time"]),
                                    profile.get("collect_partition") or profile.get("partition")))
    lines = [f"#SBATCH {key}={value}" for key, value in options.items()]
    argv = [python, "-m", "taulib.cli.collect", run_dir, "--worker", collection_id]
    return "\n".join(["#!/bin/sh", "# generated by tau-collect: the collection's tasks, CPU jobs without GPUs",
                      *sorted(lines), "", "exec " + shlex.join(argv), ""])
