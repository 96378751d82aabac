"""Slurm as an executor: every submission one sbatch job array, observed with one batched squeue and one batched
sacct, stopped with scancel of exact array tasks.

  executor   Slurm as tau's `Executor` (taulib.executors): what lifecycle and collect call
  script     the sbatch scripts, a pure function of validated fields (pinned by golden files)
  parse      strict parsers of squeue, sacct and sbatch text, and the state map
  commands   running Slurm's commands: by name, with timeouts, never through a shell
  limits     the cluster's limits on what this user may queue now (MaxArraySize, MaxSubmitJobs, QOS), read
  observe    the queue and accounting views of recorded Slurm attempts
  variables  its variables: its commands' timeouts, and Slurm's inside an allocation
  records    the names of its files in a run directory (job scripts, array task output)
  kills      what slurmstepd's words in a task's output say killed it (memory, a time limit), where sacct does not
"""
