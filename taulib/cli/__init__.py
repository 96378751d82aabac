"""The commands: one thin module per command (options, one call into taulib, one JSON result), over `common` (the
error translation, output and option helpers), `registry` (the one list of commands), `tau` (the front command)
and `completion` (shell completion of every command)."""
