"""tau-init: a run from a plan on standard input; identical re-creation is a no-op, a different plan a conflict,
and a plan that fails validation touches nothing."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from helpers import BIN, CLIENT, PYTHON, ROOT, env_for_tests, error_of, init_run, plan, snapshot, tau
from taulib.rundir.run import Run


def test_init_creates_a_private_run_and_prints_its_summary(workspace):
    run_dir = workspace / "run"
    proc = tau("tau-init", str(run_dir), input=json.dumps(plan()))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {k: doc[k] for k in ("run_id", "run_dir", "created", "records", "shard_count", "scheduler")} == {
        "run_id": "run", "run_dir": str(run_dir), "created": True, "records": 80, "shard_count": 4,
        "scheduler": "local"}
    assert proc.stderr == ""
    assert sorted(p.name for p in run_dir.iterdir()) == ["locks", "plan.json", "run.json", "shards"]
    assert os.listdir(run_dir / "shards") == []  # nothing per shard: a shard's range is the plan's (run format 2)
    assert json.loads((run_dir / "run.json").read_text())["run_format"] == 2
    for path in [run_dir, *run_dir.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), path
    with Run(str(run_dir)) as run:
        ranges = [run.shard(f"shard-0000{i}") for i in range(4)]
    assert [(r["record_start"], r["record_end"]) for r in ranges] == [(0, 20), (20, 40), (40, 60), (60, 80)]


def test_an_identical_re_init_is_a_no_op(workspace):
    run_dir = init_run(workspace)
    before = snapshot(run_dir)
    proc = tau("tau-init", str(run_dir), input=json.dumps(plan()))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["created"] is False
    assert snapshot(run_dir) == before


def test_an_identical_re_init_of_a_submitted_run_is_a_no_op(workspace):
    run_dir = init_run(workspace, records=20, shards=2)
    assert tau("tau-submit", str(run_dir)).returncode == 0
    proc = tau("tau-init", str(run_dir), input=json.dumps(plan(records=20, shards=2)))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["created"] is False


def test_a_different_plan_for_an_existing_run_exits_73(workspace):
    run_dir = init_run(workspace)
    before = snapshot(run_dir)
    proc = tau("tau-init", str(run_dir), input=json.dumps(plan(records=81)))
    assert proc.returncode == 73
    err = error_of(proc)
    assert (err["code"], err["error"]) == (73, "conflict")
    assert err["message"] == ("tau-init: run 'run' already exists with a different plan; choose another run "
                              "directory")
    assert proc.stdout == ""
    assert snapshot(run_dir) == before


def test_the_same_plan_for_a_run_whose_plan_json_was_damaged_exits_73_and_repairs_nothing(workspace):
    run_dir = init_run(workspace)
    plan_json = run_dir / "plan.json"
    plan_json.write_bytes(plan_json.read_bytes()[:40])
    before = snapshot(run_dir)
    proc = tau("tau-init", str(run_dir), input=json.dumps(plan()))
    assert proc.returncode == 73, proc.stderr
    assert error_of(proc)["message"] == "tau-init: plan.json of run 'run' does not match the digest in run.json"
    assert proc.stdout == ""
    assert snapshot(run_dir) == before


def test_a_folder_that_holds_foreign_files_exits_73(workspace):
    folder = workspace / "run"
    folder.mkdir(mode=0o700)
    (folder / "notes.txt").write_text("mine\n")
    before = snapshot(folder)
    proc = tau("tau-init", str(folder), input=json.dumps(plan()))
    assert proc.returncode == 73
    assert error_of(proc)["message"] == (f"tau-init: {str(folder)!r} exists and holds files that are not a tau run; "
                                         "choose an empty or new folder")
    assert snapshot(folder) == before


def test_tau_init_again_on_a_run_that_was_driven_cancelled_and_reopened_is_the_same_run(workspace):
    run_dir = init_run(workspace)
    (run_dir / "drive").mkdir(mode=0o700)
    for name in ("reopen.json", "cancel-2.json", "reopen-2.json"):
        (run_dir / name).write_text("{}")
    proc = tau("tau-init", str(run_dir), input=json.dumps(plan()))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["created"] is False
    (run_dir / "cancel-x.json").write_text("{}")
    foreign = tau("tau-init", str(run_dir), input=json.dumps(plan()))
    assert foreign.returncode == 73 and "holds files that are not a tau run" in error_of(foreign)["message"]


def test_an_existing_empty_folder_becomes_the_run(workspace):
    folder = workspace / "run"
    folder.mkdir(mode=0o700)
    proc = tau("tau-init", str(folder), input=json.dumps(plan()))
    assert proc.returncode == 0, proc.stderr
    assert (folder / "run.json").is_file()


def test_more_shards_than_records_exits_65_and_creates_nothing(workspace):
    run_dir = workspace / "run"
    proc = tau("tau-init", str(run_dir), input=json.dumps(plan(records=4, shards=5)))
    assert proc.returncode == 65
    assert error_of(proc)["message"] == ("tau-init: plan on standard input asks for 5 shards of 4 records; every "
                                         "shard needs at least one record")
    assert not run_dir.exists()


def test_a_run_directory_name_that_is_not_a_run_id_exits_2(workspace):
    run_dir = workspace / "my run"
    proc = tau("tau-init", str(run_dir), input=json.dumps(plan()))
    assert proc.returncode == 2
    assert error_of(proc)["message"] == ("tau-init: run directory name 'my run' must match "
                                         "[A-Za-z0-9][A-Za-z0-9._-]* (it is the run id)")
    assert not run_dir.exists()


# -- standard input that is not a valid plan ----------------------------------------------------------------------

def _without(key: str) -> str:
    doc = plan()
    del doc[key]
    return json.dumps(doc)


def _with(**changes) -> str:
    doc = plan()
    doc.update(changes)
    return json.dumps(doc)


# (case id, stdin, expected message after "tau-init: ", expected details.pointer or None)
BAD_PLANS = [
    ("invalid-json", '{"records": 80, "shards": 4,', "plan on standard input is not valid JSON: ", None),
    ("empty", "", "plan on standard input is empty; expected a JSON document", None),
    ("blank", " \n\t\n", "plan on standard input is empty; expected a JSON document", None),
    ("not-an-object", "[1, 2, 3]", "plan on standard input must be a JSON object", None),
    ("missing-command", _without("command"),
     "plan on standard input does not match schema 'plan-request' at /: missing required property 'command'", "/"),
    ("records-of-wrong-type", _with(records="80"),
     "plan on standard input does not match schema 'plan-request' at /records: expected integer, got string",
     "/records"),
    ("unknown-field", _with(colour="blue"),
     "plan on standard input does not match schema 'plan-request' at /: unexpected property 'colour'", "/"),
    ("bad-output-format", _with(output={"format": "xml"}),
     "plan on standard input does not match schema 'plan-request' at /output/format: 'xml' is not one of ",
     "/output/format"),
    ("bad-scheduler-profile", _with(scheduler={"profile": "pbs"}),
     "plan on standard input does not match schema 'plan-request' at /scheduler/profile: 'pbs' is not one of "
     "['local', 'slurm']", "/scheduler/profile"),
    ("zero-records", _with(records=0),
     "plan on standard input does not match schema 'plan-request' at /records: 0 is less than 1", "/records"),
    ("shards-and-shard-size", _with(shard_size=10),
     "plan on standard input does not match schema 'plan-request' at /: matches more than one alternative", "/"),
]


@pytest.mark.parametrize("target", ["existing-run", "new-path"])
@pytest.mark.parametrize("stdin,message,pointer", [c[1:] for c in BAD_PLANS], ids=[c[0] for c in BAD_PLANS])
def test_a_plan_that_is_not_valid_exits_65_and_touches_nothing(workspace, target, stdin, message, pointer):
    run_dir = init_run(workspace) if target == "existing-run" else workspace / "new"
    before = snapshot(workspace)
    proc = tau("tau-init", str(run_dir), input=stdin)
    assert proc.returncode == 65, proc.stderr
    err = error_of(proc)
    assert (err["code"], err["command"], err["error"]) == (65, "tau-init", "bad_input")
    assert err["message"].startswith("tau-init: " + message), err["message"]
    if pointer is not None:
        assert err["details"] == {"pointer": pointer, "schema": "plan-request"}
    assert proc.stdout == ""
    assert snapshot(workspace) == before
    if target == "new-path":
        assert not Path(run_dir).exists()


# -- mistakes caught before compute: the output schema's types, the folder recorded, the program, the script -------

def tau_in(folder: Path, *args: str, input: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A tau command run from `folder` (its working folder), as a user in another folder would run it."""
    return subprocess.run([str(BIN / args[0]), *args[1:]], input=input, capture_output=True, text=True,
                          env=env_for_tests(env), cwd=folder, timeout=120)


@pytest.mark.parametrize("bad,good", [("int", "int64"), ("str", "string"), ("float64", "double")])
def test_an_output_schema_type_arrow_does_not_print_exits_65_naming_the_field_and_its_spelling(workspace, bad, good):
    run_dir = workspace / "run"
    schema = [{"name": "id", "type": "int64"}, {"name": "value", "type": bad}]
    proc = tau("tau-init", str(run_dir), input=json.dumps(plan(output={"schema": schema})))
    assert proc.returncode == 65, proc.stderr
    err = error_of(proc)
    assert err["message"] == (f"tau-init: plan on standard input gives field 'value' (output.schema[1]) the type "
                              f"{bad!r}, which is not an Arrow type name: did you mean {good!r}?")
    assert err["details"] == {"field": "value", "type": bad}
    assert proc.stdout == ""
    assert not run_dir.exists()


def test_output_schema_types_as_arrow_prints_them_are_accepted(workspace):
    schema = [{"name": "id", "type": "int64"}, {"name": "at", "type": "timestamp[us, tz=UTC]"},
              {"name": "tags", "type": "list<item: string>"}, {"name": "price", "type": "decimal128(10, 2)"}]
    run_dir = init_run(workspace, output={"schema": schema})
    assert json.loads((run_dir / "schema.json").read_text())["fields"] == schema


def test_a_nested_unknown_key_exits_65_naming_it_where_it_is(workspace):
    doc = plan()
    doc["scheduler"] = {"local": {"max_paralel": 2}}
    proc = tau("tau-init", str(workspace / "run"), input=json.dumps(doc))
    assert proc.returncode == 65, proc.stderr
    err = error_of(proc)
    assert err["message"] == ("tau-init: plan on standard input does not match schema 'plan-request' at "
                              "/scheduler/local: unexpected property 'max_paralel' (did you mean 'max_parallel'?)")
    assert err["details"] == {"pointer": "/scheduler/local", "schema": "plan-request"}
    assert not (workspace / "run").exists()


def test_init_from_another_folder_prints_the_folder_it_recorded(workspace):
    elsewhere = workspace / "elsewhere"
    elsewhere.mkdir()
    proc = tau_in(elsewhere, "tau-init", str(workspace / "run"), input=json.dumps(plan()))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["cwd"] == str(elsewhere)
    assert json.loads((workspace / "run" / "run.json").read_text())["environment"]["cwd"] == str(elsewhere)
    again = tau("tau-init", str(workspace / "run"), input=json.dumps(plan()))  # an existing run: what it recorded
    assert (again.returncode, json.loads(again.stdout)["cwd"]) == (0, str(elsewhere))


def test_a_bare_program_that_resolves_inside_taus_own_environment_exits_65(workspace):
    # the tests put tau's own .venv/bin first on PATH, as a user who put tau's commands on PATH has it, without
    # activating its environment (VIRTUAL_ENV names another one)
    proc = tau("tau-init", str(workspace / "run"), input=json.dumps(plan(command=["python3", CLIENT])),
               env={"VIRTUAL_ENV": str(workspace / "my-env")})
    assert proc.returncode == 65, proc.stderr
    err = error_of(proc)
    venv = str(ROOT / ".venv")
    assert err["message"] == (f"tau-init: the client program 'python3' resolves to '{venv}/bin/python3', inside "
                              f"tau's own environment '{venv}', not yours: give the program's absolute path, or "
                              "put your environment first on PATH")
    assert err["details"] == {"program": f"{venv}/bin/python3"}
    assert not (workspace / "run").exists()


def test_a_bare_program_in_taus_environment_is_accepted_when_that_environment_is_the_one_activated(workspace):
    # tau installed into the researcher's own environment, activated: its python3 is theirs
    proc = tau("tau-init", str(workspace / "run"), input=json.dumps(plan(command=["python3", CLIENT])),
               env={"VIRTUAL_ENV": str(ROOT / ".venv")})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["program"] == str(ROOT / ".venv" / "bin" / "python3")


def test_taus_own_interpreter_given_by_its_absolute_path_is_deliberate_and_accepted(workspace):
    proc = tau("tau-init", str(workspace / "run"), input=json.dumps(plan(command=[str(BIN / "python3"), CLIENT])))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["program"] == str(BIN / "python3")


def test_a_bare_program_outside_taus_environment_is_accepted(workspace):
    proc = tau("tau-init", str(workspace / "run"), input=json.dumps(plan(command=["sh", "-c", "exit 0"])))
    assert proc.returncode == 0, proc.stderr
    assert not json.loads(proc.stdout)["program"].startswith(str(ROOT / ".venv"))


@pytest.mark.parametrize("script,problem", [("clinet.py", "does not exist"), ("lib", "is not a regular file")])
def test_an_interpreters_script_that_is_not_a_file_in_the_recorded_folder_exits_65(workspace, script, problem):
    folder = workspace / "project"
    (folder / "lib").mkdir(parents=True)
    (folder / "client.py").write_text("print('hello')\n")
    proc = tau_in(folder, "tau-init", str(workspace / "run"),
                  input=json.dumps(plan(command=[PYTHON, "-u", script, "--rows", "10"])))
    assert proc.returncode == 65, proc.stderr
    err = error_of(proc)
    assert err["message"] == (f"tau-init: the client script {script!r} (command[2], run by {PYTHON!r}) {problem} in "
                              f"{str(folder)!r}, the folder tau-init runs in, which the run records as its clients' "
                              "working folder: fix its path, or run tau-init from the folder it is relative to")
    assert err["details"] == {"script": str(folder / script), "cwd": str(folder)}
    assert not (workspace / "run").exists()


def test_an_interpreters_script_found_in_the_recorded_folder_is_accepted(workspace):
    folder = workspace / "project"
    folder.mkdir()
    (folder / "client.py").write_text("print('hello')\n")
    for n, command in enumerate([[PYTHON, "client.py"], ["sh", "-c", "exit 0"], [PYTHON, "-m", "no_such_module"]]):
        proc = tau_in(folder, "tau-init", str(workspace / f"run{n}"), input=json.dumps(plan(command=command)))
        assert proc.returncode == 0, (command, proc.stderr)
