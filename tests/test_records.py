"""taulib.records follows the schemas: each typed shape has exactly its schema object's keys, the same required
keys, and for each key the Python type of its JSON type (nested shapes checked the same way); a shape that drifts
is reported with the path of the key and both types; and the records of a real local run validate against their
schemas and fit their shapes key by key.

The walk: `drift(annotation, node)` turns a schema node (its `$ref`s resolved into common.schema.json and the
document's own `$defs`) into alternatives (str, int, float, bool, None, one per Literal value, list of a node, dict
of a node, an object of fixed keys), turns the annotation into the same, and compares them; an object is compared
with its TypedDict key by key. An executor's name is `str` in taulib.records (nothing outside taulib.executors spells
the executors), so an enum of exactly the executors' names expects str.
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Literal, NotRequired, TypedDict

import pytest
from helpers import ROOT, module_workspace, plan, settle, tau, wait_for

from taulib import records, schema
from taulib.executors import EXECUTORS

SCHEMAS = ROOT / "share" / "schemas"
SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
PYTHON = {str: "str", int: "int", float: "float", bool: "bool", type(None): "None"}


def load(doc: str) -> dict:
    return json.loads((SCHEMAS / doc).read_text(encoding="utf-8"))


def pointer(doc: str, path: str) -> dict:
    """The node at JSON pointer `path` (`/properties/attempts/items`) of schema file `doc`."""
    node = load(doc)
    for part in filter(None, path.split("/")):
        node = node[part]
    return node


def resolve(node: dict, doc: str) -> tuple[dict, str]:
    """Follow `$ref`s (`common.schema.json#/$defs/x`, `#/$defs/v1`) to the node they name, and its file."""
    while "$ref" in node:
        target, _, path = node["$ref"].partition("#")
        doc = target or doc
        node = pointer(doc, path)
    return node, doc


def is_typeddict(tp: object) -> bool:
    return isinstance(tp, type) and typing.is_typeddict(tp)


# -- what a schema node allows, and what an annotation says -----------------------------------------------------------
# An alternative is ("str",) ... ("None",), ("literal", type name, value), ("list", item), ("dict", value) or
# ("object", node-or-TypedDict); for a schema the item is (node, file), for an annotation a type.

def schema_alternatives(node: dict, doc: str) -> list[tuple]:
    node, doc = resolve(node, doc)
    if "const" in node:
        return [("literal", type(node["const"]).__name__, node["const"])]
    if "enum" in node:
        if sorted(node["enum"]) == sorted(EXECUTORS):
            return [("str",)]  # taulib.records.ExecutorName
        return [("literal", type(v).__name__, v) for v in node["enum"]]
    choices = node.get("anyOf", node.get("oneOf"))
    if choices is not None and "properties" not in node:
        return [alt for choice in choices for alt in schema_alternatives(choice, doc)]
    kinds = node.get("type", "object" if "properties" in node else None)
    if isinstance(kinds, list):
        return [alt for kind in kinds for alt in schema_alternatives({**node, "type": kind}, doc)]
    if kinds in SCALARS:
        return [(SCALARS[kinds],)]
    if kinds == "array":
        return [("list", (node["items"], doc))]
    if kinds == "object" and "properties" in node:
        return [("object", (node, doc))]
    if kinds == "object":
        free = node.get("additionalProperties")
        patterns = list(node.get("patternProperties", {}).values())
        values = [free] if isinstance(free, dict) else patterns
        assert len(values) == 1, f"{doc}: an object of neither fixed properties nor one kind of free key: {node}"
        return [("dict", (values[0], doc))]
    raise AssertionError(f"{doc}: a schema node the walk cannot type: {node}")


def annotation_alternatives(tp: object) -> list[tuple]:
    origin = typing.get_origin(tp)
    if origin in (NotRequired, typing.Required):
        return annotation_alternatives(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return [alt for arg in typing.get_args(tp) for alt in annotation_alternatives(arg)]
    if origin is Literal:
        return [("literal", type(v).__name__, v) for v in typing.get_args(tp)]
    if origin is list:
        return [("list", typing.get_args(tp)[0])]
    if origin is dict:
        key, value = typing.get_args(tp)
        assert key is str, f"a JSON object's keys are str, not {key}"
        return [("dict", value)]
    if is_typeddict(tp):
        return [("object", tp)]
    if tp in PYTHON:
        return [(PYTHON[tp],)]
    raise AssertionError(f"an annotation the walk cannot compare with a schema: {tp!r}")


def describe(alternatives: list[tuple]) -> str:
    words = []
    for alt in alternatives:
        if alt[0] == "literal":
            words.append(f"Literal[{alt[2]!r}]")
        elif alt[0] in ("list", "dict"):
            words.append(f"{alt[0]}[...]")
        elif alt[0] == "object":
            words.append("an object of fixed keys" if isinstance(alt[1], tuple) else alt[1].__name__)
        else:
            words.append(alt[0])
    return " | ".join(sorted(words))


def drift(tp: object, node: dict, doc: str, where: str, seen: set | None = None) -> list[str]:
    """Every way annotation `tp` differs from schema node `node` of file `doc`, each a line naming its key path
    `where`; the TypedDicts compared are added to `seen`."""
    want, have = schema_alternatives(node, doc), annotation_alternatives(tp)
    flat = {"str", "int", "float", "bool", "None", "literal"}
    if {a for a in want if a[0] in flat} != {a for a in have if a[0] in flat} or \
            [a[0] for a in want if a[0] not in flat] != [a[0] for a in have if a[0] not in flat]:
        return [f"{where}: the schema says {describe(want)}, the shape says {describe(have)}"]
    problems = []
    pairs = zip([a for a in want if a[0] not in flat], [a for a in have if a[0] not in flat], strict=True)
    for (kind, (sub, subdoc)), (_, inner) in pairs:
        if kind == "object":
            problems += object_drift(inner, sub, subdoc, where, seen)
        else:
            problems += drift(inner, sub, subdoc, where + ("[]" if kind == "list" else "{}"), seen)
    return problems


def object_drift(td: type, node: dict, doc: str, where: str, seen: set | None = None) -> list[str]:
    """How TypedDict `td` differs from an object of fixed properties: its keys, its required keys, each key's type."""
    if seen is not None:
        seen.add(td)
    for choice in node.get("oneOf", []) + node.get("anyOf", []):  # beside properties: which keys must be there
        assert set(choice) == {"required"}, f"{where}: a oneOf beside properties that is more than required keys"
    hints = typing.get_type_hints(td, include_extras=True)
    properties = node["properties"]
    problems = []
    if extra := sorted(set(hints) - set(properties)):
        problems.append(f"{where}: {td.__name__} has keys the schema lacks: {', '.join(extra)}")
    if lacking := sorted(set(properties) - set(hints)):
        problems.append(f"{where}: {td.__name__} lacks the schema's keys: {', '.join(lacking)}")
    required = set(node.get("required", []))
    if td.__required_keys__ != required:
        problems.append(f"{where}: {td.__name__} requires {sorted(td.__required_keys__)}, the schema requires "
                        f"{sorted(required)}")
    for key in sorted(set(hints) & set(properties)):
        problems += drift(hints[key], properties[key], doc, f"{where}.{key}", seen)
    return problems


# -- every shape against its schema ---------------------------------------------------------------------------------

SHAPES = {  # a shape of taulib.records -> (its schema file, the pointer to its node there)
    "Plan": ("plan.schema.json", ""),
    "Attempt": ("attempt.schema.json", ""),
    "SubmissionPlan": ("submission-plan.schema.json", ""),
    "SubmissionStatus": ("submission-status.schema.json", ""),
    "Observations": ("observations.schema.json", ""),
    "Observation": ("observations.schema.json", "/properties/attempts/items"),
    "Readiness": ("readiness.schema.json", ""),
    "ReadinessV1": ("readiness.schema.json", "/$defs/v1"),
    "ReadinessV2": ("readiness.schema.json", "/$defs/v2"),
    "CollectionPlan": ("collection-plan.schema.json", ""),
    "Winner": ("winner.schema.json", ""),
    "Ref": ("common.schema.json", "/$defs/ref"),
    "SchedulerIdentity": ("common.schema.json", "/$defs/scheduler_identity"),
    "Windows": ("common.schema.json", "/$defs/windows"),
    "Service": ("common.schema.json", "/$defs/service"),
    "ServiceReady": ("common.schema.json", "/$defs/service_ready"),
    "UsageFigures": ("common.schema.json", "/$defs/usage_figures"),
    "MissingShard": ("common.schema.json", "/$defs/missing_shards/items"),
    "Escalate": ("common.schema.json", "/$defs/retry/properties/escalate"),
    "Format": ("common.schema.json", "/$defs/format"),
    "ObservedState": ("common.schema.json", "/$defs/observed_state"),
}


def check(name: str, seen: set | None = None) -> list[str]:
    doc, path = SHAPES[name]
    return drift(getattr(records, name), pointer(doc, path), doc, name, seen)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_shape_has_its_schema_objects_keys_required_keys_and_types(name):
    problems = check(name)
    assert not problems, f"taulib.records.{name} drifts from its schema:\n" + "\n".join(problems)


def test_every_typed_dict_of_the_module_is_reached_by_a_check():
    seen: set[type] = set()
    for name in SHAPES:
        check(name, seen)
    declared = {v for v in vars(records).values() if is_typeddict(v) and v.__module__ == records.__name__}
    assert declared - seen == set(), f"shapes no check reaches: {sorted(t.__name__ for t in declared - seen)}"


def test_the_readiness_union_is_version_1_then_version_2_as_the_schemas_one_of_is():
    assert typing.get_args(records.Readiness) == (records.ReadinessV1, records.ReadinessV2)
    assert [load("readiness.schema.json")["$defs"][v]["properties"]["schema_version"]["const"] for v in ("v1", "v2")] \
        == [typing.get_args(typing.get_type_hints(t)["schema_version"])[0] for t in typing.get_args(records.Readiness)]


# -- a drift is caught, and said plainly ----------------------------------------------------------------------------

class WinnerWithAnExtraKey(records.Winner):
    elected_by: str


class RefWithAWrongType(TypedDict):
    path: str
    sha256: int


class WindowsAllRequired(TypedDict):
    accounting_lag_seconds: int
    heartbeat_seconds: int
    preemption_seconds: int
    progress_stall_seconds: int | None
    stall_action: Literal["report", "stop"]
    stall_seconds: int
    submission_visibility_seconds: int


TerminalWithAClassificationMissing = TypedDict("TerminalWithAClassificationMissing", {
    "classification": Literal["succeeded", "failed"],
    "code": NotRequired[Literal["image_changed", "input_changed", "input_unreadable"]],
    "exit_code": int | None, "reason": str})


def test_a_key_the_schema_lacks_is_reported_with_the_shapes_name():
    assert drift(WinnerWithAnExtraKey, load("winner.schema.json"), "winner.schema.json", "Winner") == \
        ["Winner: WinnerWithAnExtraKey has keys the schema lacks: elected_by",
         "Winner: WinnerWithAnExtraKey requires ['attempt_id', 'elected_by', 'kind', 'manifest', 'ordinal', "
         "'published_at', 'result', 'run_id', 'schema_version', 'shard_id'], the schema requires ['attempt_id', "
         "'kind', 'manifest', 'ordinal', 'published_at', 'result', 'run_id', 'schema_version', 'shard_id']"]


def test_a_wrong_type_a_wrong_required_set_and_a_wrong_literal_are_reported_at_their_key():
    node = pointer("common.schema.json", "/$defs/ref")
    assert drift(RefWithAWrongType, node, "common.schema.json", "Ref") == \
        ["Ref.sha256: the schema says str, the shape says int"]
    node = pointer("common.schema.json", "/$defs/windows")
    assert drift(WindowsAllRequired, node, "common.schema.json", "Windows") == [
        "Windows: WindowsAllRequired requires ['accounting_lag_seconds', 'heartbeat_seconds', 'preemption_seconds', "
        "'progress_stall_seconds', 'stall_action', 'stall_seconds', 'submission_visibility_seconds'], the schema "
        "requires ['accounting_lag_seconds', 'preemption_seconds', 'submission_visibility_seconds']"]
    node = pointer("attempt.schema.json", "/properties/terminal")
    problems = drift(TerminalWithAClassificationMissing | None, node, "attempt.schema.json", "Attempt.terminal")
    assert len(problems) == 1 and problems[0].startswith("Attempt.terminal.classification: the schema says ") \
        and "Literal['fenced']" in problems[0] and "Literal['fenced']" not in problems[0].split("the shape says")[1]


def test_a_fixed_object_typed_as_a_free_dict_or_an_optional_typed_as_required_is_reported():
    node = pointer("attempt.schema.json", "/properties/scheduler")
    assert drift(dict[str, str], node, "attempt.schema.json", "Attempt.scheduler") == \
        ["Attempt.scheduler: the schema says an object of fixed keys, the shape says dict[...]"]
    node = pointer("attempt.schema.json", "/properties/started_at")
    assert drift(str, node, "attempt.schema.json", "Attempt.started_at") == \
        ["Attempt.started_at: the schema says None | str, the shape says str"]


# -- real records of a local run: valid, and of their shapes --------------------------------------------------------

def fits(value: object, alt: tuple) -> bool:
    """Whether a JSON value is of one scalar alternative (a number may be written as an integer; a bool is no
    number)."""
    if alt[0] == "None":
        return value is None
    if alt[0] == "literal":
        return type(value).__name__ == alt[1] and value == alt[2]
    if alt[0] == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return type(value).__name__ == alt[0]


def alternative_drift(value: object, alt: tuple, where: str) -> list[str]:
    kind = alt[0]
    if kind == "object":
        return record_drift(value, alt[1], where) if isinstance(value, dict) else \
            [f"{where}: {value!r} is not an object"]
    if kind == "list":
        return [p for k, v in enumerate(value) for p in value_drift(v, alt[1], f"{where}[{k}]")] \
            if isinstance(value, list) else [f"{where}: {value!r} is not a list"]
    if kind == "dict":
        return [p for k, v in value.items() for p in value_drift(v, alt[1], f"{where}[{k!r}]")] \
            if isinstance(value, dict) else [f"{where}: {value!r} is not an object"]
    return [] if fits(value, alt) else [f"{where}: {value!r} is not {describe([alt])}"]


def value_drift(value: object, tp: object, where: str) -> list[str]:
    """Every way a JSON value differs from annotation `tp` (a key a TypedDict lacks or requires, a wrong type)."""
    alternatives = annotation_alternatives(tp)
    problems = [alternative_drift(value, alt, where) for alt in alternatives]
    if not all(problems):
        return []
    if len(alternatives) == 1:
        return problems[0]
    shaped = [p for alt, p in zip(alternatives, problems, strict=True) if alt[0] == "object"]
    if len(shaped) == 1 and isinstance(value, dict):
        return shaped[0]
    return [f"{where}: {value!r:.200} is none of {describe(alternatives)}"]


def record_drift(value: dict, td: type, where: str) -> list[str]:
    hints = typing.get_type_hints(td, include_extras=True)
    problems = [f"{where}: {key!r} is not a key of {td.__name__}" for key in sorted(set(value) - set(hints))]
    problems += [f"{where}: {td.__name__}'s key {key!r} is missing"
                 for key in sorted(td.__required_keys__ - set(value))]
    for key in sorted(set(value) & set(hints)):
        problems += value_drift(value[key], hints[key], f"{where}.{key}")
    return problems


def test_the_value_checker_reports_a_wrong_value_a_stray_key_and_a_missing_one():
    winner = {"attempt_id": "attempt-0001", "kind": "tau.winner", "ordinal": "1", "published_at": "t",
              "manifest": {"path": "a", "sha256": "b"}, "result": {"path": "a"}, "run_id": "run",
              "schema_version": 1, "shard_id": "shard-00000", "elected_by": "me"}
    assert record_drift(winner, records.Winner, "winner.json") == [
        "winner.json: 'elected_by' is not a key of Winner", "winner.json.ordinal: '1' is not int",
        "winner.json.result: Ref's key 'sha256' is missing"]
    assert value_drift(True, int, "x") == ["x: True is not int"] and value_drift(3, float, "x") == []
    assert value_drift(1, Literal[True], "x") == ["x: 1 is not Literal[True]"]
    assert value_drift(None, records.Terminal | None, "t") == []
    assert value_drift({"schema_version": 3}, records.Readiness, "r") == \
        ["r: {'schema_version': 3} is none of ReadinessV1 | ReadinessV2"]


@pytest.fixture(scope="module")
def run_records(tmp_path_factory) -> tuple[Path, dict]:
    """A local run of 2 shards (shard-00001 fails), observed while both attempts were live (held by a gate file),
    then settled and collected with --allow-missing; returns its folder and the observations seen while live."""
    ws = module_workspace(tmp_path_factory, "records")
    gate = ws / "gate"
    doc = plan(records=20, shards=2, fail_first=("shard-00001",))
    doc["command"] += ["--wait-for", str(gate)]
    run_dir = ws / "run"
    assert tau("tau-init", str(run_dir), input=json.dumps(doc)).returncode == 0
    assert tau("tau-submit", str(run_dir)).returncode == 0

    def both_live() -> dict | None:
        proc = tau("tau-observe", str(run_dir))
        assert proc.returncode == 0, proc.stderr
        seen = json.loads(proc.stdout)
        return seen if len(seen["attempts"]) == 2 and all(a["queue"] for a in seen["attempts"]) else None

    live = wait_for(both_live, what="both attempts live in the observations")
    gate.touch()
    settle(run_dir)
    proc = tau("tau-collect", str(run_dir), "--destination", str(ws / "dest"), "--allow-missing")
    assert proc.returncode == 0, proc.stderr
    return run_dir, live


RECORDS = [  # (shape, schema name, files in the run directory)
    ("Plan", "plan", "plan.json"),
    ("SubmissionPlan", "submission-plan", "submissions/*/plan.json"),
    ("SubmissionStatus", "submission-status", "submissions/*/status.json"),
    ("Attempt", "attempt", "shards/*/attempts/*/attempt.json"),
    ("Readiness", "readiness", "shards/*/attempts/*/readiness.json"),
    ("Winner", "winner", "shards/*/winner.json"),
    ("CollectionPlan", "collection-plan", "collections/*/plan.json"),
]


@pytest.mark.parametrize(("shape", "name", "files"), RECORDS, ids=[r[0] for r in RECORDS])
def test_the_records_of_a_real_local_run_validate_and_fit_their_shapes(run_records, shape, name, files):
    run_dir, _ = run_records
    paths = sorted(run_dir.glob(files))
    assert paths, f"the run holds no {files}"
    for path in paths:
        record = json.loads(path.read_bytes())
        where = str(path.relative_to(run_dir))
        schema.validate(record, name, where)
        assert value_drift(record, getattr(records, shape), where) == []


def test_the_observations_of_live_attempts_validate_and_fit_their_shapes_view_by_view(run_records):
    _, live = run_records
    schema.validate(live, "observations")
    assert record_drift(live, records.Observations, "observations") == []
    for view in live["attempts"]:
        assert view["queue"] is not None and record_drift(view, records.Observation, view["shard_id"]) == []
