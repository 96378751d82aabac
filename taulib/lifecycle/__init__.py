"""The life of a run's shards, on top of the run directory (`taulib.rundir`), the rules (`taulib.rules`) and the
executors (`taulib.executors`, which lifecycle asks and never names).

  init        tau-init: the plan resolved from the request, then the run's records
  preflight   tau-init's pre-flight: the client's and each service's program resolved once and checked
  submission  the submission journal handing new attempts to an executor (tau-submit, tau-retry)
  retry       which shards a submission gives attempts to
  attempt     the in-allocation side: fence, run the client, record its result (tau-attempt run)
  allocation  the order of work inside an allocation: preflight, services, readiness, endpoints, client, cleanup
  services    an attempt's services: backends started on their GPUs and ports, watched, published, stopped
  probes      probing a service backend: HTTP, TCP or a command, each in a thread of its own
  readiness   recording an attempt's readiness: version 1, or version 2 with its deployments
  containers  an attempt's images: checked against their pins, the runtime's commands for the client and services
  client      running the client: the run's program and environment, the heartbeat, stop signals, cancellation
  candidate   describing and re-verifying what an attempt produced
  drift       a running client's Parquet files checked against the run's schema as it writes them
  winner      validating a shard's chain and publishing its one winner (tau-winner)
  observe     asking the executors about the live attempts (tau-observe, read-only)
  reconcile   applying observations to the records under locks (tau-reconcile)
  status      the run's status now, the same rules with nothing written (tau-status)
  logs        an attempt's output, and following it while it runs (tau-logs)
  cancel      a durable cancellation, then the live attempts stopped (tau-cancel); an attempt stopped, a lift
  adopt       a new run reusing an old one's winners, copied and held to its own rules (tau-init --from)
  site        site profiles: found by name, merged under a plan's own values by tau-init, validated
  drive       one cycle of the plumbing's calls, repeated until the run is finished (tau-drive)
"""
