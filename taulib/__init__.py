"""tau: small commands that run large sharded batch jobs without a resident controller.

The library under the `tau-*` commands. `store` is the one writer of run directories, `locks` the lock order,
`errors` the exit-code table, `schema` the record validator; the domain modules (`plan`, `run`, `submission`,
`attempt`, `reconcile`, `status`, `winner`, `retry`, `collect`) build on them, and `cli/` holds one thin module per
command.
"""

__version__ = "0.1.0"
