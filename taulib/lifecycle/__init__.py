"""The life of a run's shards, on top of the run directory (`taulib.rundir`) and the rules (`taulib.rules`).

  init        tau-init: the plan resolved from the request, then the run's records
  submission  the submission journal handing new attempts to an executor (tau-submit, tau-retry)
  retry       which shards a submission gives attempts to
  attempt     the in-allocation side: fence, run the client, record its result (tau-attempt run)
  candidate   describing and re-verifying what an attempt produced
  winner      validating a shard's chain and publishing its one winner (tau-winner)
  observe     asking the executors about the live attempts (tau-observe, read-only)
  reconcile   applying observations to the records under locks (tau-reconcile)
"""
