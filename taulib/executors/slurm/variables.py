"""Slurm's variables: the timeouts a user may set for its commands (tau(1) ENVIRONMENT), and those Slurm sets
inside an allocation. Pure declarations (`taulib.env.Var`), read with `env.read`; `taulib.executors.variables`
joins them to tau's own table.
"""

from __future__ import annotations

from typing import Any

from taulib.env import Var, count, seconds, text

TIMEOUT = Var("TAU_SLURM_TIMEOUT", 30.0, seconds, "seconds squeue and sacct may take")
SBATCH_TIMEOUT = Var("TAU_SBATCH_TIMEOUT", 60.0, seconds, "seconds sbatch may take before its outcome is ambiguous")
JOB_ID = Var("SLURM_JOB_ID", None, text, "Slurm's job id of the allocation", "allocation")
CPUS_PER_TASK = Var("SLURM_CPUS_PER_TASK", None, text, "the CPUs Slurm gave a collection task: its most threads",
                    "allocation")
ARRAY_JOB_ID = Var("SLURM_ARRAY_JOB_ID", None, text, "Slurm's array job id", "allocation")
ARRAY_TASK_ID = Var("SLURM_ARRAY_TASK_ID", None, text, "Slurm's array task index", "allocation")
RESTART_COUNT = Var("SLURM_RESTART_COUNT", 0, count, "how often Slurm requeued this allocation", "allocation")
JOB_GPUS = Var("SLURM_JOB_GPUS", None, text, "the GPUs Slurm gave the job (when CUDA_VISIBLE_DEVICES is unset)",
               "allocation")
VARIABLES: tuple[Var[Any], ...] = (TIMEOUT, SBATCH_TIMEOUT, JOB_ID, CPUS_PER_TASK, ARRAY_JOB_ID, ARRAY_TASK_ID,
                                   RESTART_COUNT, JOB_GPUS)
