"""taulib.rules.environment: the client's environment is exactly the run's, whoever submits it from wherever."""

from __future__ import annotations

from taulib import executors
from taulib.rules import environment
from taulib.rules.environment import client_environment, missing_inherited

TAU = {"TAU_SHARD_ID": "shard-00000", "TAU_RECORD_START": "0"}
CALLER = {"PATH": "/home/me/bin:/usr/bin", "HOME": "/home/me", "HF_TOKEN": "secret", "FOO": "caller",
          "SLURM_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "3", "CUDA_VISIBLE_DEVICES": "1", "LD_PRELOAD": "evil.so"}


def test_only_the_fixed_path_the_plans_values_the_inherited_names_and_taus_own_reach_the_client():
    out = client_environment(path="/usr/bin:/bin", env={"FOO": "plan"}, inherit=["HF_TOKEN"], environ=CALLER,
                             allocation=executors.get("local").allocation_variables(CALLER), tau=TAU)
    assert out == {"PATH": "/usr/bin:/bin", "FOO": "plan", "HF_TOKEN": "secret", **TAU}


def test_under_slurm_the_allocations_own_variables_reach_the_client_too():
    out = client_environment(path="/usr/bin", env={}, inherit=[], environ=CALLER,
                             allocation=executors.get("slurm").allocation_variables(CALLER), tau=TAU)
    assert out == {"PATH": "/usr/bin", "SLURM_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "3",
                   "CUDA_VISIBLE_DEVICES": "1", **TAU}


def test_the_same_run_gives_the_same_environment_from_a_full_shell_and_from_env_minus_i():
    local = executors.get("local")
    args = dict(path="/usr/bin:/bin", env={"FOO": "x"}, inherit=[], tau=TAU)
    assert client_environment(environ=CALLER, allocation=local.allocation_variables(CALLER), **args) == \
        client_environment(environ={"PATH": "/bin"}, allocation=local.allocation_variables({"PATH": "/bin"}), **args)


def test_the_inherited_names_an_environment_lacks_are_named_in_the_plans_order():
    assert missing_inherited(["HF_TOKEN", "WANDB_KEY", "HOME", "OTHER"], CALLER) == ["WANDB_KEY", "OTHER"]
    assert missing_inherited([], {}) == []


def test_the_client_and_every_backend_are_told_their_run_shard_and_attempt():
    attempt = {"shard_id": "shard-00007", "attempt_id": "attempt-0002", "ordinal": 2, "state": "running"}
    assert environment.attempt_variables("/runs/demo", "demo", attempt, 7) == {
        "TAU_RUN_DIR": "/runs/demo", "TAU_RUN_ID": "demo", "TAU_SHARD_ID": "shard-00007", "TAU_SHARD_INDEX": "7",
        "TAU_ATTEMPT_ID": "attempt-0002", "TAU_ATTEMPT_ORDINAL": "2"}
