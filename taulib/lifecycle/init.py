"""Creating a run (tau-init): the plan resolved from the request, then the run's records.

Reads: the plan request (validated against `plan-request`). Writes: plan.json, the empty shards/ folder (and
schema.json when the plan declares the output schema), and run.json last, so a run exists exactly when run.json
does. Nothing is written per shard: a shard's record range is a function of the plan (`rules.shards.shard_range`;
run.json's `run_format` 2 says so, see `rundir.run`), and its folder is made by the first record about it; so
tau-init takes the same time for 8 shards as for 1,000,000. Runs made by earlier versions of tau have a
shards/*/shard.json each.
Promises: the resolved plan is a pure function of the request and the run id (no clock, no machine facts); the
pre-flight resolves the client's program once (an absolute path of an executable file) and records it in run.json
with the PATH and the folder tau-init ran with, so every attempt runs the same program in the same environment,
whoever submits it from wherever; a program that is missing or not executable is refused before the run exists;
identical re-creation is a no-op, a different plan for an existing run is a conflict (73); a crash at any step
leaves no run.json, and running tau-init again finishes the job. A folder that holds anything but a tau run is
refused.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING

from taulib import __version__, env, executors, failpoints, jsonio, schema
from taulib.errors import BadInput, Conflict, NotFound, UsageError
from taulib.fs import atomic
from taulib.lifecycle import preflight
from taulib.lifecycle.preflight import check_script, own_environment, resolve_program
from taulib.rules import budget
from taulib.rules import inputs as input_rules
from taulib.rules import plan as defaults
from taulib.rules import services as service_rules
from taulib.rules.shards import shard_count
from taulib.rundir import layout, locks
from taulib.rundir.records import RunDir
from taulib.rundir.run import RUN_FORMAT

if TYPE_CHECKING:
    from taulib.jsonio import Record

MAX_SHARDS = 1_000_000  # as the plan request's `shards` maximum: one Slurm array index per shard
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_RUN_ENTRIES = {"run.json", "plan.json", "input.json", "locks", "shards", "submissions", "collections", "index",
                "bundles", "cancel.json", "reopen.json", "schema.json", "drive"}
_RUN_GENERATIONS = re.compile(r"(?:cancel|reopen)-[0-9]{1,9}\.json")  # layout.cancel_record, reopen_record


def resolve_plan(request: Record, run_id: str, site: Record | None = None, input_index: Record | None = None
                 ) -> Record:
    """The resolved plan (a pure function of the request, the run id, the site profile merged into the request,
    `site` naming it, and the index of the request's input: no clock, no machine facts)."""
    schema.validate(request, "plan-request", "plan on standard input")
    if "site" in request.get("scheduler", {}):
        raise BadInput("plan on standard input names a site profile (scheduler.site) that was not merged into it")
    try:
        records = input_rules.records(request, input_index)
    except ValueError as exc:
        raise BadInput(f"plan on standard input {exc}") from None
    if "shards" in request and "shard_size" in request:
        raise BadInput("plan on standard input gives both 'shards' and 'shard_size'; give one")
    if "shards" in request and request["shards"] > records:
        raise BadInput(f"plan on standard input asks for {request['shards']} shards of {records} records; every "
                       "shard needs at least one record")
    count = shard_count(records, request.get("shards"), request.get("shard_size"))
    if count > MAX_SHARDS:
        raise BadInput(f"plan on standard input makes {count} shards; a run has at most {MAX_SHARDS} (use a larger "
                       "shard_size)")
    sched = request.get("scheduler", {})
    windows = request.get("windows", {})
    output = request.get("output", {})
    plan = {
        "kind": "tau.plan",
        "schema_version": 1,
        "run_id": run_id,
        "records": records,
        "shard_count": count,
        "shard_size": request.get("shard_size"),
        "command": list(request["command"]),
        "resume": request.get("resume", "never"),
        "scheduler": {"profile": sched.get("profile", executors.DEFAULT),
                      **{name: executors.get(name).section(sched.get(name, {})) for name in executors.EXECUTORS}},
        "output": {"format": output.get("format", "parquet"),
                   "rows_per_partition": output.get("rows_per_partition", defaults.ROWS_PER_PARTITION),
                   "schema": [dict(field) for field in output["schema"]] if "schema" in output else None,
                   **({"tasks": output["tasks"]} if "tasks" in output else {}),  # tau-collect's default --tasks
                   **({"keep_input": list(output["keep_input"])} if "keep_input" in output else {})},
        "windows": {key: windows.get(key, default) for key, default in defaults.WINDOWS.items()},
        "collection": {"allowed_roots": [os.path.normpath(p) for p in
                                         request.get("collection", {}).get("allowed_roots", [])]},
        "env": dict(request.get("env", {})),
        "inherit_env": list(request.get("inherit_env", [])),
        "retry": dict(budget.DEFAULTS, **request.get("retry", {})),
    }
    if request.get("collection", {}).get("group_readable"):  # false is the default: such a plan is as it was
        plan["collection"]["group_readable"] = True
    if input_index is not None:  # a plan without an input is exactly what it was before inputs existed
        plan["input"] = {"path": input_index["path"], "format": input_index["format"],
                         "piece_bytes": input_index["piece_bytes"]}
    if "services" in request:  # a plan without services is exactly what it was before services existed
        plan["services"] = service_rules.resolve(request["services"])
    _resolve_images(request, plan)
    if site is not None:
        plan["site"] = site
    _check_environment(plan)
    _check_output_types(plan["output"]["schema"] or [])
    schema.validate(plan, "plan")
    for name in executors.EXECUTORS:  # each section the plan carries can be submitted, whichever executor runs it
        executors.get(name).check_section(plan["scheduler"][name])
    _check_escalation(plan)
    _check_services(plan)
    return plan




def _resolve_images(request: Record, plan: Record) -> None:
    """The client's image and each service's, pinned (`rules.image.resolve`): a reference without a digest, a
    file without its sha256, a mount a runtime cannot take are refused (65). A plan without images is exactly what
    it was before images existed."""
    named = "image" in request or any("image" in s for s in request.get("services", []))
    if not named and request.get("collection", {}).get("image", "host") == "host":
        return  # nothing to import (the reference grammar compiles a regular expression)
    from taulib.rules import image as image_rules
    from taulib.runtimes import table

    programs = table.programs()
    client = None
    try:
        if "image" in request:
            client = plan["image"] = image_rules.resolve(request["image"], programs)
        for index, (asked, service) in enumerate(zip(request.get("services", []), plan.get("services", []),
                                                     strict=True)):
            if "image" in asked:
                service["image"] = image_rules.resolve(asked["image"], programs, client, f"services[{index}].image")
        if request.get("collection", {}).get("image", "host") != "host":
            if client is None:
                raise ValueError("collection.image 'client' runs the collection in the client's image, but the plan "
                                 "gives the client no image")
            plan["collection"]["image"] = request["collection"]["image"]
    except ValueError as exc:
        raise BadInput(f"plan on standard input: {exc}") from None
    if client is not None and plan.get("input") is not None:  # mounted read-only into the client's container
        problem = image_rules.path_problem(plan["input"]["path"], "the input's real path")
        if problem is not None:
            raise BadInput(f"plan on standard input: {problem} (it is mounted into the client's image)")
    from taulib import runtimes

    for image in ([client] if client else []) + [s["image"] for s in plan.get("services", []) if "image" in s]:
        problem = runtimes.get(image["runtime"]).problem(image)
        if problem is not None:
            raise BadInput(f"plan on standard input: {problem}")


def _check_services(plan: Record) -> None:
    """Services that can run together, whose GPUs fit what each task of the run's executor is given (tau-run(5)
    "Services")."""
    services = plan.get("services")
    if not services:
        return
    problem = service_rules.problem(services, tuple(plan["inherit_env"]))
    if problem is not None:
        raise BadInput(f"plan on standard input: {problem}")
    for name in [*plan["env"], *plan["inherit_env"]]:
        if name in service_rules.DEVICE_VARIABLES:
            raise BadInput(f"plan on standard input names {name!r} in env or inherit_env, which tau sets itself in a "
                           "run with services: each backend gets its own GPUs and the client none", variable=name)
    need = service_rules.gpus_needed(services)
    profile = plan["scheduler"]["profile"]
    given = executors.get(profile).gpus(plan["scheduler"][profile])
    if need > given:
        raise BadInput(f"plan on standard input: its services need {need} GPU(s) per task, but "
                       f"scheduler.{profile}.gpus gives each task {given}; give it at least {need} there",
                       gpus_needed=need, gpus_given=given)


def _check_escalation(plan: Record) -> None:
    """A request retry.escalate grows must be one the run's executor asks for, and a cap must not be below it (a
    growing request never shrinks; tau-run(5) "retry")."""
    from taulib.rules import escalation

    grow = plan["retry"].get("escalate") or {}
    profile = plan["scheduler"]["profile"]
    chosen = executors.get(profile)
    base = chosen.request(plan["scheduler"][profile])
    jobs = chosen.collection_jobs()  # a collection job's request grows too (tau-collect(1) "Tasks")
    collecting = jobs.request(plan) if jobs is not None else {"mem": None, "time": None}
    for key, read in (("mem", escalation.mem_mib), ("time", escalation.time_seconds)):
        if key not in grow and f"max_{key}" not in grow:
            continue
        asked = base[key]
        if asked is None:
            field = chosen.request_fields.get(key)
            what = {"mem": "memory", "time": "time"}[key]
            raise BadInput(f"plan on standard input grows {what} on retry (retry.escalate.{key}) but asks for none: "
                           + (f"set scheduler.{profile}.{field}" if field else
                              f"the {profile} executor asks for no {what}"))
        for what, given in (("it", asked), ("a collection job", collecting[key])):
            if f"max_{key}" in grow and given is not None and read(grow[f"max_{key}"]) < read(given):
                raise BadInput(f"plan on standard input caps {key} at {grow[f'max_{key}']!r} "
                               f"(retry.escalate.max_{key}), below the {given!r} {what} asks for; a grown request "
                               "never shrinks")


def _check_output_types(fields: list[Record]) -> None:
    """Every output.schema type is spelt as Arrow prints it, as a candidate's columns are compared with it
    (`rules.typenames`): a misspelt type would fail every attempt after all its work."""
    if not fields:
        return
    from taulib.rules import typenames

    for index, field in enumerate(fields):
        wrong = typenames.problem(field["type"])
        if wrong is not None:
            raise BadInput(f"plan on standard input gives field {field['name']!r} (output.schema[{index}]) the type "
                           f"{field['type']!r}, which is not an Arrow type name: {wrong}", field=field["name"],
                           type=field["type"])


def _check_environment(plan: Record) -> None:
    """A variable is set by the plan or inherited, never both; PATH is fixed at tau-init and TAU_* are tau's."""
    both = sorted(set(plan["env"]) & set(plan["inherit_env"]))
    if both:
        raise BadInput(f"plan on standard input both sets and inherits {both[0]!r}; give it in env or in "
                       "inherit_env, not both")
    for name in [*plan["env"], *plan["inherit_env"]]:
        if name == "PATH" or name.startswith("TAU_"):
            raise BadInput(f"plan on standard input names {name!r}, which tau sets itself: PATH is fixed when the "
                           "run is created and TAU_* variables are tau's")






def _check_runtimes(plan: Record, cwd: str, path: str, check_image: bool, environ: dict[str, str]) -> None:
    """Each image's runtime program is there (NotFound, 66, naming it); with `check_image`, each image is present
    or can be given by its runtime, checked against its pin, each once (tau-init(1) "The pre-flight")."""
    from taulib import runtimes
    from taulib.lifecycle import containers

    seen: set[str] = set()
    for role, image in containers.images(plan).items():
        program = image["runtime_command"][0]
        try:
            resolve_program(program, cwd, path, None, f"{role}'s runtime {image['runtime']!r}:")
        except NotFound as exc:
            raise NotFound(exc.message, program=program, runtime=image["runtime"]) from None
        if not check_image or containers.key(image) in seen:
            continue
        seen.add(containers.key(image))
        try:
            runtimes.get(image["runtime"]).check(image, environ)
        except runtimes.ImageChanged as exc:
            raise BadInput(f"{role}'s image: {exc.message}") from None
        except runtimes.ImageUnavailable as exc:
            raise NotFound(f"{role}'s image: {exc.message}") from None






def run_id_for(run_dir: str) -> str:
    name = os.path.basename(os.path.abspath(run_dir))
    if not _RUN_ID.match(name):
        raise UsageError(f"run directory name {name!r} must match [A-Za-z0-9][A-Za-z0-9._-]* (it is the run id)")
    return name


def init(run_dir: str, request: object, environ: dict[str, str] | None = None, check_image: bool = False) -> Record:
    if not isinstance(request, dict):
        raise BadInput("plan on standard input must be a JSON object")
    run_id = run_id_for(run_dir)
    site = None
    named = request.get("scheduler", {}).get("site") if isinstance(request.get("scheduler"), dict) else None
    if isinstance(named, str):  # any other value is the schema's to refuse
        from taulib.lifecycle import site as sites

        schema.validate(request, "plan-request", "plan on standard input")
        _, profile, digest = sites.load(named, environ)
        request, site = sites.apply(request, profile), {"name": named, "sha256": digest}
    schema.validate(request, "plan-request", "plan on standard input")
    index = None
    if "input" in request:  # read whole once, before anything is written (tau-run(5) "Input")
        from taulib.inputs import index as inputs

        index = inputs.build(request["input"], request.get("output", {}).get("keep_input", []), run_id,
                             request["input"].get("piece_bytes", input_rules.PIECE_BYTES))
    plan = resolve_plan(request, run_id, site, index)
    cwd = os.getcwd()
    path = (environ if environ is not None else env.current()).get("PATH", os.defpath)
    own = own_environment()
    if plan.get("image") is None:
        environment: Record = {"program": resolve_program(plan["command"][0], cwd, path, own), "path": path,
                               "cwd": cwd}
        check_script(plan["command"], cwd)
    else:  # looked up inside its image, by each attempt's preflight: a login node may have neither
        environment = {"program": plan["command"][0], "path": path, "cwd": cwd}
    if plan.get("services"):
        environment["services"] = {service["name"]: preflight.service_programs(service, cwd, path, own)
                                   for service in plan["services"]}
    _check_runtimes(plan, cwd, path, check_image, environ if environ is not None else env.current())
    # a plan that can never be submitted from here is refused now, not at its first tau-submit
    executors.get(plan["scheduler"]["profile"]).preflight(plan, os.path.abspath(run_dir), sys.executable)
    plan_bytes = jsonio.canonical(plan)
    plan_sha = jsonio.sha256_hex(plan_bytes)
    _refuse_foreign_directory(run_dir)
    with RunDir(run_dir, create=True) as folder, locks.hold(folder, "run"):
        existing = folder.read(layout.RUN, "tau.run")
        if existing is not None:
            if existing["plan"]["sha256"] != plan_sha:
                raise Conflict(f"run {run_id!r} already exists with a different plan; choose another run "
                               "directory", run_dir=folder.path, plan_sha256=existing["plan"]["sha256"])
            stored = folder.read_bytes(layout.PLAN)
            if stored is None or jsonio.sha256_hex(stored) != plan_sha:  # as every command that opens the run
                raise Conflict(f"plan.json of run {run_id!r} does not match the digest in run.json",
                               run_dir=folder.path)
            return _summary(folder, existing, plan, created=False)
        folder.publish_bytes(layout.PLAN, plan_bytes)
        failpoints.hit("init.plan_written")
        input_ref = None
        if index is not None:  # replaced by a re-run after a crash: the input is read again, the newest stands
            index_bytes = jsonio.canonical(index)
            folder.replace_bytes(layout.INPUT, index_bytes)
            input_ref = {"path": layout.INPUT, "sha256": jsonio.sha256_hex(index_bytes)}
            failpoints.hit("init.input_written")
        folder.make_folders(layout.SHARDS)
        if plan["output"]["schema"] is not None and folder.read(layout.SCHEMA, "tau.output-schema") is None:
            # declared: every candidate must have exactly these columns, the kept input columns first (a re-run
            # after a crash keeps the first)
            kept = index["keep"] if index is not None and plan["output"].get("keep_input") else []
            folder.publish(layout.SCHEMA, {"kind": "tau.output-schema", "schema_version": 1, "run_id": run_id,
                                           "fields": [*kept, *plan["output"]["schema"]], "fixed_by": None,
                                           "fixed_at": jsonio.now_rfc3339()})
        failpoints.hit("init.shards_written")
        record = {"kind": "tau.run", "schema_version": 1, "run_id": run_id, "created_at": jsonio.now_rfc3339(),
                  "plan": {"path": layout.PLAN, "sha256": plan_sha}, "shard_count": plan["shard_count"],
                  "run_format": RUN_FORMAT, "tau_version": __version__, "environment": environment}
        if input_ref is not None:
            record["input"] = input_ref
        folder.publish(layout.RUN, record)
        return _summary(folder, record, plan, created=True)


def _refuse_foreign_directory(run_dir: str) -> None:
    try:
        names = {n for n in os.listdir(run_dir) if not atomic.is_temp(n)}  # a crashed tau-init's debris is ours
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise Conflict(f"{run_dir!r} exists and is not a folder") from None
    if any(n not in _RUN_ENTRIES and not _RUN_GENERATIONS.fullmatch(n) for n in names):
        raise Conflict(f"{run_dir!r} exists and holds files that are not a tau run; choose an empty or new "
                       "folder", run_dir=os.path.abspath(run_dir))


def _summary(folder: RunDir, record: Record, plan: Record, created: bool) -> Record:
    return {"run_id": record["run_id"], "run_dir": folder.path, "created": created,
            "plan_sha256": record["plan"]["sha256"], "records": plan["records"],
            "shard_count": plan["shard_count"], "scheduler": plan["scheduler"]["profile"],
            "program": (record.get("environment") or {}).get("program"),
            "cwd": (record.get("environment") or {}).get("cwd")}
