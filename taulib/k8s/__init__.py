"""Kubernetes: reading Jobs, RayJobs, Kueue Workloads and pods with the kubernetes client, and what they mean.

`api` connects and classifies every read; `observe` does the reads for one workload; `status` assembles the pure
derivation of a workload's status snapshot from those reads, from the rules of `jobs` (Job and RayJob states),
`kueue` (Kueue Workloads), `pods` (pods and containers) and `phases` (where along its way the workload is), which
read objects through `objects`; `render` draws the snapshot as a table for people. The `kubernetes` package is
imported only inside `api`, so no other command pays for loading it.
"""
