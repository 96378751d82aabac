"""Generated hostile input for every stdin contract (tau-init's plan, tau-reconcile's observations), every plan
field, and the command-line values of the commands that take them: each case either is accepted or is refused
with a documented exit code, exactly one JSON error object, no traceback and the run directory byte-for-byte
unchanged. Run in this process (`conftest.invoke`), so thousands of cases fit in CI; the counts go to the
suite's report."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest
from harness import invoke, misbehaviour, scaled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import CLIENT, PYTHON, snapshot
from taulib import jsonio

pytestmark = pytest.mark.slow

FULL_PLAN = {
    "records": 20, "shards": 2, "command": [PYTHON, CLIENT, "--rows-per-file", "10"],
    "env": {"MY_VALUE": "x"}, "inherit_env": ["HOME"], "resume": "never",
    "retry": {"max_attempts": 3, "max_failed_attempts": 10, "max_failed_fraction": 0.5},
    "scheduler": {"profile": "local", "local": {"max_parallel": 2},
                  "slurm": {"partition": "debug", "collect_partition": "debug", "account": "acct", "qos": "normal",
                            "time": "00:10:00", "mem": "1G", "cpus_per_task": 1, "max_parallel": 2,
                            "extra": ["--comment=tau"]}},
    "output": {"format": "parquet", "rows_per_partition": 30, "schema": [{"name": "id", "type": "int64"}]},
    "windows": {"accounting_lag_seconds": 5, "preemption_seconds": 5, "submission_visibility_seconds": 5,
                "heartbeat_seconds": 30, "stall_seconds": 600},
    "collection": {"allowed_roots": ["/tmp"]},
}

# JSON values of every kind, hostile ones weighted in: huge and negative numbers, NUL and control characters,
# long strings, deep and wide containers
SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 10**15 + 1, 10**16, 1e308, -0.0, 0.5, 1e-300]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(["", "\u0000", "a\u0000b", "../../etc/passwd", "/", "~", "-o", "--help", "x" * 5000,
                     "$(touch /tmp/tau-pwned)", "`id`", "a b", "\n", "local\n", "slurm", "2026-13-01T00:00:00Z",
                     "\ud7ff\ue000", "null", "{}", "shard-00000", "attempt-0001"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)


def paths(doc: object, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indices) in a JSON document, containers included."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += paths(value, prefix + (key,))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out += paths(value, prefix + (index,))
    return out


def mutate(doc: object, path: tuple, how: str, value: object) -> object:
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    last = path[-1]
    if how == "delete":
        del node[last]
    elif how == "add" and isinstance(node, dict):
        node[f"{last}_extra"] = value
    else:
        node[last] = value
    return doc


def bytes_of(doc: object) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


BYTE_EDITS = st.one_of(
    st.tuples(st.just("truncate"), st.floats(min_value=0, max_value=1)),
    st.tuples(st.just("flip"), st.floats(min_value=0, max_value=1), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.floats(min_value=0, max_value=1), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("replace"), st.binary(max_size=64)),
    st.tuples(st.just("wrap"), st.sampled_from([b"[%s]", b"%s%s", b"\xef\xbb\xbf%s", b"%s\x00", b" \n%s\n ",
                                                b'{"a":%s}'])),
)


def edit(data: bytes, how: tuple) -> bytes:
    kind = how[0]
    at = int(len(data) * how[1]) if kind in ("truncate", "flip", "insert") else 0
    if kind == "truncate":
        return data[:at]
    if kind == "flip":
        return data[:at] + bytes([how[2]]) + data[at + 1:]
    if kind == "insert":
        return data[:at] + how[2] + data[at:]
    if kind == "replace":
        return how[1]
    return how[1].replace(b"%s", data)


SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                      HealthCheck.data_too_large], database=None)


# -- tau-init: the plan --------------------------------------------------------------------------------------------

class InitCases:
    """Each case runs tau-init on a fresh directory name in one workspace: a refusal must leave the workspace as it
    was (nothing made); an accepted plan makes exactly that run, which is removed again."""

    def __init__(self, workspace: Path, tally) -> None:
        self.workspace, self.tally, self.n = workspace, tally, 0
        self.before = snapshot(workspace)

    def run(self, label: str, data: bytes) -> None:
        self.n += 1
        target = self.workspace / f"run{self.n}"
        outcome = invoke("tau-init", [str(target)], data)
        if outcome.code == 0:
            problem = None
            summary = json.loads(outcome.out)
            if summary.get("created") is not True or not (target / "run.json").is_file():
                problem = f"accepted but no run was made: {outcome.out[:200]!r}"
            shutil.rmtree(target, ignore_errors=True)
            self.tally.case(label, problem, accepted=True)
        else:
            problem = misbehaviour(outcome)
            if problem is None and snapshot(self.workspace) != self.before:
                problem = f"refused ({outcome.code}) but the workspace changed: {sorted(os.listdir(self.workspace))}"
                shutil.rmtree(target, ignore_errors=True)
            self.tally.case(label, problem)


def test_every_plan_field_replaced_deleted_or_added_to_is_accepted_or_refused_cleanly(workspace, tally):
    cases = InitCases(workspace, tally)
    field_paths = paths(FULL_PLAN)

    @settings(max_examples=scaled(1500), **SETTINGS)
    @given(path=st.sampled_from(field_paths), how=st.sampled_from(["replace", "replace", "replace", "delete", "add"]),
           value=VALUES)
    def case(path, how, value):
        doc = mutate(FULL_PLAN, path, how, value)
        cases.run(f"{how} {'/'.join(map(str, path))} = {json.dumps(value)[:80]}", bytes_of(doc))

    case()
    tally.check(scaled(1500))
    assert tally.accepted > 0 and tally.accepted < tally.cases  # the generator reaches both sides


IMAGE_PLAN = {  # a client and a service in images, a collection in the client's (the runtime's program: /bin/true)
    "records": 20, "shards": 2, "command": ["python3", "/work/client.py", "--rows", "10"],
    "image": {"ref": "registry.example.org:5000/team/client:1.0@sha256:" + "ab" * 32, "runtime": "podman",
              "runtime_command": ["/bin/true", "--runtime", "/usr/sbin/runc"], "runtime_args": ["--ulimit", "n=1"],
              "mounts": [{"host": "/tmp", "container": "/work"}, {"host": "/var/tmp", "container": "/out",
                                                                   "writable": True}], "workdir": "/work"},
    "services": [{"name": "gen", "command": ["vllm", "serve", "--port", "{port}"], "ready": {"http": "/v1/models"},
                  "image": {"file": "/tmp/serve.sif", "sha256": "cd" * 32, "runtime": "apptainer",
                            "runtime_command": ["/bin/true"]}}],
    "collection": {"image": "client", "allowed_roots": ["/var/tmp"]},
}


def test_every_image_field_replaced_deleted_or_added_to_is_accepted_or_refused_cleanly(workspace, tally):
    cases = InitCases(workspace, tally)
    field_paths = [p for p in paths(IMAGE_PLAN) if p[0] in ("image", "services", "collection")]

    @settings(max_examples=scaled(600), **SETTINGS)
    @given(path=st.sampled_from(field_paths), how=st.sampled_from(["replace", "replace", "replace", "delete", "add"]),
           value=VALUES)
    def case(path, how, value):
        doc = mutate(IMAGE_PLAN, path, how, value)
        cases.run(f"{how} {'/'.join(map(str, path))} = {json.dumps(value)[:80]}", bytes_of(doc))

    case()
    tally.check(scaled(600))
    assert tally.accepted > 0 and tally.accepted < tally.cases  # the generator reaches both sides


def byte_edits_of(cases, base: bytes, tally) -> None:
    """400 (scaled) documents made of `base` cut, flipped or wrapped (BYTE_EDITS), each run by `cases`."""

    @settings(max_examples=scaled(400), **SETTINGS)
    @given(how=BYTE_EDITS)
    def case(how):
        cases.run(f"bytes {how!r}"[:120], edit(base, how))

    case()
    tally.check(scaled(400))


def test_plan_bytes_cut_flipped_or_wrapped_are_refused_cleanly(workspace, tally):
    byte_edits_of(InitCases(workspace, tally), bytes_of(FULL_PLAN), tally)


def test_the_full_plan_itself_is_accepted(workspace):
    outcome = invoke("tau-init", [str(workspace / "run")], bytes_of(FULL_PLAN))
    assert outcome.code == 0, outcome.err
    assert json.loads(outcome.out)["shard_count"] == 2


# -- tau-reconcile: the observations ------------------------------------------------------------------------------

def observations(run_dir: Path) -> dict:
    """A valid document for the settled run: every attempt of it, with queue and accounting views."""
    views = []
    for sid in sorted(os.listdir(run_dir / "shards")):
        attempts = run_dir / "shards" / sid / "attempts"
        for aid in sorted(os.listdir(attempts)):
            attempt = json.loads((attempts / aid / "attempt.json").read_text())
            views.append({"shard_id": sid, "attempt_id": aid, "scheduler": attempt["scheduler"],
                          "queue": {"state": "running", "raw": "RUNNING", "reason": None},
                          "accounting": {"state": "failed", "raw": "FAILED", "exit_code": 3, "reason": "exit 3"}})
    return {"kind": "tau.observations", "schema_version": 1, "run_id": run_dir.name,
            "observed_at": jsonio.now_rfc3339(), "executor": "local",
            "sources": {"queue": "observed", "accounting": "observed", "reason": None}, "attempts": views}


class ReconcileCases:
    """Each case runs tau-reconcile on one run: a refusal must leave the run byte-for-byte as it was; after an
    accepted document the run is restored from its pristine copy."""

    def __init__(self, settled: Path, tmp_path: Path, tally) -> None:
        self.pristine = tmp_path / "pristine"
        shutil.copytree(settled, self.pristine, symlinks=True)
        self.ws = tmp_path / "ws"
        self.ws.mkdir(mode=0o700)
        self.run_dir = self.ws / settled.name
        shutil.copytree(self.pristine, self.run_dir, symlinks=True)
        self.before = snapshot(self.run_dir)
        self.tally = tally

    def run(self, label: str, data: bytes) -> None:
        outcome = invoke("tau-reconcile", [str(self.run_dir)], data)
        if outcome.code == 0:
            problem = None
            status = json.loads(outcome.out)
            if status.get("kind") != "tau.status" or "changes" not in status:
                problem = f"accepted but printed no status: {outcome.out[:200]!r}"
            if snapshot(self.run_dir) != self.before:
                shutil.rmtree(self.run_dir)
                shutil.copytree(self.pristine, self.run_dir, symlinks=True)
            self.tally.case(label, problem, accepted=True)
        else:
            problem = misbehaviour(outcome)
            if problem is None and snapshot(self.run_dir) != self.before:
                problem = f"refused ({outcome.code}) but the run changed"
                shutil.rmtree(self.run_dir)
                shutil.copytree(self.pristine, self.run_dir, symlinks=True)
            self.tally.case(label, problem)


def test_every_observations_field_replaced_deleted_or_added_to_is_applied_or_refused_cleanly(
        settled, tmp_path, tally):
    cases = ReconcileCases(settled, tmp_path, tally)
    base = observations(cases.run_dir)
    field_paths = paths(base)

    @settings(max_examples=scaled(1500), **SETTINGS)
    @given(path=st.sampled_from(field_paths), how=st.sampled_from(["replace", "replace", "replace", "delete", "add"]),
           value=VALUES)
    def case(path, how, value):
        doc = mutate(dict(base, observed_at=jsonio.now_rfc3339()), path, how, value)
        cases.run(f"{how} {'/'.join(map(str, path))} = {json.dumps(value)[:80]}", bytes_of(doc))

    case()
    tally.check(scaled(1500))
    assert tally.accepted > 0 and tally.accepted < tally.cases


@st.composite
def times(draw) -> str:
    """observed_at values: real, impossible, far past, far future, and ones that are not times at all."""
    year = draw(st.integers(0, 12000))
    month, day = draw(st.integers(0, 14)), draw(st.integers(0, 33))
    hour, minute, second = draw(st.integers(0, 26)), draw(st.integers(0, 62)), draw(st.integers(0, 62))
    micro = draw(st.integers(0, 999999))
    return draw(st.one_of(st.just(f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}."
                                  f"{micro:06d}Z"), st.text(max_size=30)))


def test_every_observed_at_is_applied_only_when_real_and_not_from_the_future(settled, tmp_path, tally):
    cases = ReconcileCases(settled, tmp_path, tally)
    base = observations(cases.run_dir)

    @settings(max_examples=scaled(400), **SETTINGS)
    @given(when=times())
    def case(when):
        cases.run(f"observed_at {when!r}", bytes_of(dict(base, observed_at=when)))

    case()
    tally.check(scaled(400))


def test_observations_bytes_cut_flipped_or_wrapped_are_refused_cleanly(settled, tmp_path, tally):
    cases = ReconcileCases(settled, tmp_path, tally)
    byte_edits_of(cases, bytes_of(observations(cases.run_dir)), tally)


# -- command-line values ------------------------------------------------------------------------------------------

ARGV_VALUES = st.one_of(st.text(max_size=30), st.sampled_from([
    "", "-", "--", "shard-", "shard-00000", "shard-99999", "shard-0", "shard-000000", "attempt-0001", "../x", "/",
    "/etc/passwd", "run\u0000x", "x" * 300, "-o", "--shard", "$(id)", "shard-00000\n", "\u202eshard"]))

ARGV_FORMS = {  # command -> how a generated value is placed (never one that could start an attempt)
    "tau-winner": lambda run, v: [run, "--shard", v],
    "tau-status": lambda run, v: [run, "-o", v],
    "tau-logs": lambda run, v: [run, v],
    "tau-collect": lambda run, v: [run, "--destination", v],
    "tau-cancel": lambda run, v: [run, "--shard", v],
    "tau-observe": lambda run, v: [v],
    "tau-bundle-verify": lambda run, v: [run, "--generation", v],
}


def test_generated_command_line_values_are_accepted_or_refused_cleanly(settled, tmp_path, tally):
    cases = ReconcileCases(settled, tmp_path, tally)
    run = str(cases.run_dir)

    @settings(max_examples=scaled(600), **SETTINGS)
    @given(command=st.sampled_from(sorted(ARGV_FORMS)), value=ARGV_VALUES)
    def case(command, value):
        argv = ARGV_FORMS[command](run, value)
        outcome = invoke(command, argv, b"")
        label = f"{command} {argv[1:]!r}"
        changed = snapshot(cases.run_dir) != cases.before
        if changed:
            shutil.rmtree(cases.run_dir)
            shutil.copytree(cases.pristine, cases.run_dir, symlinks=True)
        if outcome.code in (0, 1) and outcome.out:
            tally.case(label, None, accepted=True)  # an answer (1: a check said no, with its document)
        else:
            problem = misbehaviour(outcome)
            if problem is None and changed and command != "tau-cancel":
                problem = f"refused ({outcome.code}) but the run changed"
            tally.case(label, problem)

    case()
    tally.check(scaled(600))


@pytest.mark.parametrize("command", sorted(ARGV_FORMS))
def test_each_command_line_form_reaches_its_command(settled, command):
    """The generator's forms are real: a value that cannot be right is refused by the command itself."""
    outcome = invoke(command, ARGV_FORMS[command](str(settled), "\u0000bad"), b"")
    assert outcome.code in (2, 65, 66, 69, 77), outcome
    assert misbehaviour(outcome) is None
