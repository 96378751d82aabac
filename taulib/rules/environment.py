"""The client's environment: exactly what the run says, the same for every attempt of every shard (SPEC 11). Pure
(tests/test_rules_environment.py).

A client gets, and gets nothing else:
  PATH                the PATH tau-init ran with (fixed in run.json)
  inherit_env names   taken by name from the allocation, which got them from the process that submitted it (each
                      submission refuses to go ahead without them, so a retry from cron cannot run differently)
  env                 the plan's values
  the allocation's    under Slurm, the variables Slurm sets for the allocation (SLURM_*, and the devices it
                      bound: CUDA_VISIBLE_DEVICES and its kin)
  TAU_*               tau's own: the run, shard, attempt, record range, output folder, progress file
Secrets are inherited by name and never written into a record.
"""

from __future__ import annotations

DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
                    "ZE_AFFINITY_MASK")


def missing_inherited(inherit: list[str], environ: dict) -> list[str]:
    """The inherited names `environ` lacks, in the plan's order."""
    return [name for name in inherit if name not in environ]


def client_environment(*, path: str, env: dict, inherit: list[str], environ: dict, executor: str,
                       tau: dict) -> dict:
    """The environment of the client of an attempt. `environ` is the allocation's own environment; `tau` holds
    tau's variables for this attempt. The caller has checked that no inherited name is missing."""
    out = {"PATH": path}
    if executor == "slurm":
        out.update({k: v for k, v in environ.items() if k.startswith("SLURM_") or k in DEVICE_VARIABLES})
    out.update({name: environ[name] for name in inherit})
    out.update(env)
    out.update(tau)
    return out
