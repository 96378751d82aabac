"""The commands: one thin module per command (options, one call into taulib, one JSON result), over the helpers
they share, the one list of commands, the front command and shell completion.

  registry       the one list of commands: name, module, one-line summary, kind
  common         what every command shares: error translation, output, stdin, options
  tau            tau, the front command: `tau X ARGS` runs `tau-X ARGS`, as git does
  completion     shell completion of every command (`tau completion bash|zsh|fish`), and its installed files
  init           tau-init: a run directory from a plan on standard input
  submit         tau-submit: the first attempt of every shard
  attempt        tau-attempt: the in-allocation side of a shard attempt
  observe        tau-observe: the executor asked about the live attempts, or Kubernetes about a workload
  reconcile      tau-reconcile: observations applied under locks, then the run status
  winner         tau-winner: candidates validated, each shard's one immutable winner published
  retry          tau-retry: new attempts for the retryable shards, as one submission
  status         tau-status: the run's status now, read-only
  logs           tau-logs: an attempt's output, the client's and the allocation's
  cancel         tau-cancel: a run, or named shards of it, cancelled; or their live attempts stopped
  drive          tau-drive: the plumbing's cycle, repeated until the run is finished; notifications
  site           tau-site: a site profile checked (its runtime, partitions and mounts), or shown
  collect        tau-collect: every shard's winner merged into one dataset at an authorised destination
  bundle_seal    tau-bundle-seal: an output tree acknowledged as one generation's bundle
  bundle_verify  tau-bundle-verify: a generation checked against its acknowledgement
  bundle_fetch   tau-bundle-fetch: a complete generation from Blob storage, verified, all or nothing
"""
