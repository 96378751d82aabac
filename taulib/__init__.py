"""tau: small commands that run large sharded batch jobs without a resident controller.

The library under the `tau-*` commands, in layers; a module imports only from its own layer or those below it
(tests/test_structure.py walks the imports):

  cli/        one thin module per command, the command registry, completion, the front command `tau`
  lifecycle/  a run's shards from plan to winner: init, submission, retry, attempt, candidate, winner, observe,
              reconcile
  collect/    merging the winners into one dataset (tau-collect and its CPU job)
  bundle/     artifact bundles: seal, verify, fetch, Blob storage, where a bundle is
  k8s/        Kubernetes workload status (tau-observe --kubernetes)
  slurm/ local/  the two executors: Slurm's commands and parsers, and the embedded local executor
  rundir/     the run directory: names, the one writer (RunDir), locks, journals, the sealed index, the read model
  rules/      the rules of the domain as pure functions (standard library only)
  fs/         the safe-filesystem layer: Tree, the write protocols, no-replace publication
  errors, env, schema, jsonio, failpoints, table
              the exit-code table, the environment-variable table, the JSON Schema validator, canonical JSON,
              failpoints, text tables
"""

__version__ = "0.1.0"
