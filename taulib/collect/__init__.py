"""Collection: every shard's winner, in planned order, into one deterministic dataset at an authorised
destination, published atomically and never overwritten (SPEC 8). The face is `collect()` (tau-collect) and
`work()` (its Slurm CPU job); see `collect.collection` for the order of work.

  collection   the coordinator: journal, inline work or the CPU job, publication
  winners      step 1: every winner chain validated from its records
  destination  step 2: authorising the destination; its parent folder, the stage, the published result
  stage        step 4: the winners streamed partition by partition into the stage (plan: rules.partition)
  job          the CPU job under Slurm: submit, settle, wait, fence
  report       the tau.collection summary
"""

from taulib.collect.collection import collect, work

__all__ = ["collect", "work"]
