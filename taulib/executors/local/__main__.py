"""`python -m taulib.executors.local RUN_DIR SUBMISSION_ID`: the supervisor of one local submission (started by
tau-submit)."""

from __future__ import annotations

import sys

from taulib import jsonio
from taulib.errors import TauError


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m taulib.executors.local RUN_DIR SUBMISSION_ID", file=sys.stderr)
        return 2
    from taulib import failpoints
    from taulib.executors.local import supervisor

    failpoints.command = "tau-local"  # how a qualified failpoint and the trace name this process
    try:
        return supervisor.supervise(args[0], args[1])
    except TauError as exc:
        sys.stderr.write(jsonio.canonical({"error": exc.name, "code": exc.code, "command": "tau-local",
                                           "message": f"tau-local: {exc.message}"}).decode())
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
