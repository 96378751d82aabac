"""The run directory: its names, its one writer, its locks, its journals and its read model.

  layout   the names of everything inside a run directory
  records  RunDir: the one writer; validated canonical records on a private Tree
  locks    sidecar locks in one documented order
  journal  the submission and collection journals (plan, then PREPARED, then the scheduler)
  index    the sealed-shard index that keeps finished shards cheap to read
  run      Run: an existing run opened and its plan verified
  state    the read model: shard views, from records through the rules
  status   the rolled-up run status (tau.status): every shard's state, the budget, the time left
  usage    what each attempt used, as its executor measured it (one record per submission)
"""
