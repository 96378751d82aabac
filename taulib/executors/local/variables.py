"""The local executor's variables, set by its supervisor in a task's environment (tau-run(5) "The client").
Pure declarations (`taulib.env.Var`), read with `env.read`; `taulib.executors.variables` joins them to tau's own.
"""

from __future__ import annotations

from taulib.env import Var, text

JOB_ID = Var("TAU_LOCAL_JOB_ID", None, text, "the local executor's job id (its submission id)", "allocation")
TASK_ID = Var("TAU_LOCAL_TASK_ID", None, text, "the local executor's task index", "allocation")
GPUS = Var("TAU_LOCAL_GPUS", None, text, "the GPUs the local executor gave this task (comma-separated ids)",
           "allocation")
VARIABLES: tuple[Var[str | None], ...] = (JOB_ID, TASK_ID, GPUS)
