"""tau-init's pre-flight (tau-init(1) "The pre-flight"): the client's program and each service's, resolved once
to an executable file and checked, so that every attempt runs the same program whoever submits it.

Reads: the file system (the programs, the scripts an interpreter is given), the PATH and folder tau-init runs with.
Writes: nothing.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from taulib import env
from taulib.errors import BadInput, NotFound
from taulib.rules import program as program_rules

if TYPE_CHECKING:
    from taulib.jsonio import Record


def resolve_program(program: str, cwd: str, path: str, own: str | None = None, what: str = "the client") -> str:
    """The pre-flight: the absolute path of the client's program (`command[0]`): a path with a `/` is taken
    relative to `cwd`, a bare name is looked up in `path`. It must be an executable regular file: NotFound (66)
    when it does not exist, BadInput (65) when it is not an executable file, or when a bare name is found inside
    `own`, tau's own environment (a virtual environment's prefix): `python3` would silently be tau's interpreter,
    not the researcher's; a path given with a `/` is deliberate."""
    if "/" in program:
        candidate = os.path.normpath(os.path.join(cwd, program))
    else:
        found = [os.path.join(d or ".", program) for d in path.split(os.pathsep)]
        found = [f for f in found if os.path.isfile(f) and os.access(f, os.X_OK)]
        if not found:
            raise NotFound(f"{what} program {program!r} is not on PATH; give its path, or run tau-init with it on "
                           "PATH", program=program)
        candidate = os.path.normpath(os.path.join(cwd, found[0]))
        if own is not None and program_rules.inside(candidate, own):
            raise BadInput(f"{what} program {program!r} resolves to {candidate!r}, inside tau's own environment "
                           f"{own!r}, not yours: give the program's absolute path, or put your environment first on "
                           "PATH", program=candidate)
    if not os.path.exists(candidate):
        raise NotFound(f"{what} program {candidate!r} does not exist", program=candidate)
    if not os.path.isfile(candidate):
        raise BadInput(f"{what} program {candidate!r} is not a regular file", program=candidate)
    if not os.access(candidate, os.X_OK):
        raise BadInput(f"{what} program {candidate!r} is not executable (chmod +x it, or name its "
                       "interpreter first)", program=candidate)
    return candidate


def service_programs(service: Record, cwd: str, path: str, own: str | None) -> Record:
    """A service's program and its probe command's, resolved and checked as the client's (tau-init(1) "The
    pre-flight"), each named by the service in any refusal; a service's program in an image is taken as given (its
    attempts look it up there)."""
    found: Record = {"program": None, "probe": None}
    for key, argv in (("program", service["command"]), ("probe", service["ready"].get("command"))):
        if key == "program" and service.get("image") is not None:
            found[key] = argv[0]
        elif argv is not None:
            what = f"service {service['name']!r}'s" + ("" if key == "program" else " probe")
            found[key] = resolve_program(argv[0], cwd, path, own, what)
            check_script(argv, cwd, what)
    return found


def check_script(argv: list[str], cwd: str, what: str = "the client") -> None:
    """When the program is an interpreter and its next argument is a script (`rules.program`), the script must be
    a readable regular file, its path taken relative to `cwd` as the client's will be: BadInput (65) naming it and
    the folder it was looked for in."""
    index = program_rules.script_index(argv)
    if index is None:
        return
    script = argv[index]
    where = os.path.normpath(os.path.join(cwd, script))
    if not os.path.exists(where):
        problem = "does not exist"
    elif not os.path.isfile(where):
        problem = "is not a regular file"
    elif not os.access(where, os.R_OK):
        problem = "is not readable"
    else:
        return
    raise BadInput(f"{what} script {script!r} (command[{index}], run by {argv[0]!r}) {problem} in {cwd!r}, the "
                   "folder tau-init runs in, which the run records as its clients' working folder: fix its path, or "
                   "run tau-init from the folder it is relative to", script=where, cwd=cwd)


def own_environment() -> str | None:
    """tau's own virtual environment (the running interpreter's prefix), or None when tau runs in a base Python or
    in the environment the person activated (VIRTUAL_ENV: tau installed into the researcher's own environment is
    theirs to use, and a program found there is found on purpose)."""
    if sys.prefix == sys.base_prefix:
        return None
    activated = env.get("VIRTUAL_ENV")
    if activated and os.path.realpath(activated) == os.path.realpath(sys.prefix):
        return None
    return sys.prefix

