"""The embedded local executor: a tiny Slurm for one machine, with no daemon.

`tau-submit` starts one detached supervisor process per submission
(`python -P -m taulib.executors.local RUN SUBMISSION`). The supervisor runs each task of the submission
(`tau-attempt run`) as its own process group, at most `max_parallel` at once, and keeps two kinds of records in
`submissions/<id>/local/`, written through the one writer:

  supervisor.json     its pid and process start time (so a recycled pid is never mistaken for it)
  task-NNNNN.json     per task: running (pid, start time) then finished (exit code or signal)

`observe` reads them the way squeue and sacct see a Slurm job:
  queue       a task whose recorded process is alive is running; an unstarted task under a live supervisor is
              pending
  accounting  a finished task: exit 0 completed, non-zero failed, SIGTERM/SIGINT/SIGHUP cancelled, other signals
              failed; killed for memory (`memory_killed`) out of memory; stopped at its time limit timed out
  absent      a task recorded running whose process is gone without a finished record, or an unstarted task
              whose supervisor is gone: the attempt vanished, and reconcile treats it like a job missing from
              both squeue and sacct (accounting lag, then unknown)

Only the supervisor writes its folder, under the lock `locks/local-<submission>.lock` held for its lifetime.

  executor    the local executor as tau's `Executor` (taulib.executors): what lifecycle and collect call
  __main__    `python -P -m taulib.executors.local RUN SUBMISSION`: the supervisor process tau-submit starts
  supervisor  starting the supervisor, and its loop; stopping tasks; sweeping a dead supervisor's folder
  variables   its variables in a task's environment (TAU_LOCAL_JOB_ID, ...)
  records     the names of its records and locks in a run directory
  memory      a task's memory limit and its sampling (OverMemoryKill's way), and the kernel's OOM killer seen
  observe     the queue and accounting views of local attempts
"""
