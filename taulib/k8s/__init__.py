"""Kubernetes: reading Jobs, RayJobs, Kueue Workloads and pods with the kubernetes client, and what they mean.

`status` derives a workload's status snapshot, purely, from the reads `observe` makes through `api`, by the rules
of `jobs`, `kueue`, `pods`, `phases` and `podphases`. The `kubernetes` package is imported only inside `api`, so no
other command pays for loading it.

  api         connecting to the API server, and every read classified
  observe     the reads behind one workload's snapshot (tau-observe --kubernetes)
  status      the snapshot: why a Job or a RayJob is where it is, a pure function of classified reads
  jobs        the state a Job or a RayJob is in, from its own status alone
  kueue       where a Kueue Workload stands, and what Kueue did to it that a person must know
  pods        what each pod and container is doing, and which of them is an issue
  phases      where along its way a workload is, from submission to the release of compute
  podphases   the six phases of its pods, from scheduling to ready, by Tau's rules
  objects     reading the fields of objects as the API server returns them: metadata, status, conditions, owners
  v1alpha1    Tau's v1alpha1 status values: the state, kind and container-issue words users script
  render      the snapshot as text for people (-o table)
"""
