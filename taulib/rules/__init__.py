"""The rules of the domain, as pure functions: no file, no clock, no environment, nothing but the standard library
(tests/test_structure.py checks the imports; tests/test_rules_*.py test every function directly).

  evidence     the evidence table: what the scheduler's latest word does to an attempt's persisted evidence
  attempt      the attempt verdict: its effective state from its own record and its scheduler evidence
  shard        a shard's decision: its state, reason, budget spent, next attempt and stall, from its facts
  rollup       a shard's state from its winner and its newest attempt, a run's from its shards', degraded reasons,
               when a run has settled, the time left
  budget       the retry budget: when a shard or a run stops being retried, and what the run has spent of it
  retry        which shards get a new attempt
  windows      a submission's shards cut into arrays that fit the scheduler now, the rest deferred
  escalation   the memory and time a retry asks for, grown after the attempt before it ran out of them
  collection   a collection job that ended unfinished: its tasks rerun, asking for more after out of memory or
               time as far as retry.escalate allows, or the collection failed and why
  efficiency   what attempts cost and how much of their request they used (seff's arithmetic)
  drive        when a driven run is finished, and the notifications owed
  stall        when a running attempt is stalled (no heartbeat, no progress), and whether the plan stops it
  readiness    an attempt's readiness from its deployments, and the transitions a revision may make
  services     the plan's services: defaults, what they ask of a task, GPUs dealt to backends, their names
  journal      resolving an ambiguous submission by its job's exact name
  chain        whether a shard's attempt, result and manifest make a chain that may win
  fields       a candidate's columns against the run's output schema, field by field
  typenames    the Arrow type names an output schema may give, and Arrow's spelling of a misspelt one
  environment  the client's environment: exactly what the run says
  program      the client's command line: the script an interpreter runs, a program inside tau's own environment
  partition    which rows of which winner file go into which output file
  output       a failed client's last lines, bounded and printable, for its shard's reason
  shards       which records each shard holds
  inputs       a run's input dataset: its format, the pieces a shard reads, whether two runs' shards read the same
  image        an image reference read by the distribution grammar and pinned by digest, an image file's sha256
  plan         the plan's defaults, and how a plan written before a field existed is read
"""
