"""Kubernetes: reading Jobs, RayJobs, Kueue Workloads and pods with the kubernetes client, and what they mean.

`api` connects and classifies every read; `status` is the pure derivation of a workload's status snapshot from
those reads; `observe` does the reads for one workload; `render` draws the snapshot as a table for people. The
`kubernetes` package is imported only inside `api`, so no other command pays for loading it.
"""
