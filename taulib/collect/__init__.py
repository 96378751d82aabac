"""Collection: every shard's winner, in planned order, into one deterministic dataset at an authorised
destination, published atomically and never overwritten (tau-collect(1)). The face is `collection.collect()`
(tau-collect) and `collection.work()` (its CPU job); see `collect.collection` for the order of work. Nothing is
imported here, so that tau-collect's options (`formats`) cost nothing to list.

  collection   the coordinator: journal, inline work or the CPU job, publication
  shape        what a collection asked for looks like, and whether the one there is it (refusals, 73)
  winners      step 1: every winner chain validated from its records
  destination  step 2: authorising the destination; its parent folder, the stage, the published result
  stage        step 4: the winners streamed partition by partition into the stage (plan: rules.partition)
  budget       the memory budget (--memory) spread over the lanes, their input buffers and their writers
  tasks        a collection split into tasks: their ranges, their records, the files of them all
  array        the tasks at work: a Slurm array task or a local worker process each, the last one publishing
  inputs       reading the winner files, each checked (size, sha256, Parquet rows) before a row of it is used
  outputs      writing one partition file: hashed as written, fsynced
  formats      the one table of output formats: name, suffix, writer, reader, the contract that fixes the bytes
  parquet      a Parquet partition file: winners' row groups copied where they fit, the rest encoded, tau's footer
  thrift       Thrift's compact protocol, generically: a Parquet footer read and written back
  jsonl        Arrow rows as JSON lines, column by column
  image        a collection in the run's client image: the destination through its mounts, the tau in the image
  job          the CPU job of an executor that collects in a job of its own: submit, settle, wait, fence
  report       the tau.collection summary
  summary      what tau-collect -o table shows: the dataset's lines and a row per file
  bundle       --upload: the stage sealed as one bundle generation, the published dataset uploaded and recorded
"""
