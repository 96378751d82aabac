"""Adoption (tau-init NEW --from OLD): a new run reuses the winners of an old one, checked against its own rules.

A shard of NEW whose record range is a shard's of OLD that has a winner is adoptable; when NEW declares an output
schema, the winner's recorded fields must be that schema; in runs over a dataset, the shard must read exactly the
input pieces (names, byte ranges, digests, rows) and keep exactly the input columns the winner of OLD did
(`rules.inputs.same_input`); else it is not adopted, and says why. The adoptable
shards are given their first attempt by one submission of purpose `adopt`, run by the local executor whatever the
run's profile (copying files needs no compute node), whose plan names OLD (`adopt_from`: its folder, run id and
plan digest). Its tasks are ordinary attempts: fenced like any other, they copy the files of OLD's winner (never a
link: a dataset file of a run is its own, `lifecycle.candidate`) into their dataset instead of running the
client, then end as every attempt ends: tau describes the files (sizes, sha256, Parquet rows and schema) into a
manifest whose provenance is NEW's plan, checks them against NEW's output schema and against the digests OLD's
winner recorded, and publishes NEW's winner. So an adopted winner is held to exactly NEW's rules, and a file of
OLD that changed since its winner was published fails its attempt; a shard not adopted, or whose adoption
failed, is submitted and retried as any other.
Reads: OLD's records and the files of its winners (never written). Writes: through `lifecycle.submission`, and in
the allocation the attempt's dataset files (through the run's writer).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from taulib import executors, jsonio
from taulib.errors import BadInput, Conflict, NotFound, TauError
from taulib.rules import fields as rules_fields
from taulib.rules import inputs as rules_inputs
from taulib.rundir import layout, state

if TYPE_CHECKING:
    from taulib.jsonio import Record
    from taulib.rundir.run import Run

COPY_CHUNK = 1 << 24


def create(run_dir: str, request: object, old_dir: str | None = None, check_image: bool = False) -> Record:
    """tau-init RUN_DIR [--from OLD] [--check-image]: the run created from `request` (`lifecycle.init.init`), its
    output with `adopted` (null without `old_dir`; else what `adopt` gave). OLD must be a run before anything is
    created."""
    from taulib.lifecycle import init
    from taulib.rundir.run import Run

    if old_dir is not None:
        Run(old_dir).close()
    result = init.init(run_dir, request, check_image=check_image)
    result["adopted"] = None
    if old_dir is not None:
        with Run(run_dir) as run:
            result["adopted"] = adopt(run, old_dir)
    return result


def adopt(new: Run, old_dir: str) -> Record:
    """Give each adoptable shard of `new` its first attempt, copying the winner of `old_dir`'s shard of the same
    range (see the module docstring). Returns {from, run_id, adoptable, submission_id, tasks, not_adopted}."""
    from taulib.lifecycle import candidate, submission
    from taulib.rundir.run import Run

    with Run(old_dir) as old:
        if os.path.realpath(old.path) == os.path.realpath(new.path):
            raise BadInput(f"--from names the new run {new.path!r} itself")
        declared = candidate.run_schema(new)
        found = _winners_by_range(old)
        old_input, new_input = old.input_index(), new.input_index()
        adoptable: list[str] = []
        not_adopted: list[Record] = []
        for sid in new.shard_ids():
            shard = new.shard(sid)
            match = found.get((shard["record_start"], shard["record_end"]))
            if match is None:
                continue
            old_sid, manifest = match
            why = rules_inputs.same_input(old_input, new_input, shard["record_start"], shard["record_end"])
            if why is not None:
                not_adopted.append({"shard_id": sid, "from_shard_id": old_sid, "reason": why})
                continue
            if declared is not None and declared["fixed_by"] is None:
                differ = rules_fields.differences(declared["fields"], manifest["fields"])
                if differ:
                    not_adopted.append({"shard_id": sid, "from_shard_id": old_sid,
                                        "reason": "its columns are not the new run's output schema: "
                                                  + rules_fields.describe(differ)})
                    continue
            adoptable.append(sid)
        source = {"run_dir": os.path.abspath(old.path), "run_id": old.run_id, "plan_sha256": old.plan_sha256}

    wanted = set(adoptable)

    def select(run_: Run) -> tuple[list[str], list[dict[str, str]], list[str]]:
        submitted = state.Submitted(run_)
        fresh = [sid for sid in run_.shard_ids() if sid in wanted and not state.attempt_ids(run_, sid, submitted)]
        return fresh, [], []

    made = None
    if adoptable:
        made = submission.submit(new, "adopt", select, via=executors.HERE, extra={"adopt_from": source})
    return {"from": source["run_dir"], "run_id": source["run_id"], "adoptable": len(adoptable),
            "submission_id": made["submission_id"] if made else None, "tasks": len(made["tasks"]) if made else 0,
            "not_adopted": not_adopted}


def _winners_by_range(old: Run) -> dict[tuple[int, int], tuple[str, Record]]:
    """{(record_start, record_end): (shard id, its winner's manifest)} of every shard of OLD with a winner whose
    manifest is the one the winner names by digest."""
    out: dict[tuple[int, int], tuple[str, Record]] = {}
    for sid in old.shard_ids():
        found = winner_manifest(old, sid)
        if found is not None:
            shard = old.shard(sid)
            out[(shard["record_start"], shard["record_end"])] = (sid, found[1])
    return out


def _winner_of_range(old: Run, start: int, end: int) -> tuple[str, Record] | None:
    """(shard id, its winner's manifest) of OLD's shard holding exactly records [start, end), or None. Shards hold
    ascending ranges, so it is found by bisection: an adoption task reads a few records of OLD, not all of them."""
    low, high = 0, old.shard_count - 1
    while low <= high:
        middle = (low + high) // 2
        shard = old.shard(layout.shard_id(middle))
        if shard["record_start"] < start:
            low = middle + 1
        elif shard["record_start"] > start:
            high = middle - 1
        else:
            if shard["record_end"] != end:
                return None
            found = winner_manifest(old, shard["shard_id"])
            return None if found is None else (shard["shard_id"], found[1])
    return None


def winner_manifest(old: Run, sid: str) -> tuple[Record, Record] | None:
    """(winner, manifest) of a shard of OLD, or None when it has no winner; Conflict when the manifest is not the
    one its winner names."""
    winner = old.dir.read(layout.winner(sid), "tau.winner")
    if winner is None:
        return None
    data = old.dir.read_bytes(winner["manifest"]["path"])
    if data is None or jsonio.sha256_hex(data) != winner["manifest"]["sha256"]:
        raise Conflict(f"run {old.run_id!r}: the manifest of {sid}'s winner is not the one it names by digest",
                       shard_id=sid)
    return winner, old.dir.decode(winner["manifest"]["path"], data, "tau.manifest")


def copy(run: Run, attempt: Record, source: Record) -> tuple[str | None, Record | None]:
    """In the allocation of an adoption's attempt: copy the files of OLD's winner of the shard of the same range
    into the attempt's dataset. (why it could not, or None; the manifest's `adopted_from`, with the files OLD's
    winner recorded under `files` for the caller to compare)."""
    from taulib.rundir.run import Run

    shard = run.shard(attempt["shard_id"])
    try:
        with Run(source["run_dir"]) as old:
            if (old.run_id, old.plan_sha256) != (source["run_id"], source["plan_sha256"]):
                return f"{source['run_dir']!r} is no longer run {source['run_id']!r} with the plan adopted from", None
            match = _winner_of_range(old, shard["record_start"], shard["record_end"])
            if match is None:
                return f"run {old.run_id!r} has no winner for records {shard['record_start']}..{shard['record_end']}", \
                    None
            old_sid, manifest = match
            winner = old.dir.read(layout.winner(old_sid), "tau.winner")
            assert winner is not None  # found a moment ago; a winner is never removed
            for entry in manifest["files"]:
                _copy_file(old, f"{manifest['dataset']}/{entry['path']}", run, f"{attempt['dataset']}/{entry['path']}")
            return None, {"run_dir": source["run_dir"], "run_id": old.run_id, "shard_id": old_sid,
                          "attempt_id": winner["attempt_id"], "manifest_sha256": winner["manifest"]["sha256"],
                          "files": [{k: f[k] for k in ("path", "size", "sha256", "rows")} for f in manifest["files"]]}
    except (NotFound, TauError) as exc:
        return f"cannot adopt from {source['run_dir']!r}: {exc.message}", None


def _copy_file(old: Run, src: str, new: Run, dst: str) -> None:
    fd_in = old.dir.open_read(src)
    try:
        fd_out = new.dir.create(dst)
        try:
            size = os.fstat(fd_in).st_size
            done = 0
            try:
                while done < size:
                    moved = os.copy_file_range(fd_in, fd_out, min(COPY_CHUNK, size - done))
                    if moved == 0:
                        break
                    done += moved
            except OSError:  # a filesystem or kernel without it: plain reads and writes, from where it stopped
                while chunk := os.pread(fd_in, COPY_CHUNK, done):
                    os.write(fd_out, chunk)
                    done += len(chunk)
            os.fsync(fd_out)
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)


def mismatch(adopted: Record, described: list[Record]) -> str | None:
    """Why the files copied are not those OLD's winner recorded (a file changed since), or None."""
    mine = [{k: f[k] for k in ("path", "size", "sha256", "rows")} for f in described]
    if mine == adopted["files"]:
        return None
    return (f"the files of run {adopted['run_id']!r}'s winner of {adopted['shard_id']} are not those its manifest "
            "recorded (changed since it was published); not adopted")
