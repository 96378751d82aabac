"""The client's environment: exactly what the run says, the same for every attempt of every shard (tau-run(5)
"The client's environment"). Pure (tests/test_rules_environment.py).

A client gets, and gets nothing else:
  PATH                the PATH tau-init ran with (fixed in run.json)
  inherit_env names   taken by name from the allocation, which got them from the process that submitted it (each
                      submission refuses to go ahead without them, so a retry from cron cannot run differently)
  env                 the plan's values
  the allocation's    the variables its executor passes on (`Executor.allocation_variables`): under Slurm, the
                      variables Slurm sets for the allocation (SLURM_*, and the devices it bound:
                      CUDA_VISIBLE_DEVICES and its kin); under the local executor, none
  TAU_*               tau's own: the run, shard, attempt, record range, output folder, progress file
Secrets are inherited by name and never written into a record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


def missing_inherited(inherit: list[str], environ: Mapping[str, str]) -> list[str]:
    """The inherited names `environ` lacks, in the plan's order."""
    return [name for name in inherit if name not in environ]


def client_environment(*, path: str, env: Mapping[str, str], inherit: list[str], environ: Mapping[str, str],
                       allocation: Mapping[str, str], tau: Mapping[str, str]) -> dict[str, str]:
    """The environment of the client of an attempt. `environ` is the allocation's own environment, `allocation`
    the variables of it that its executor passes on, `tau` tau's variables for this attempt. The caller has checked
    that no inherited name is missing."""
    out = {"PATH": path}
    out.update(allocation)
    out.update({name: environ[name] for name in inherit})
    out.update(env)
    out.update(tau)
    return out



def attempt_variables(run_dir: str, run_id: str, attempt: Mapping[str, Any], shard_index: int) -> dict[str, str]:
    """The variables naming the run, shard and attempt (its record), which the client and every service backend
    get."""
    return {"TAU_RUN_DIR": run_dir, "TAU_RUN_ID": run_id, "TAU_SHARD_ID": attempt["shard_id"],
            "TAU_SHARD_INDEX": str(shard_index), "TAU_ATTEMPT_ID": attempt["attempt_id"],
            "TAU_ATTEMPT_ORDINAL": str(attempt["ordinal"])}
