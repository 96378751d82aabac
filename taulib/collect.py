"""Collection (tau-collect): every shard's winner, in planned order, into one deterministic dataset.

Order of work (SPEC 8):
  1. validate every planned shard's winner chain from its records (no bulk data read yet): a missing, malformed or
     mismatched winner refuses the whole collection (exit 1), as do mixed schemas or a record total that differs
     from the plan;
  2. authorise the destination: normalised, strictly below the run's workspace (the run directory's parent) or a
     root listed in the plan's `collection.allowed_roots`, not overlapping the run directory, its parent folder
     not writable by group or others, and absent;
  3. journal `collections/collection-NNNN/{plan.json,status.json}` under `collect.lock`;    failpoint collect.planned
  4. stream: each winner's files are re-hashed (size and sha256 against the manifest) and read in bounded batches,
     re-batched into partitions of exactly `rows_per_partition` rows (the last one takes the rest), written to
     `part-NNNNN.<format>` in a private stage folder beside the destination, with `_tau_collection.json`
     (every output file's size, sha256 and rows) last;                                   failpoint collect.staged
  5. publish the stage with renameat2(RENAME_NOREPLACE) (see `taulib.publish`), fsync; failpoint collect.renamed
  6. status succeeded.
A rerun after a crash removes the exact stage of an unfinished collection and starts it again, or adopts a
destination that a crashed run had already published (its _tau_collection.json matches the plan). Nothing is
ever overwritten. Under the local executor the worker runs inline; under Slurm it runs as a CPU job without GPUs
(`tau-collect RUN --worker ID`, fenced on its SLURM_JOB_ID), which `--wait` follows to its end.
"""

from __future__ import annotations

import hashlib
import os
import stat

from taulib import failpoints, jsonio, layout, locks, publish, store, winner
from taulib.errors import Busy, CheckFailed, Conflict, Refused, Unavailable, UsageError

BATCH_ROWS = 65_536
SUFFIX = {"parquet": "parquet", "csv": "csv", "jsonl": "jsonl"}
RESULT = "_tau_collection.json"  # leading "_": Arrow, Spark and DuckDB dataset readers skip it


# -- 1. winners -------------------------------------------------------------------------------------------------

def validate_winners(run) -> list[dict]:
    """Check every shard's winner chain (records only). Returns per shard {shard_id, winner, winner_sha, manifest}."""
    out = []
    missing = []
    for sid in run.shard_ids():
        data = run.dir.read_bytes(layout.winner(sid))
        if data is None:
            missing.append(sid)
            continue
        record = run.dir.decode(layout.winner(sid), data, "tau.winner")
        if record["shard_id"] != sid or record["run_id"] != run.run_id:
            raise CheckFailed(f"the winner of {sid} names another shard or run; refusing to collect", shard_id=sid)
        _, _, manifest, _, _ = winner.check_chain(run, sid, record["attempt_id"], winner=record)
        out.append({"shard_id": sid, "winner": record, "winner_sha256": jsonio.sha256_hex(data),
                    "manifest": manifest})
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise CheckFailed(f"{len(missing)} shard(s) have no winner ({shown}); collect needs every shard's winner",
                          shards=missing[:100])
    digests = {w["manifest"]["schema_digest"] for w in out}
    if len(digests) > 1:
        raise CheckFailed("the winners have incompatible schemas; refusing to collect")
    total = sum(w["manifest"]["actual_records"] for w in out)
    if total != run.plan["records"]:
        raise CheckFailed(f"the winners hold {total} records; the plan asks for {run.plan['records']}")
    return out


# -- 2. destination ---------------------------------------------------------------------------------------------

def authorise(run, destination: str) -> tuple[str, str, str]:
    """Return (normalised destination, real parent path, final name) or raise Refused/Conflict/UsageError."""
    if not destination or "\0" in destination:
        raise UsageError("--destination must be a path")
    dest = os.path.normpath(os.path.abspath(destination))
    parent, name = os.path.split(dest)
    if not name or name in (".", ".."):
        raise UsageError(f"--destination {destination!r} has no final name")
    roots = [os.path.realpath(os.path.dirname(run.path))] + [
        os.path.realpath(r) for r in run.plan["collection"]["allowed_roots"]]
    real_parent = os.path.realpath(parent)
    real_dest = os.path.join(real_parent, name)
    real_run = os.path.realpath(run.path)
    if not any(real_dest.startswith(root.rstrip("/") + "/") for root in roots):
        raise Refused(f"destination {dest!r} is not below the run's workspace {roots[0]!r} or an allowed root "
                      "(plan collection.allowed_roots)", destination=dest)
    if real_dest == real_run or real_dest.startswith(real_run + "/") or real_run.startswith(real_dest + "/"):
        raise Refused(f"destination {dest!r} overlaps the run directory", destination=dest)
    return dest, real_parent, name


def _open_parent(real_parent: str) -> int:
    os.makedirs(real_parent, mode=0o700, exist_ok=True)
    fd = os.open(real_parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    st = os.fstat(fd)
    if st.st_mode & 0o022:
        os.close(fd)
        raise Refused(f"the destination's parent {real_parent!r} is writable by group or others; another user "
                      "could replace the dataset", path=real_parent)
    if st.st_uid != os.geteuid():
        os.close(fd)
        raise Refused(f"the destination's parent {real_parent!r} belongs to another user", path=real_parent)
    return fd


def _exists(parent_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


# -- 3-6. journal and work --------------------------------------------------------------------------------------

def collect(run, destination: str, wait: bool = False) -> dict:
    """Plan a collection and run it: inline under the local executor, as a CPU job under Slurm (returned as
    `submitted`; with `wait`, follow it to its end)."""
    winners = validate_winners(run)
    dest, real_parent, name = authorise(run, destination)
    with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "collect"):
        parent_fd = _open_parent(real_parent)
        try:
            summary = _coordinate(run, winners, dest, parent_fd, name)
        finally:
            os.close(parent_fd)
    if wait and summary["state"] in ("submitted", "running"):
        summary = _wait(run, summary["collection_id"], destination)
    return summary


def _journal(run) -> list[str]:
    return sorted((n for n in run.dir.listdir("collections") if n.startswith("collection-")),
                  key=lambda n: int(n.split("-")[1]))


def _status_rel(plan: dict) -> str:
    return f"collections/{plan['collection_id']}/status.json"


def _set(run, plan: dict, status: dict, **changes) -> dict:
    status = dict(status, revision=status["revision"] + 1, updated_at=jsonio.now_rfc3339(), **changes)
    run.dir.replace(_status_rel(plan), status)
    return status


def _job_name(run, collection_id: str) -> str:
    from taulib.submission import job_name

    return job_name(run, "c" + collection_id.split("-")[1])


def _coordinate(run, winners: list[dict], dest: str, parent_fd: int, name: str) -> dict:
    ids = _journal(run)
    resumed = None
    if ids:
        newest = ids[-1]
        plan = run.dir.read(f"collections/{newest}/plan.json", "tau.collection-plan")
        status = run.dir.read(f"collections/{newest}/status.json", "tau.collection-status")
        if plan is None or status is None:
            run.dir.remove_tree(f"collections/{newest}")  # never reached its journal: nothing was written
            ids.pop()
        elif status["state"] == "succeeded" and plan["destination"] == dest:
            result = _read_result(parent_fd, name)
            if result is not None and jsonio.digest(result) == status["result_sha256"]:
                return _summary(plan, status, result, created=False)
        elif status["state"] in ("prepared", "submitted", "running"):
            if plan["destination"] != dest:
                raise Busy(f"collection {plan['collection_id']} to {plan['destination']!r} is not finished; "
                           "run tau-collect for that destination first", collection_id=plan["collection_id"])
            if run.plan["scheduler"]["profile"] == "local":
                resumed = (plan, status)
            else:
                settled = _settle_job(run, plan, status, parent_fd, name)
                if settled["state"] != "failed":
                    return settled
    publish.recover_reservation(parent_fd, name)
    if resumed is not None:
        plan, status = resumed
        result = _read_result(parent_fd, name)
        if result is not None and result["plan_sha256"] == jsonio.digest(plan):
            return _finish(run, plan, status, result)  # published before the crash: adopt it
    if _exists(parent_fd, name):
        raise Conflict(f"destination {dest!r} already exists; tau never overwrites a dataset", destination=dest)
    if resumed is None:
        cid = layout.collection_id(int(ids[-1].split("-")[1]) + 1 if ids else 1)
        now = jsonio.now_rfc3339()
        plan = {"kind": "tau.collection-plan", "schema_version": 1, "run_id": run.run_id, "collection_id": cid,
                "plan_sha256": run.plan_sha256, "created_at": now, "destination": dest,
                "format": run.plan["output"]["format"],
                "rows_per_partition": run.plan["output"]["rows_per_partition"], "records": run.plan["records"],
                "schema_digest": winners[0]["manifest"]["schema_digest"],
                "shards": [{"shard_id": w["shard_id"], "winner_sha256": w["winner_sha256"]} for w in winners]}
        run.dir.publish(f"collections/{cid}/plan.json", plan)
        deadline = jsonio.format_time(jsonio.parse_time(now) + run.plan["windows"]["submission_visibility_seconds"])
        status = {"kind": "tau.collection-status", "schema_version": 1, "run_id": run.run_id,
                  "collection_id": cid, "plan": {"path": f"collections/{cid}/plan.json",
                                                 "sha256": jsonio.digest(plan)},
                  "revision": 1, "state": "prepared", "updated_at": now, "result_sha256": None,
                  "reason": None, "job_id": None, "deadline": deadline}
        run.dir.replace(_status_rel(plan), status)
        failpoints.hit("collect.planned")
        if run.plan["scheduler"]["profile"] != "local":
            return _submit_job(run, plan, status)
    else:
        _check_winners(plan, winners)
    return _work(run, plan, status, winners, parent_fd, name)


def _check_winners(plan: dict, winners: list[dict]) -> None:
    for planned, w in zip(plan["shards"], winners, strict=True):
        if (planned["shard_id"], planned["winner_sha256"]) != (w["shard_id"], w["winner_sha256"]):
            raise Conflict(f"the winner of {w['shard_id']} changed since collection {plan['collection_id']} "
                           "was planned", shard_id=w["shard_id"])


def _work(run, plan: dict, status: dict, winners: list[dict], parent_fd: int, name: str) -> dict:
    """The worker's part (inline, or inside the CPU job): stream, stage, publish. Caller holds collect.lock."""
    status = _set(run, plan, status, state="running")
    stage = _stage_name(plan)
    _remove_stage(parent_fd, stage)
    try:
        result = _write_stage(run, plan, winners, parent_fd, stage)
        failpoints.hit("collect.staged")
        publish.rename_noreplace(parent_fd, stage, name,
                                 force_fallback=os.environ.get("TAU_NO_RENAMEAT2") == "1")
        failpoints.hit("collect.renamed")
        os.fsync(parent_fd)
    except BaseException as exc:
        _remove_stage(parent_fd, stage)
        if isinstance(exc, Conflict):
            _fail(run, plan, status, exc.message)
        raise
    return _finish(run, plan, status, result)


def _stage_name(plan: dict) -> str:
    return f".{os.path.basename(plan['destination'])}.tau-stage-{jsonio.digest(plan)[:16]}"


# -- the CPU job (Slurm) ----------------------------------------------------------------------------------------

def _submit_job(run, plan: dict, status: dict) -> dict:
    import sys

    from taulib.slurm import commands, script

    text = script.render_collection(job_name=_job_name(run, plan["collection_id"]), run_dir=run.path,
                                    collection_id=plan["collection_id"], python=sys.executable,
                                    profile=run.plan["scheduler"]["slurm"])
    try:
        job_id = commands.sbatch_script(run, f"collections/{plan['collection_id']}/job.sh", text)
    except commands.SubmitRefused as exc:
        _fail(run, plan, status, exc.message)
        raise
    status = _set(run, plan, status, state="submitted", job_id=job_id)
    return _progress(plan, status)


def _progress(plan: dict, status: dict) -> dict:
    return {"kind": "tau.collection", "schema_version": 1, "run_id": plan["run_id"],
            "collection_id": plan["collection_id"], "state": status["state"], "created": True,
            "destination": plan["destination"], "format": plan["format"], "records": plan["records"],
            "partitions": None, "files": [], "job_id": status["job_id"]}


def _settle_job(run, plan: dict, status: dict, parent_fd: int, name: str) -> dict:
    """Where is an unfinished Slurm collection? Returns a summary; state "failed" means start a new one."""
    from taulib.slurm import commands

    if status["state"] == "prepared":  # sbatch's reply was lost: find the job by its exact name, or retire it
        found = commands.find_by_name(_job_name(run, plan["collection_id"]), os.getuid(),
                                      jsonio.parse_time(plan["created_at"]))
        if len(found) > 1 or any(tasks != {None} for tasks in found.values()):
            raise Conflict(f"Slurm jobs {sorted(found)} carry the name of collection {plan['collection_id']}; "
                           "cancel the extra ones and run tau-collect again")
        if found:
            status = _set(run, plan, status, state="submitted", job_id=next(iter(found)))
            return _progress(plan, status)
        if jsonio.now_rfc3339() <= status["deadline"]:
            raise Busy(f"collection {plan['collection_id']} is not visible in Slurm yet; try again")
        _fail(run, plan, status, "its job was not visible in Slurm by the visibility deadline")
        return {"state": "failed"}
    job = status["job_id"]
    queue = commands.squeue([job])
    if any(row.job_id == job for row in queue):
        return _progress(plan, status)
    accounting = parse_latest(commands.sacct([job], arrays=set()), job)
    result = _read_result(parent_fd, name)
    if result is not None and result["plan_sha256"] == jsonio.digest(plan):
        status = run.dir.read(_status_rel(plan), "tau.collection-status") or status
        if status["state"] != "succeeded":
            return _finish(run, plan, status, result)
        return _summary(plan, status, result, created=False)
    if accounting is None and jsonio.now_rfc3339() <= _grace(status):
        return _progress(plan, status)  # not in accounting yet: accounting lag, not a verdict
    _remove_stage(parent_fd, _stage_name(plan))
    verdict = accounting.raw if accounting is not None else "absent from the queue and from accounting"
    _fail(run, plan, status, f"its Slurm job {job} ended ({verdict}) without publishing the dataset")
    return {"state": "failed"}


def parse_latest(rows, job: str):
    mine = [r for r in rows if r.job_id == job]
    return mine[-1] if mine else None


def _grace(status: dict) -> str:
    return jsonio.format_time(jsonio.parse_time(status["updated_at"]) + 60)


def _wait(run, collection_id: str, destination: str) -> dict:
    """Follow a Slurm collection until it succeeds or fails (reads its status; asks squeue every 10 s)."""
    import time as _time

    from taulib.slurm import commands

    rel = f"collections/{collection_id}/status.json"
    gone_since = None
    next_check = _time.monotonic() + 10
    while True:
        _time.sleep(1)
        status = run.dir.require(rel, "tau.collection-status")
        if status["state"] == "succeeded":
            return collect(run, destination)
        if status["state"] == "failed":
            raise CheckFailed(f"collection {collection_id} failed: {status['reason']}", collection_id=collection_id)
        if _time.monotonic() < next_check:
            continue
        next_check = _time.monotonic() + 10
        try:
            queued = any(row.job_id == status["job_id"] for row in commands.squeue([status["job_id"]]))
        except Unavailable:
            continue
        if queued:
            gone_since = None
        elif gone_since is None:
            gone_since = _time.monotonic()
        elif _time.monotonic() - gone_since > 90:  # the job is gone and never finished: record why
            with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "collect"):
                plan = run.dir.require(f"collections/{collection_id}/plan.json", "tau.collection-plan")
                status = run.dir.require(rel, "tau.collection-status")
                if status["state"] in ("submitted", "running"):
                    _, real_parent, name = authorise(run, plan["destination"])
                    parent_fd = _open_parent(real_parent)
                    try:
                        summary = _settle_job(run, plan, status, parent_fd, name)
                    finally:
                        os.close(parent_fd)
                    if summary["state"] == "succeeded":
                        return summary
            gone_since = _time.monotonic()


def work(run_dir: str, collection_id: str, env: dict | None = None) -> dict:
    """The CPU job's side: fence on SLURM_JOB_ID, then stream, stage and publish."""
    import time as _time

    from taulib.run import Run

    env = dict(os.environ) if env is None else env
    job = env.get("SLURM_JOB_ID")
    if not job:
        raise Refused("tau-collect --worker runs only inside its Slurm job (SLURM_JOB_ID is unset); on a login "
                      "node, run tau-collect RUN --destination PATH")
    with Run(run_dir) as run:
        plan = run.dir.require(f"collections/{collection_id}/plan.json", "tau.collection-plan")
        try:
            limit = _time.monotonic() + float(env.get("TAU_BINDING_WAIT", "300"))
        except ValueError:
            limit = _time.monotonic() + 300
        while True:  # the job can start before tau-collect has recorded its id
            status = run.dir.require(_status_rel(plan), "tau.collection-status")
            if status["state"] in ("submitted", "running") and status["job_id"] == job:
                break
            if status["state"] != "prepared" or _time.monotonic() > limit:
                raise Refused(f"Slurm job {job} is not the recorded job of collection {collection_id} "
                              f"({status['state']}, job {status['job_id']}); this late or duplicate worker writes "
                              "nothing", collection_id=collection_id)
            _time.sleep(1.0)
        winners = validate_winners(run)
        _check_winners(plan, winners)
        dest = plan["destination"]
        _, real_parent, name = authorise(run, dest)
        with locks.hold(run.dir, "run", shared=True), locks.hold(run.dir, "collect"):
            status = run.dir.require(_status_rel(plan), "tau.collection-status")
            if status["job_id"] != job or status["state"] not in ("submitted", "running"):
                raise Refused(f"collection {collection_id} is no longer bound to job {job}; writing nothing")
            parent_fd = _open_parent(real_parent)
            try:
                if _exists(parent_fd, name):
                    result = _read_result(parent_fd, name)
                    if result is not None and result["plan_sha256"] == jsonio.digest(plan):
                        return _finish(run, plan, status, result)
                    raise Conflict(f"destination {dest!r} already exists; tau never overwrites a dataset")
                return _work(run, plan, status, winners, parent_fd, name)
            finally:
                os.close(parent_fd)


def _fail(run, plan: dict, status: dict, reason: str) -> None:
    _set(run, plan, status, state="failed", reason=reason[:500])


def _finish(run, plan: dict, status: dict, result: dict) -> dict:
    status = _set(run, plan, status, state="succeeded", result_sha256=jsonio.digest(result))
    return _summary(plan, status, result, created=True)


def _summary(plan: dict, status: dict, result: dict, created: bool) -> dict:
    return {"kind": "tau.collection", "schema_version": 1, "run_id": plan["run_id"],
            "collection_id": plan["collection_id"], "state": status["state"], "created": created,
            "destination": plan["destination"], "format": plan["format"], "records": result["records"],
            "partitions": len(result["files"]), "files": result["files"], "job_id": status.get("job_id")}


def _read_result(parent_fd: int, name: str) -> dict | None:
    try:
        dfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        fd = os.open(RESULT, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        return None
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read()
    from taulib import schema

    try:
        record = jsonio.loads(data, RESULT)
        schema.validate(record, "collection-result")
    except Exception:  # noqa: BLE001 - a foreign or damaged folder is simply not ours to adopt
        return None
    return record  # type: ignore[return-value]


def _remove_stage(parent_fd: int, stage: str) -> None:
    try:
        st = os.stat(stage, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise Refused(f"stage {stage!r} exists and is not a folder of ours; remove it by hand", path=stage)
    store.rmtree_at(parent_fd, stage)
    os.fsync(parent_fd)


# -- streaming --------------------------------------------------------------------------------------------------

def _verified_table_batches(run, shard: dict):
    """Yield RecordBatches of a winner's files after checking each file's size and sha256."""
    import pyarrow.parquet as pq

    manifest = shard["manifest"]
    for entry in manifest["files"]:
        rel = f"{manifest['dataset']}/{entry['path']}"
        fd = run.dir.open_read(rel)
        with os.fdopen(fd, "rb") as fh:
            sha = hashlib.sha256()
            size = 0
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                sha.update(chunk)
                size += len(chunk)
            if (size, sha.hexdigest()) != (entry["size"], entry["sha256"]):
                raise Conflict(f"{rel} no longer matches its winner's manifest (size or sha256); refusing to "
                               "collect", path=rel)
            fh.seek(0)
            pf = pq.ParquetFile(fh)
            if pf.metadata.num_rows != entry["rows"]:
                raise Conflict(f"{rel} has {pf.metadata.num_rows} rows, its manifest says {entry['rows']}",
                               path=rel)
            yield from pf.iter_batches(batch_size=BATCH_ROWS)


class _PartitionWriter:
    """Writes partitions of exactly `rows` rows (the last takes the rest) in one format, inside the stage."""

    def __init__(self, stage_fd: int, fmt: str, rows: int, total: int) -> None:
        self.stage_fd, self.fmt, self.rows, self.total = stage_fd, fmt, rows, total
        self.files: list[dict] = []
        self.index = -1
        self.current_rows = 0
        self.written = 0
        self.fh = None
        self.writer = None
        self.pending: list = []
        self.pending_rows = 0

    def _open(self, schema) -> None:
        self.index += 1
        name = f"part-{self.index:05d}.{SUFFIX[self.fmt]}"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=self.stage_fd)
        self.fh = os.fdopen(fd, "wb")
        self.name = name
        self.current_rows = 0
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            self.writer = pq.ParquetWriter(self.fh, schema)
        elif self.fmt == "csv":
            import pyarrow.csv as pacsv

            self.writer = pacsv.CSVWriter(self.fh, schema)
        else:
            self.writer = None

    def _close(self) -> None:
        if self.fh is None:
            return
        self._flush()
        if self.writer is not None:
            self.writer.close()
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        self.files.append(_describe_output(self.stage_fd, self.name, self.current_rows))
        self.fh = None
        self.writer = None

    def write(self, batch) -> None:
        offset = 0
        while offset < batch.num_rows:
            if self.fh is None or self.current_rows == self.rows:
                self._close()
                self._open(batch.schema.remove_metadata())
            take = min(self.rows - self.current_rows, batch.num_rows - offset)
            self.pending.append(batch.slice(offset, take))
            self.pending_rows += take
            offset += take
            self.current_rows += take
            if self.pending_rows >= BATCH_ROWS:
                self._flush()

    def _flush(self) -> None:
        """Write buffered rows in row groups of exactly BATCH_ROWS (the partition's last group takes the rest)."""
        if not self.pending:
            return
        import pyarrow as pa

        table = pa.Table.from_batches(self.pending).replace_schema_metadata(None)
        self.pending, self.pending_rows = [], 0
        if self.fmt == "parquet":
            self.writer.write_table(table, row_group_size=BATCH_ROWS)
        elif self.fmt == "csv":
            self.writer.write_table(table)
        else:
            import orjson

            write = self.fh.write
            for batch in table.to_batches(max_chunksize=8192):
                for row in batch.to_pylist():
                    write(orjson.dumps(row, default=str, option=orjson.OPT_APPEND_NEWLINE))

    def finish(self) -> list[dict]:
        self._close()
        return self.files


def _describe_output(stage_fd: int, name: str, rows: int) -> dict:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=stage_fd)
    with os.fdopen(fd, "rb") as fh:
        sha = hashlib.sha256()
        size = 0
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
            size += len(chunk)
    return {"path": name, "size": size, "sha256": sha.hexdigest(), "rows": rows}


def _write_stage(run, plan: dict, winners: list[dict], parent_fd: int, stage: str) -> dict:
    os.mkdir(stage, 0o700, dir_fd=parent_fd)
    stage_fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    try:
        os.fchmod(stage_fd, 0o700)
        writer = _PartitionWriter(stage_fd, plan["format"], plan["rows_per_partition"], plan["records"])
        for shard in winners:
            for batch in _verified_table_batches(run, shard):
                writer.write(batch)
        files = writer.finish()
        total = sum(f["rows"] for f in files)
        if total != plan["records"]:
            raise Conflict(f"collected {total} rows; the plan asks for {plan['records']}")
        result = {"kind": "tau.collection-result", "schema_version": 1, "run_id": plan["run_id"],
                  "collection_id": plan["collection_id"], "plan_sha256": jsonio.digest(plan),
                  "completed_at": jsonio.now_rfc3339(), "format": plan["format"], "records": total,
                  "files": files}
        store.write_new(stage_fd, RESULT, jsonio.canonical(result))
        os.fsync(stage_fd)
        return result
    finally:
        os.close(stage_fd)
