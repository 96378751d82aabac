"""Checking the crash states of recorded steps (tests/crashstates.py makes them): which states are tried, how a
step's states are counted per protocol (into the adversarial report, `harness.REPORT`), and the invariants shared by
the steps of a run's life and of a bundle fetch.

A step is an object with `name`, `ws` (the workspace: the recorded root, at the same path every time), `pre` (its
state before the command), `check(state)` and `converge(state)` (each a list of problems, empty when the state is
fine). `explore(step, rec, protocol)` checks up to CAP states per protocol (all when fewer; the prefix and durable
states first, the rest a seeded sample), and tau-drive-style convergence on CONVERGE of them.
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import crashstates as cs
from harness import REPORT, SCALE, misbehaviour

CAP = 60 * SCALE  # crash states checked per protocol and step
CONVERGE = 2 * SCALE  # states per step on which the whole life must finish (real processes)
SEED = 22
TEMP = re.compile(r"^\.tau\.[0-9a-f]{16}\.tmp$")


def count(protocol: str, broke: bool) -> None:
    REPORT["crash_states"] += 1
    REPORT[f"crash_states:{protocol}"] += 1
    if broke:
        REPORT["crash_states_broken"] += 1
        REPORT[f"crash_states_broken:{protocol}"] += 1


def outcome_problem(name: str, outcome, ok: tuple[int, ...]) -> str | None:
    """None when a command run with harness.invoke exited with one of `ok` (or refused as tau's exit table says,
    when that is allowed by `ok`); else what is wrong."""
    from taulib.errors import EXIT_CODES

    if outcome.code in ok:
        return None if b"Traceback" not in outcome.err else f"{name}: a traceback"
    if outcome.code not in EXIT_CODES or outcome.code == 70:
        return f"{name} exited {outcome.code}: {outcome.err[:300]!r}"
    return f"{name} exited {outcome.code}: {misbehaviour(outcome) or outcome.err[:300]!r}"


def problems_of_run(run_dir: Path) -> list[str]:
    """What is wrong with the run directory as it stands (empty: nothing): a visible record that fails its
    schema, a winner that is not whole (its chain, or a file that does not hash as its manifest says)."""
    from taulib.errors import TauError
    from taulib.lifecycle import candidate
    from taulib.lifecycle import winner as winners
    from taulib.rundir import layout
    from taulib.rundir.records import RunDir
    from taulib.rundir.run import Run

    if not (run_dir / "run.json").exists():
        return []
    found = []
    with RunDir(str(run_dir)) as rd:
        for dirpath, _, files in os.walk(run_dir):
            for name in files:
                rel = os.path.relpath(os.path.join(dirpath, name), run_dir)
                if name.endswith(".json") and not TEMP.match(name) and "/dataset/" not in rel:
                    try:
                        rd.read(rel)
                    except TauError as exc:
                        found.append(f"a visible record that fails its schema: {rel}: {exc.message}")
    if found:
        return found
    with Run(str(run_dir)) as run:
        for index in range(run.shard_count):
            sid = layout.shard_id(index)
            record = run.dir.read(layout.winner(sid), "tau.winner")
            if record is None:
                continue
            try:
                chain = winners.check_chain(run, sid, record["attempt_id"], winner=record)
                candidate.verify(run.dir, chain.manifest)
            except TauError as exc:
                found.append(f"winner of {sid} is not whole: {exc.message}")
    return found


def problems_of_destination(dest: Path) -> list[str]:
    """A collection (or fetch) destination is absent or whole: every file its result names, with its sha256."""
    from taulib import jsonio

    if not dest.exists():
        return []
    if dest.is_dir() and not any(dest.iterdir()) and (dest.parent / f".{dest.name}.tau-reserved").exists():
        return []  # reserved by a publication without renameat2: undone by the next tau-collect
    result_path = dest / "_tau_collection.json"
    if not result_path.exists():
        return [f"{dest.name} exists without its _tau_collection.json"]
    result = json.loads(result_path.read_bytes())
    present = {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()} - {"_tau_collection.json"}
    listed = {f["path"] for f in result["files"]}
    if present != listed:
        return [f"{dest.name} holds {sorted(present)}, its result lists {sorted(listed)}"]
    return [f"{dest.name}/{f['path']} does not match its sha256" for f in result["files"]
            if jsonio.sha256_hex((dest / f["path"]).read_bytes()) != f["sha256"]]


def problems_of_bundle(root: Path, generation: str) -> list[str]:
    """A fetched bundle folder is absent or whole: its marker and manifest, and every file the manifest lists
    with its size and sha256, nothing else outside .tau/."""
    from taulib import jsonio

    if not root.exists():
        return []
    manifest = root / ".tau" / "bundles" / f"{generation}.json"
    marker = root / ".tau" / "bundles" / f"{generation}.complete"
    if not manifest.exists() or not marker.exists():
        return [f"{root.name} exists without its manifest and marker"]
    record = json.loads(manifest.read_bytes())
    present = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
               and not str(p.relative_to(root)).startswith(".tau/")}
    listed = {f["path"] for f in record["files"]}
    if present != listed:
        return [f"{root.name} holds {sorted(present)}, its manifest lists {sorted(listed)}"]
    return [f"{root.name}/{f['path']} does not match its sha256" for f in record["files"]
            if jsonio.sha256_hex((root / f["path"]).read_bytes()) != f["sha256"]]


def choose(states: list, cap: int, rng: random.Random) -> list:
    """All states when they are few; else the prefix and durable ones first, the rest a seeded sample."""
    if len(states) <= cap:
        return states
    first = [s for s in states if s.label in ("prefix", "durable")]
    rest = [s for s in states if s.label not in ("prefix", "durable")]
    if len(first) >= cap:
        return sorted(rng.sample(first, cap), key=lambda s: s.cut)
    return sorted(first + rng.sample(rest, cap - len(first)), key=lambda s: s.cut)


def describe(op: cs.Op | None) -> str:
    return "nothing" if op is None else f"{op.cmd} {op.kind} {op.path}"


def settled(op: cs.Op) -> bool:
    """Operations whose loss no reader minds, kept as issued: lock files (empty, made on demand) and logs
    (appended, never trusted)."""
    return "/locks/" in f"/{op.path}" or op.path.endswith(".log")


def final_names(rec: cs.Recording) -> dict[int, str]:
    """The name each inode ends with (a temp file's record), to say which record an operation on it served."""
    out: dict[int, str] = {}
    for op in rec.ops:
        if op.kind in ("link", "rename") and not TEMP.match(op.path.rpartition("/")[2]):
            out[op.ino] = op.path
    return out


def explore(step, rec: cs.Recording, protocol, results: dict[str, list[int]]) -> list[str]:
    """Check the step's crash states; `protocol(op, finals)` names the protocol a state counts under. Returns
    what broke (one line per state), and adds to `results` (protocol -> [tried, broke]) and the report."""
    rng = random.Random(f"{SEED}-{step.name}")
    finals = final_names(rec)
    by_protocol: dict[str, list] = {}
    for state in cs.crash_states(rec, seed=SEED, settled=settled):
        by_protocol.setdefault(protocol(state.op, finals), []).append(state)
    broken, chosen = [], []
    for proto, states in sorted(by_protocol.items()):
        picked = choose(states, CAP, rng)
        chosen += picked
        tally = results.setdefault(proto, [0, 0])
        for state in picked:
            found = step.check(state)
            tally[0] += 1
            tally[1] += bool(found)
            count(proto, bool(found))
            if found:
                broken.append(f"{proto} cut {state.cut} ({state.label}, after {describe(state.op)}): {found[0]}")
    for state in rng.sample(chosen, min(CONVERGE, len(chosen))):
        found = step.converge(state)
        if found:
            broken.append(f"{step.name} cut {state.cut} ({state.label}): converging: {found[0]}")
    cs.materialise(step.pre, step.ws)
    return broken
