"""share/schemas and taulib.schema: valid Draft 2020-12, and tau's small validator agrees with `jsonschema`."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from helpers import module_workspace, as_format_1, complete_run, init_run, plan, tau, wait_settled
from taulib import jsonio, schema
from taulib.rundir.records import RunDir, schema_of

SCHEMA_DIR = Path(str(schema.folder()))  # taulib/schemas, a link to share/schemas in the checkout
ALL = sorted(p.name.removesuffix(".schema.json") for p in SCHEMA_DIR.glob("*.schema.json"))
RECORDS = [name for name in ALL if name != "common"]


def _raw(name: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())


REGISTRY = Registry().with_resources(
    (_raw(name)["$id"], Resource.from_contents(_raw(name), default_specification=DRAFT202012)) for name in ALL)
VALIDATORS = {name: Draft202012Validator(_raw(name), registry=REGISTRY) for name in RECORDS}


def reference_valid(instance: object, name: str) -> bool:
    return VALIDATORS[name].is_valid(instance)


def agree(instance: object, name: str) -> bool:
    """Both validators' verdict, asserting they agree."""
    ours = schema.is_valid(instance, name)
    theirs = reference_valid(instance, name)
    assert ours == theirs, (
        f"taulib.schema says {ours}, jsonschema says {theirs} for {name}: {json.dumps(instance)[:400]}\n"
        f"jsonschema: {[e.message for e in VALIDATORS[name].iter_errors(instance)][:3]}")
    return ours


# -- the schemas themselves -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL)
def test_every_schema_is_a_valid_draft_2020_12_schema(name):
    raw = _raw(name)
    assert raw["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert raw["$id"] == f"https://tau.invalid/schemas/{name}.schema.json"
    Draft202012Validator.check_schema(raw)


@pytest.mark.parametrize("name", ALL)
def test_every_schema_uses_only_keywords_taulib_schema_checks(name):
    assert schema.load(name) == _raw(name)


def test_every_reference_resolves_in_the_registry():
    def refs(node):
        if isinstance(node, dict):
            if "$ref" in node:
                yield node["$ref"]
            for value in node.values():
                yield from refs(value)
        elif isinstance(node, list):
            for value in node:
                yield from refs(value)

    for name in ALL:
        resolver = REGISTRY.resolver(base_uri=_raw(name)["$id"])
        for ref in refs(_raw(name)):
            assert resolver.lookup(ref).contents is not None, (name, ref)


# -- samples from a real run ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """A real completed run (with a retried shard and a collection) and a run observed while live.

    `files`: (run folder, record file) of every record they wrote; `by_name`: schema name -> valid instances,
    their records plus the documents that travel on pipes (observations, the plan request, the collection result).
    """
    ws = module_workspace(tmp_path_factory, "schema")
    by_name: dict[str, list] = {name: [] for name in RECORDS}

    run_dir = complete_run(ws, "run", fail_first=("shard-00001",))
    proc = tau("tau-collect", str(run_dir), "--destination", str(ws / "out"))
    assert proc.returncode == 0, proc.stderr
    # a collection in tasks: its task records (tau-collect --tasks, local worker processes)
    proc = tau("tau-collect", str(run_dir), "--destination", str(ws / "out-tasks"), "--rows-per-partition", "7",
               "--tasks", "2")
    assert proc.returncode == 0, proc.stderr
    by_name["collection-result"].append(json.loads((ws / "out" / "_tau_collection.json").read_bytes()))
    proc = tau("tau-bundle-seal", str(ws / "out"), "--generation", "g1", "--run", run_dir.name)
    assert proc.returncode == 0, proc.stderr
    by_name["bundle-manifest"].append(json.loads((ws / "out" / ".tau" / "bundles" / "g1.json").read_bytes()))
    from taulib.bundle import where

    by_name["bundle-ref"].append(where.record(str(run_dir), "g1", "https://acct.blob.core.windows.net/bundles/run",
                                              json.loads(proc.stdout)["manifest_sha256"], "shard-00000",
                                              "attempt-0001"))

    # observations with live attempts: hold each attempt a moment after it marks itself running
    live = init_run(ws, "live", records=20, shards=2)
    assert tau("tau-submit", str(live), env={"TAU_FAILPOINTS": "attempt.running=delay:1"}).returncode == 0
    seen = tau("tau-observe", str(live))
    assert seen.returncode == 0, seen.stderr
    observations = json.loads(seen.stdout)
    assert observations["attempts"], observations
    by_name["observations"].append(observations)
    wait_settled(live)
    by_name["observations"].append(json.loads(tau("tau-observe", str(live)).stdout))
    drove = tau("tau-drive", str(live), "--once")  # the drive record: its cycles, what was told
    assert drove.returncode == 0 and (live / "drive" / "state.json").exists(), drove.stderr
    # a stop request (tau-cancel --attempt writes it for a live attempt): written by the same function
    from taulib.lifecycle import client
    from taulib.rundir import state
    from taulib.rundir.run import Run

    with Run(str(live)) as opened:
        newest = state.latest_attempt(opened, "shard-00000")
        assert newest is not None
        client.stop_record(opened, newest, "stall", "stalled: no progress for 1900s", None)

    # cancellations: of one shard, then of the whole run
    cancelled = init_run(ws, "cancelled", records=20, shards=2)
    assert tau("tau-cancel", str(cancelled), "--shard", "shard-00000").returncode == 0
    assert tau("tau-cancel", str(cancelled)).returncode == 0
    # the lift of the run's cancellation, then the shard's (tau-retry --reopen), and the shard cancelled again
    assert tau("tau-retry", str(cancelled), "--reopen").returncode == 0
    assert tau("tau-retry", str(cancelled), "--shard", "shard-00000", "--reopen").returncode == 0
    assert tau("tau-cancel", str(cancelled), "--shard", "shard-00000").returncode == 0
    assert (cancelled / "shards/shard-00000/cancel-2.json").exists()
    # a deferral, as tau-submit and tau-retry keep it when a scheduler's limits leave no room (Slurm's): written by
    # the same function, under the submit lock
    from taulib.lifecycle import submission
    from taulib.rundir import locks
    from taulib.rundir.run import Run

    with Run(str(cancelled)) as opened, locks.hold(opened.dir, "submit"):
        submission.record_deferral(opened, "initial", 2, "MaxSubmitJobs=250 of user root's association (account "
                                   "root) (250 queued)", ["association and QOS limits (sacctmgr: access denied)"])

    # a run made by an earlier version of tau (format 1): a shard.json per shard, task lists, the attempts tau-submit
    # published, and the whole-run sealed-shard index that version's tau-reconcile kept
    old = as_format_1(init_run(ws, "old", records=20, shards=2))
    assert tau("tau-submit", str(old)).returncode == 0
    wait_settled(old)
    legacy = old / "index" / "sealed.json"
    legacy.write_bytes(jsonio.canonical({"kind": "tau.sealed-index", "schema_version": 1, "run_id": "old",
                                         "shard_count": 2, "revision": 1, "updated_at": jsonio.now_rfc3339(),
                                         "ordinals": "1,1", "durations": "0,0"}))
    legacy.chmod(0o600)

    # runs with services: readiness version 2, endpoints.json, a result naming a leftover process, and one whose
    # service never got ready (result.json's error_code)
    from services_fixtures import services_plan

    served = init_run(ws, "served", plan_doc=services_plan(ws / "pids", backends=1, client=("--setsid",)))
    timed_out = init_run(ws, "timed-out", plan_doc=services_plan(ws / "pids-2", backends=1, server=("--never-ready",),
                                                                service={"start_timeout": 1}))
    for root in (served, timed_out):
        assert tau("tau-submit", str(root)).returncode == 0
        wait_settled(root)

    # a run over a dataset that keeps an input column: input.json, each attempt's input-pieces.json
    from input_fixtures import request as input_request
    from input_fixtures import rows as input_rows
    from input_fixtures import write as write_input

    over_request = input_request(write_input(ws / "input", "jsonl", input_rows(20), files=2), shards=2)
    over = init_run(ws, "over", plan_doc=over_request)
    assert tau("tau-submit", str(over)).returncode == 0
    wait_settled(over)
    by_name["plan-request"].append(over_request)

    files = []
    for root in (run_dir, live, cancelled, old, served, timed_out, over):
        for dirpath, _, names in os.walk(root):
            files += [(str(root), os.path.join(dirpath, n)) for n in names if n.endswith(".json")]
    for _, path in files:
        record = json.loads(Path(path).read_bytes())
        by_name[schema_of(record["kind"])].append(record)

    # workload status snapshots: what tau-observe --kubernetes printed for each scene (test_cli_observe_kubernetes)
    golden = Path(__file__).resolve().parent / "golden" / "kubernetes"
    by_name["workload-status"] += [json.loads(p.read_bytes()) for p in sorted(golden.glob("*.json"))]
    by_name["tau-v1alpha1-status"] += by_name["workload-status"]  # Tau's own contract holds of every snapshot

    by_name["plan-request"] += [
        plan(),
        plan(fail_first=("shard-00001",)),
        {"records": 10, "shard_size": 3, "command": ["/bin/true"]},
        {"records": 5, "shards": 5, "command": ["x"], "resume": "always", "env": {"MY_VAR": "1"},
         "collection": {"allowed_roots": ["/data"]},
         "scheduler": {"profile": "slurm", "slurm": {"partition": "gpu", "mem": "16G", "time": "1-00:00:00",
                                                     "extra": ["--gres=gpu:1", "--exclusive"]}}},
    ]
    by_name["plan-request"].append(  # an image and a site profile named
        {"records": 4, "shards": 2, "command": ["python3", "/w/c.py"], "scheduler": {"site": "lab"},
         "image": {"ref": "localhost/c@sha256:" + "ab" * 32, "runtime_args": ["--x"],
                   "mounts": [{"host": "/data", "container": "/in"}, {"host": "/o", "container": "/o",
                                                                      "writable": True}]},
         "collection": {"image": "client"}})
    # a site profile as a team writes one (tau-site), and as tau-site show reads it back
    sites = ws / "sites"
    sites.mkdir()
    (sites / "lab.json").write_text(json.dumps({
        "schema_version": 1, "description": "the lab's GPU nodes",
        "scheduler": {"profile": "slurm", "slurm": {"account": "lab", "partition": "gpu"}},
        "image": {"runtime": "podman", "runtime_command": ["podman", "--runtime", "/usr/sbin/runc"],
                  "runtime_args": ["--ulimit", "nproc=1024:1024"], "mounts": [{"host": "/data", "container": "/data"}]},
        "collection": {"allowed_roots": ["/data"]}}))
    shown = tau("tau-site", "show", "lab", env={"TAU_SITE_PATH": str(sites)})
    assert shown.returncode == 0, shown.stderr
    by_name["site"].append(json.loads(shown.stdout)["profile"])
    # the run status, a document on pipes: each run's as tau-status prints it (a collection, a cancellation and a
    # deferral, format 1, services), and the one tau-drive's result carries
    by_name["status"] += [json.loads(tau("tau-status", str(root)).stdout)
                          for root in (run_dir, cancelled, old, served, timed_out, over)]
    by_name["status"].append(json.loads(drove.stdout)["status"])
    return {"files": files, "by_name": by_name}


@pytest.fixture(scope="module")
def samples(corpus) -> dict[str, list]:
    return corpus["by_name"]


@pytest.mark.slow
def test_every_record_file_of_a_completed_run_validates_with_both_validators(corpus):
    kinds = set()
    for root, path in corpus["files"]:
        rel = os.path.relpath(path, root)
        with RunDir(root) as run_dir:
            record = run_dir.read(rel)  # taulib: schema, canonical form, ownership and mode
        assert record is not None
        name = schema_of(record["kind"])
        kinds.add(name)
        assert reference_valid(record, name), (rel, [e.message for e in VALIDATORS[name].iter_errors(record)])
    assert kinds >= {"run", "plan", "shard", "sealed-index", "sealed-segment", "attempt", "readiness", "observation",
                     "result", "manifest", "endpoints",
                     "winner", "submission-plan", "submission-status", "local-supervisor", "local-task",
                     "collection-plan", "collection-status", "input-index", "input-pieces"}


def test_there_is_a_real_valid_sample_for_every_record_schema(samples):
    for name in RECORDS:
        assert samples[name], f"no sample for {name}"
        for instance in samples[name]:
            assert agree(instance, name) is True, name


# contracts open by design: Tau's v1alpha1 status, which tau's own additions extend (tau-status(7))
OPEN = {"tau-v1alpha1-status"}


def _invalid_variants(name: str, valid: dict) -> list[tuple[str, object]]:
    raw = _raw(name)
    out: list[tuple[str, object]] = [("not an object", []), ("a string", "x"), ("null", None),
                                     ("empty object", {})]
    if name not in OPEN:
        out.append(("unknown property", dict(valid, zz_unknown=1)))
    if name in OPEN:
        out += [("tau's lifecycle word as Tau's state", dict(valid, state="running")),
                ("another schema version", dict(valid, schemaVersion="v1")),
                ("a kind Tau has not", dict(valid, kind="CronJob")),
                ("a phase status Tau has not", dict(valid, phases=[{"name": "x", "status": "ok", "detail": ""}])),
                ("a workload phase Tau has not", dict(valid, workloads=[dict(
                    name="w", phase="Evicted", admitted=True, nominatedClusters=[], admissionChecks=[])])),
                ("a pod's ready count that is not r/t", dict(valid, pods=[dict(
                    name="p", phase="Running", ready="1", restarts=0, conditions=[], containers=[])]))]
    for key in raw.get("required", []):
        out.append((f"without {key}", {k: v for k, v in valid.items() if k != key}))
    if "kind" in valid:
        out.append(("another kind", dict(valid, kind="tau.other")))
        out.append(("kind of wrong type", dict(valid, kind=1)))
    if "schema_version" in valid:
        out.append(("schema version 2", dict(valid, schema_version=2)))
        out.append(("schema version true", dict(valid, schema_version=True)))
    for key in ("run_id", "shard_id", "attempt_id"):
        if isinstance(valid.get(key), str):
            out.append((f"{key} breaks its pattern", dict(valid, **{key: "../" + valid[key]})))
            out.append((f"{key} is a number", dict(valid, **{key: 7})))
    for key in ("revision", "ordinal"):
        if key in valid:
            out.append((f"{key} is zero", dict(valid, **{key: 0})))
            out.append((f"{key} is a float", dict(valid, **{key: 1.5})))
            out.append((f"{key} is a boolean", dict(valid, **{key: True})))
    for key in ("created_at", "updated_at", "observed_at", "published_at", "completed_at", "requested_at",
                "fixed_at"):
        if isinstance(valid.get(key), str):
            out.append((f"{key} without microseconds", dict(valid, **{key: valid[key][:19] + "Z"})))
    if name == "plan-request":
        out.append(("both shards and shard_size", dict(valid, shards=2, shard_size=3)))
        out.append(("neither shards nor shard_size",
                    {k: v for k, v in valid.items() if k not in ("shards", "shard_size")}))
        out.append(("lowercase env name", dict(valid, env={"lower": "x"})))
        out.append(("records as a string", dict(valid, records="10")))
    return out


@pytest.mark.parametrize("name", RECORDS)
def test_invalid_samples_are_refused_by_both_validators(samples, name):
    valid = samples[name][0]
    variants = _invalid_variants(name, valid)
    assert len(variants) >= 6
    for label, instance in variants:
        assert agree(instance, name) is False, f"{name}: {label} was accepted"
    if name in OPEN:
        assert agree(dict(valid, zz_unknown=1), name) is True  # an addition leaves the contract whole
        return
    with pytest.raises(schema.SchemaViolation) as err:
        schema.validate(dict(valid, zz_unknown=1), name, "sample")
    assert err.value.code == 65
    assert f"sample does not match schema {name!r} at /: unexpected property 'zz_unknown'" == err.value.message


# -- property: both validators agree on mutated records -------------------------------------------------------

OTHER_VALUES = [None, True, False, 0, -1, 7, 1.5, "", "x", "tau.other", "ZZ top", [], [1], {}, {"a": 1}]


def _containers(node: object, path: tuple = ()) -> list[tuple]:
    out = [path] if isinstance(node, (dict, list)) else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _containers(value, path + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _containers(value, path + (index,))
    return out


def _leaves(node: object, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict):
        return [p for key, value in node.items() for p in _leaves(value, path + (key,))]
    if isinstance(node, list):
        return [p for index, value in enumerate(node) for p in _leaves(value, path + (index,))]
    return [path] if path else []


def _at(node: object, path: tuple) -> object:
    for part in path:
        node = node[part]  # type: ignore[index]
    return node


def _set(node: object, path: tuple, value: object) -> None:
    _at(node, path[:-1])[path[-1]] = value  # type: ignore[index]


@st.composite
def mutated(draw, samples: dict) -> tuple[str, object, str]:
    name = draw(st.sampled_from(RECORDS))
    record = copy.deepcopy(draw(st.sampled_from(samples[name])))
    how = draw(st.sampled_from(["drop", "add", "retype", "break-pattern"]))
    if how == "drop":
        dicts = [p for p in _containers(record) if isinstance(_at(record, p), dict) and _at(record, p)]
        path = draw(st.sampled_from(dicts))
        node = _at(record, path)
        del node[draw(st.sampled_from(sorted(node)))]
    elif how == "add":
        dicts = [p for p in _containers(record) if isinstance(_at(record, p), dict)]
        path = draw(st.sampled_from(dicts))
        key = draw(st.sampled_from(["zz_unknown", "kind", "state", "revision", "path", "X_Y", "lower"]))
        _at(record, path)[key] = draw(st.sampled_from(OTHER_VALUES))
    elif how == "retype":
        path = draw(st.sampled_from(_leaves(record)))
        old = _at(record, path)
        candidates = [v for v in OTHER_VALUES if type(v) is not type(old)]
        _set(record, path, draw(st.sampled_from(candidates)))
    else:
        strings = [p for p in _leaves(record) if isinstance(_at(record, p), str)]
        path = draw(st.sampled_from(strings))
        old = _at(record, path)
        new = draw(st.sampled_from([old + "#", "#" + old, "", old.upper(), old + " x", "/" + old, old[:-1],
                                    old.replace("-", "_"), old.replace("0", "a"), "a" * 600]))
        _set(record, path, new)
    return name, record, how


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_both_validators_agree_on_mutated_records(samples, data):
    name, record, how = data.draw(mutated(samples))
    agree(record, name)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_dropping_a_required_top_level_key_or_adding_an_unknown_one_is_always_invalid(samples, data):
    name = data.draw(st.sampled_from(RECORDS))
    record = copy.deepcopy(data.draw(st.sampled_from(samples[name])))
    required = [k for k in _raw(name).get("required", []) if k in record]
    if required and (name in OPEN or data.draw(st.booleans())):
        del record[data.draw(st.sampled_from(required))]
    else:
        record[data.draw(st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)) + "_zz"] = 1
    assert agree(record, name) is False


def test_canonical_bytes_of_every_sample_round_trip(samples):
    for name in RECORDS:
        for instance in samples[name]:
            assert json.loads(jsonio.canonical(instance)) == instance


# -- an unknown key is named where it is, however deep, before a missing required key --------------------------

def _plan_with(**changes: object) -> dict:
    return dict({"records": 4, "shards": 2, "command": ["/bin/true"]}, **changes)


UNKNOWN_KEYS = [
    ("scheduler-without-profile", _plan_with(scheduler={"local": {"max_paralel": 2}}), "/scheduler/local",
     "unexpected property 'max_paralel' (did you mean 'max_parallel'?)"),
    ("scheduler-local", _plan_with(scheduler={"profile": "local", "local": {"max_paralel": 2}}), "/scheduler/local",
     "unexpected property 'max_paralel' (did you mean 'max_parallel'?)"),
    ("scheduler-slurm", _plan_with(scheduler={"slurm": {"partiton": "gpu"}}), "/scheduler/slurm",
     "unexpected property 'partiton' (did you mean 'partition'?)"),
    ("a-required-key-misspelt", _plan_with(scheduler={"profle": "local"}), "/scheduler",
     "unexpected property 'profle' (did you mean 'profile'?)"),
    ("retry-escalate", _plan_with(retry={"escalate": {"memm": 2}}), "/retry/escalate",
     "unexpected property 'memm' (did you mean 'mem'?)"),
    ("output-schema-field", _plan_with(output={"schema": [{"name": "id", "typ": "int64"}]}), "/output/schema/0",
     "unexpected property 'typ' (did you mean 'type'?)"),
    ("top-level-beside-a-missing-command", {"records": 4, "shards": 2, "sharts": 2}, "/",
     "unexpected property 'sharts' (did you mean 'shards'?)"),
    ("nothing-like-it", _plan_with(windows={"colour": 1}), "/windows", "unexpected property 'colour'"),
]


@pytest.mark.parametrize("instance,pointer,message", [c[1:] for c in UNKNOWN_KEYS], ids=[c[0] for c in UNKNOWN_KEYS])
def test_a_nested_unknown_key_is_named_with_its_path_before_a_missing_required_one(instance, pointer, message):
    assert agree(instance, "plan-request") is False
    with pytest.raises(schema.SchemaViolation) as err:
        schema.validate(instance, "plan-request", "plan")
    assert (err.value.code, err.value.details) == (65, {"schema": "plan-request", "pointer": pointer})
    assert err.value.message == f"plan does not match schema 'plan-request' at {pointer}: {message}"


def test_an_unknown_key_inside_the_object_alternative_of_an_any_of_is_named():
    record = {"kind": "tau.output-schema", "schema_version": 1, "run_id": "run",
              "fixed_at": "2024-01-01T00:00:00.000000Z", "fields": [{"name": "id", "type": "int64"}],
              "fixed_by": {"shard_id": "shard-00000", "attempt_id": "attempt-0001", "atempt": 1}}
    assert agree(record, "output-schema") is False
    with pytest.raises(schema.SchemaViolation) as err:
        schema.validate(record, "output-schema", "schema.json")
    assert err.value.message == ("schema.json does not match schema 'output-schema' at /fixed_by: unexpected "
                                 "property 'atempt'")


ALTERNATIVES = {"oneOf": [
    {"type": "null"},
    {"type": "object", "additionalProperties": False, "required": ["local"],
     "properties": {"local": {"type": "object", "additionalProperties": False,
                              "properties": {"max_parallel": {"type": "integer"}}}}},
    {"type": "object", "additionalProperties": False, "required": ["slurm"], "properties": {"slurm": {}}},
]}


@pytest.mark.parametrize("value,expected", [
    ({"local": {"max_paralel": 2}}, ("/local", "unexpected property 'max_paralel' (did you mean 'max_parallel'?)")),
    ({"local": {"max_parallel": "2"}}, ("/local/max_parallel", "expected integer, got string")),
    ({"slurn": {}}, ("", "unexpected property 'slurn'")),  # the first alternative of an object's type
    (3, ("", "expected null, got integer")),
])
def test_of_alternatives_that_all_fail_the_deepest_error_that_is_not_a_mere_type_is_named(value, expected):
    assert schema._validate(value, ALTERNATIVES, ALTERNATIVES, "") == expected
