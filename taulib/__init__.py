"""tau: small commands that run large sharded batch jobs without a resident controller.

The library under the `tau-*` commands, in layers; a module imports only from its own layer or those below it
(tests/test_structure.py walks the imports):

  api/        tau from Python: the commands' library calls as a typed API (`import taulib.api as tau`)
  cli/        one thin module per command, the command registry, completion, the front command `tau`
  lifecycle/  a run's shards from plan to winner: init, submission, retry, attempt, candidate, winner, observe,
              reconcile, and the porcelain's status, logs and cancel
  collect/    merging the winners into one dataset (tau-collect and its CPU job)
  inputs/     a run's input dataset: indexed by tau-init, each attempt's rows cut from verified pieces
  bundle/     artifact bundles: seal, verify, fetch, Blob storage, where a bundle is
  k8s/        Kubernetes workload status (tau-observe --kubernetes)
  executors/  the one table of executors, the roles an engine plays, and a package per executor (local, slurm)
  runtimes/   the one table of container runtimes, and how each runs a program in an image pinned by digest
  rundir/     the run directory: names, the one writer (RunDir), locks, journals, the sealed index, the read model
  rules/      the rules of the domain as pure functions (standard library only)
  fs/         the safe-filesystem layer: Tree, the write protocols, no-replace publication
  errors      the one exit-code table, and the typed errors that carry its codes
  env         every environment variable tau reads or sets, in one table
  schema      validation against the JSON Schemas in share/schemas
  validator   a JSON Schema node compiled into a function of the value (for schema)
  records     the shapes of the main records as TypedDicts (plan, attempt, winner ...), following the schemas
  jsonio      canonical JSON, the one encoding of every record, and the digests over it
  failpoints  named failpoints at every step of every commit protocol, armed from the environment
  signals     clean-up that a stop signal cannot cut short, and a signal that reaches the main thread at once
  processes   processes tau owns: by pid and start time, adopted when their parents die, stopped to the last one
  progress    progress on standard error for the commands that move bulk data
  table       plain-text tables for people (-o table)
"""

__version__ = "0.1.0"
