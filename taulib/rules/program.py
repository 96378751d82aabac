"""The client's command line as tau-init checks it: when its program is an interpreter, which argument is the
script it runs (so that a misspelt script is refused before the run exists, not by every attempt), and whether a
program found on PATH lies inside tau's own environment (tau-init(1) "The client's program"). Pure
(tests/test_rules_program.py).
"""

from __future__ import annotations

import posixpath
import re

# interpreters whose first argument, when it is not an option, is the script they run
INTERPRETERS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "Rscript", "perl", "ruby", "node", "nodejs", "julia",
                          "php", "lua", "tclsh"})
_PYTHON = re.compile(r"^(python|pypy)([0-9]+(\.[0-9]+)?)?\Z")
_PYTHON_WITH_VALUE = frozenset("WX")  # -W arg, -X opt: their value may be the next argument
_PYTHON_NO_SCRIPT = frozenset("cm")  # -c cmd, -m module: no script file follows


def interpreter(program: str) -> str | None:
    """The interpreter `program` (a name or a path) is, by its file name ("python" for python3.11), or None."""
    name = posixpath.basename(program)
    if _PYTHON.match(name):
        return "python"
    return name if name in INTERPRETERS else None


def script_index(argv: list[str]) -> int | None:
    """The index in `argv` of the script its interpreter runs, or None (not an interpreter, or no script: python's
    -m or -c, standard input, an option first). Python's own options are read as python reads them; any other
    interpreter's script is its first argument when that is not an option."""
    kind = interpreter(argv[0]) if argv else None
    if kind is None:
        return None
    if kind != "python":
        return 1 if len(argv) > 1 and not argv[1].startswith("-") else None
    index = 1
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            return index + 1 if index + 1 < len(argv) and argv[index + 1] != "-" else None
        if arg == "-" or arg.startswith("--"):
            return None  # standard input, or --help / --version: nothing to check
        if not arg.startswith("-"):
            return index
        for position, letter in enumerate(arg[1:], start=1):
            if letter in _PYTHON_NO_SCRIPT:
                return None
            if letter in _PYTHON_WITH_VALUE:
                index += 1 if position == len(arg) - 1 else 0  # -W arg (the next one), -Werror (attached)
                break
        index += 1
    return None


def inside(path: str, prefix: str) -> bool:
    """Whether the absolute `path` lies inside the folder `prefix` (both normalised; no file is read)."""
    path, prefix = posixpath.normpath(path), posixpath.normpath(prefix)
    return path.startswith(prefix.rstrip("/") + "/")
