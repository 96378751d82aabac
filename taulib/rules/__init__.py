"""The rules of the domain, as pure functions: no file, no clock, no environment, nothing but the standard library
(tests/test_structure.py checks the imports; tests/test_rules_*.py test every function directly).

  evidence   the evidence table: what the scheduler's latest word does to an attempt's persisted evidence
  attempt    the attempt verdict: its effective state from its own record and its scheduler evidence
  rollup     a shard's state from its winner and its newest attempt, a run's from its shards', degraded reasons
  retry      which shards get a new attempt
  journal    resolving an ambiguous submission by its job's exact name
  chain      whether a shard's attempt, result and manifest make a chain that may win
  partition  which rows of which winner file go into which output file
  plan       which records each shard holds
"""
