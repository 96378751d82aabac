"""The manual is checked against the code: pages exist, options match --help, examples parse, pages lint clean.

The roff sources in man/ are the one source of the manual (man/build.py renders them). These tests fail when a
command lacks a page, when a page's OPTIONS drift from the options click reports, when an example in EXAMPLES names
a command or an option that does not exist (or does not parse), when tau(1)'s exit-code table drifts from
taulib.errors.EXIT_CODES, when tau-run(5) misses a record kind or field of share/schemas, or when mandoc finds a
warning. They are fast: nothing here runs a command.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from taulib import env, failpoints
from taulib.cli import registry
from taulib.errors import EXIT_CODES

ROOT = Path(__file__).resolve().parent.parent
MAN = ROOT / "man"
EPIPE_EXIT = 141
# `tau` is not a click command: taulib.cli.tau handles exactly these itself.
FRONT_OPTIONS = {"-h", "--help", "--version"}


def scripts() -> dict[str, str]:
    """command name -> module, from the command registry (test_structure.py proves pyproject.toml and bin/ hold
    the same commands)."""
    return {"tau": registry.FRONT.module, **{c.program: c.module for c in registry.COMMANDS}}


COMMANDS = sorted(scripts())
CLICK_COMMANDS = [name for name in COMMANDS if name != "tau"]
PAGES = sorted(p for p in MAN.iterdir() if re.fullmatch(r"[a-z][a-z0-9-]*\.[1-8]", p.name))


# -- reading roff -----------------------------------------------------------------------------------------------

_ESCAPES = [(r"\(aq", "'"), (r"\(dq", '"'), (r"\(em", "--"), (r"\(en", "-"), (r"\(->", "->"), (r"\(bu", "*"),
            (r"\-", "-"), (r"\&", ""), (r"\e", "\\"), (r"\ ", " ")]
_FONT = re.compile(r"\\f(?:[BIRP]|\[[A-Z]*\])")


def plain(text: str) -> str:
    """Roff text without font escapes, with the escapes our pages use turned into characters."""
    text = _FONT.sub("", text)
    out = []
    i = 0
    while i < len(text):
        for esc, char in _ESCAPES:
            if text.startswith(esc, i):
                out.append(char)
                i += len(esc)
                break
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def sections(page: Path) -> dict[str, list[str]]:
    """The page's source lines grouped by .SH section name."""
    result: dict[str, list[str]] = {}
    current = None
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith(".SH"):
            current = line[3:].strip().strip('"')
            result[current] = []
        elif current is not None:
            result[current].append(line)
    return result


def tags(lines: list[str]) -> list[str]:
    """The tag line of every .TP paragraph, as plain text without its font macro (".B 0" -> "0")."""
    found = []
    for i, line in enumerate(lines[:-1]):
        if line.strip() == ".TP":
            tag = lines[i + 1]
            if tag.startswith("."):
                tag = tag.split(None, 1)[1] if " " in tag.strip() else ""
            found.append(plain(tag).replace('"', ""))
    return found


def example_lines(page: Path) -> list[str]:
    """The displayed lines (.EX ... .EE) of the EXAMPLES section, as plain text."""
    lines, inside = [], False
    for line in sections(page).get("EXAMPLES", []):
        if line.startswith(".EX"):
            inside = True
        elif line.startswith(".EE"):
            inside = False
        elif inside and not line.startswith("."):
            lines.append(plain(line))
    return lines


_LONG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_SHORT = re.compile(r"(?<![\w-])-[A-Za-z](?![\w-])")


def page_options(name: str) -> tuple[set[str], set[str]]:
    """(long, short) options named in the tags of the OPTIONS section of man/<name>.1."""
    text = " ".join(tags(sections(MAN / f"{name}.1").get("OPTIONS", [])))
    return set(_LONG.findall(text)), set(_SHORT.findall(text))


# -- asking click -----------------------------------------------------------------------------------------------

def click_command(name: str) -> click.Command:
    return importlib.import_module(scripts()[name]).cli


def click_options(cmd: click.Command, name: str) -> set[str]:
    """Every option string of a command, --help included (help option names come from its context settings)."""
    ctx = click.Context(cmd, info_name=name, **cmd.context_settings)
    found: set[str] = set()
    for param in cmd.get_params(ctx):
        if isinstance(param, click.Option):
            found.update(param.opts)
            found.update(param.secondary_opts)
    if isinstance(cmd, click.Group):
        for sub_name, sub in cmd.commands.items():
            found |= click_options(sub, f"{name} {sub_name}")
    return found


def parse_with_click(name: str, args: list[str]) -> None:
    """Parse an argument list as the command would, without running it; raises click's errors."""
    cmd = click_command(name)
    try:
        ctx = cmd.make_context(name, list(args))
        if isinstance(cmd, click.Group):
            protected = ctx.__dict__.get("_protected_args")
            if protected is None:  # click < 8.2
                protected = ctx.protected_args
            sub_name, sub, rest = cmd.resolve_command(ctx, [*protected, *ctx.args])
            sub.make_context(sub_name, rest, parent=ctx)
    except click.exceptions.Exit as exc:  # --help, --version
        assert exc.exit_code == 0


# -- parsing example command lines ------------------------------------------------------------------------------

_REDIRECT = {"<", ">", ">>", ">&", "<&", "&>", "<<", "<<<", ">|"}
_SEPARATOR = {"|", "||", "&&", ";", "&", "(", ")"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def segments(line: str) -> list[list[str]]:
    """The simple commands of a shell line: split at pipes and lists, redirections and assignments removed."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    tokens = list(lexer)
    result, current, skip = [], [], False
    for i, token in enumerate(tokens):
        if skip:
            skip = False
            continue
        if token in _SEPARATOR:
            result.append(current)
            current = []
        elif token in _REDIRECT:
            if current and current[-1].isdigit() and i > 0 and tokens[i - 1] == current[-1]:
                current.pop()  # the file descriptor of 2>&1
            skip = True
        elif not current and _ASSIGNMENT.match(token):
            continue
        else:
            current.append(token)
    result.append(current)
    return [seg for seg in result if seg]


_KEYWORDS = {"until", "while", "if", "then", "do", "else", "elif", "!", "time", "exec", "nohup", "command"}
_WRAPPERS = {"timeout": 1, "watch": 0, "srun": 0, "sudo": 0, "env": 0, "xargs": 0}  # -> operands before the command
_CRON = re.compile(r"^(\S+\s+){5}")  # a crontab line's five time fields
_PYTHON = re.compile(r"^(?:.*/)?python3?(?:\.\d+)?$")


def _command_words(seg: list[str]) -> list[str]:
    """The words of a simple command from its program on: shell keywords, and wrappers (timeout 5, srun -n1,
    sudo -u x, env A=1, exec ...) with their options and operands, removed."""
    while seg:
        word = seg[0]
        if word in _KEYWORDS or _ASSIGNMENT.match(word):
            seg = seg[1:]
        elif word in _WRAPPERS:
            seg = seg[1:]
            while seg and (seg[0].startswith("-") or _ASSIGNMENT.match(seg[0])):
                seg = seg[2:] if seg[0] in ("-u", "-n", "-s", "-g", "-I") else seg[1:]
            seg = seg[_WRAPPERS[word]:]
        else:
            return seg
    return seg


def tau_invocations(line: str) -> list[tuple[str, list[str]]]:
    """(command, arguments) of every tau command in a shell line; `tau X` becomes `tau-X`, `python -m
    taulib.cli.X` the command whose module that is; a crontab line is read from its command."""
    found = []
    modules = {module: name for name, module in scripts().items()}
    for seg in segments(_CRON.sub("", line) if _CRON.match(line) and line.split()[0][:1] in "*0123456789@" else line):
        seg = _command_words(seg)
        if not seg:
            continue
        if _PYTHON.match(seg[0]) and len(seg) > 2 and seg[1] == "-m" and seg[2].startswith("taulib."):
            assert seg[2] in modules, f"python -m {seg[2]}: no tau command has that module"
            found.append((modules[seg[2]], seg[3:]))
        elif seg[0] == "tau":
            if len(seg) > 1 and not seg[1].startswith("-") and seg[1] not in ("help", "completion"):
                found.append((f"tau-{seg[1]}", seg[2:]))
            else:
                found.append(("tau", seg[1:]))
        elif seg[0].startswith("tau-"):
            found.append((seg[0], seg[1:]))
    return found


def example_commands(page: Path) -> list[str]:
    """The example lines of a page, a line continued with a backslash joined to the next."""
    joined, pending = [], ""
    for line in example_lines(page):
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
        else:
            joined.append(pending + line)
            pending = ""
    return joined + ([pending] if pending else [])


def _calls(line: str) -> list[tuple[str, list[str]]]:
    try:
        return tau_invocations(line)
    except ValueError:  # unbalanced quotes: output (prose), unless it starts as a command would
        return []


_MENTION = re.compile(r"(?<![\w/.$-])(tau(?:-[a-z]+(?:-[a-z]+)*)?|taulib\.cli\.[a-z_]+)(?![\w-])")


def all_examples() -> list[tuple[str, str]]:
    """(page, line) of every example line that runs a tau command (the others are its output)."""
    return [(page.name, line) for page in PAGES for line in example_commands(page) if _calls(line)]


# -- the pages exist --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_a_section_1_page(name):
    assert (MAN / f"{name}.1").is_file(), f"man/{name}.1 is missing; every command in [project.scripts] has a page"


def test_the_run_directory_has_a_section_5_page():
    assert (MAN / "tau-run.5").is_file()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_page_has_the_sections_a_reader_expects(page):
    names = list(sections(page))
    expected = ["NAME", "SYNOPSIS", "DESCRIPTION", "EXAMPLES", "SEE ALSO"]
    if page.suffix == ".1":
        expected += ["OPTIONS", "EXIT STATUS"]
    missing = [s for s in expected if s not in names]
    assert not missing, f"{page.name} lacks the sections {missing}"
    name_line = " ".join(sections(page)["NAME"])
    assert plain(name_line).startswith(page.stem + " - "), f"{page.name}: NAME must be '{page.stem} - summary'"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_page_refers_only_to_pages_that_exist(page):
    text = plain(page.read_text(encoding="utf-8"))
    ours = set(re.findall(r"\b(tau(?:-[a-z]+)?)\s*\(([1-8])\)", text))
    missing = sorted(f"{n}({s})" for n, s in ours if not (MAN / f"{n}.{s}").is_file())
    assert not missing, f"{page.name} refers to pages that do not exist: {missing}"


# -- options match --help ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CLICK_COMMANDS)
def test_the_long_options_of_a_page_are_those_click_reports(name):
    long_on_page, _ = page_options(name)
    long_in_click = {o for o in click_options(click_command(name), name) if o.startswith("--")}
    assert long_on_page == long_in_click, (
        f"man/{name}.1 OPTIONS drifted from --help: only on the page {sorted(long_on_page - long_in_click)}, "
        f"only in the command {sorted(long_in_click - long_on_page)}")


@pytest.mark.parametrize("name", CLICK_COMMANDS)
def test_the_short_options_of_a_page_are_those_click_reports(name):
    _, short_on_page = page_options(name)
    short_in_click = {o for o in click_options(click_command(name), name) if not o.startswith("--")}
    assert short_on_page == short_in_click, (
        f"man/{name}.1 OPTIONS drifted from --help: only on the page {sorted(short_on_page - short_in_click)}, "
        f"only in the command {sorted(short_in_click - short_on_page)}")


def test_the_front_command_page_lists_the_options_tau_handles():
    long_on_page, short_on_page = page_options("tau")
    assert long_on_page | short_on_page == FRONT_OPTIONS
    source = Path(importlib.import_module(scripts()["tau"]).__file__).read_text(encoding="utf-8")
    for option in FRONT_OPTIONS:
        assert f'"{option}"' in source, f"taulib/cli/tau.py no longer handles {option}; update tau.1 and this test"


# -- exit codes -------------------------------------------------------------------------------------------------

def test_the_exit_status_table_of_tau_1_is_the_code_table():
    codes = {int(tag.split()[0]) for tag in tags(sections(MAN / "tau.1")["EXIT STATUS"])}
    assert codes == set(EXIT_CODES) | {EPIPE_EXIT}


def test_the_exit_status_table_names_each_code_as_the_error_object_does():
    lines = sections(MAN / "tau.1")["EXIT STATUS"]
    checked = 0
    for i, line in enumerate(lines[:-2]):
        if line.strip() == ".TP":
            code = int(tags(lines[i:i + 2])[0].split()[0])
            if code in EXIT_CODES:
                assert plain(lines[i + 2]).startswith(EXIT_CODES[code][0] + ":"), f"exit status {code}"
                checked += 1
    assert checked == len(EXIT_CODES)


@pytest.mark.parametrize("name", CLICK_COMMANDS)  # tau(1) holds the table itself (the two tests above)
def test_every_command_page_refers_to_the_table_in_tau_1(name):
    text = plain(" ".join(sections(MAN / f"{name}.1")["EXIT STATUS"]))
    assert "tau (1)" in text or "tau(1)" in text


@pytest.mark.parametrize("name", CLICK_COMMANDS)
def test_the_codes_a_command_page_names_are_in_the_table(name):
    text = plain(" ".join(sections(MAN / f"{name}.1")["EXIT STATUS"]))
    named = {int(n) for n in re.findall(r"(?<![\w.(-])(\d{1,3})(?= (?:when|on|if)\b)", text)}
    named |= {int(n) for n in re.findall(r"exits (\d{1,3})", text)}
    assert named, f"man/{name}.1 EXIT STATUS names no code"
    assert named <= set(EXIT_CODES) | {EPIPE_EXIT}, sorted(named - set(EXIT_CODES) - {EPIPE_EXIT})


# -- the run directory page covers the schemas ------------------------------------------------------------------

SCHEMAS = sorted(p for p in (ROOT / "share" / "schemas").glob("*.schema.json") if p.name != "common.schema.json")


# documents that are not records of a run directory, and the page that describes them
NOT_RECORDS = {"workload-status.schema.json": "tau-status.7", "tau-v1alpha1-status.schema.json": "tau-status.7"}


def nested_fields(schema: object) -> set[str]:
    """Every property name anywhere in a schema."""
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                found |= set(value)
            found |= nested_fields(value)
    elif isinstance(schema, list):
        for value in schema:
            found |= nested_fields(value)
    return found


@pytest.mark.parametrize("schema_path", [p for p in SCHEMAS if p.name in NOT_RECORDS], ids=lambda p: p.name)
def test_the_page_of_a_document_that_is_not_a_record_names_every_field_at_every_depth(schema_path):
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    text = plain((MAN / NOT_RECORDS[schema_path.name]).read_text(encoding="utf-8"))
    missing = sorted(f for f in nested_fields(schema) if not re.search(rf"\b{re.escape(f)}\b", text))
    assert not missing, f"{NOT_RECORDS[schema_path.name]} does not describe the fields {missing}"


@pytest.mark.parametrize("schema_path", [p for p in SCHEMAS if p.name not in NOT_RECORDS],
                         ids=lambda p: p.name.split(".")[0])
def test_tau_run_5_names_every_record_kind_and_field(schema_path):
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    text = plain((MAN / "tau-run.5").read_text(encoding="utf-8"))
    for shape in versions(schema):
        kind = shape["properties"].get("kind", {}).get("const")
        if kind:
            assert kind in text, f"tau-run(5) does not describe the record kind {kind}"
        fields = nested_fields(shape) if len(versions(schema)) > 1 else shape["properties"]
        missing = sorted(field for field in fields if not re.search(rf"\b{re.escape(field)}\b", text))
        assert not missing, f"tau-run(5) does not describe the fields {missing} of {schema_path.name}"


def versions(schema: dict) -> list[dict]:
    """The shapes a record's schema allows: itself, or each version its top-level oneOf names in its $defs (a
    record with several schema versions, such as readiness.json); a version's fields are named at every depth."""
    if "properties" in schema:
        return [schema]
    return [schema["$defs"][alternative["$ref"].rsplit("/", 1)[1]] for alternative in schema["oneOf"]]


def test_a_record_with_versions_has_each_of_them_read_as_a_shape_of_its_own():
    shapes = versions(json.loads((ROOT / "share" / "schemas" / "readiness.schema.json").read_text()))
    assert [s["properties"]["schema_version"]["const"] for s in shapes] == [1, 2]
    assert "deployments" in nested_fields(shapes[1]) and "last_probe" in nested_fields(shapes[1])


def every_variable() -> list:
    """tau's own variables (taulib.env.VARS) and each executor's (declared by it)."""
    from taulib import executors

    return [*env.VARS.values(), *executors.variables().values()]


def test_tau_1_environment_lists_exactly_the_variables_a_user_sets():
    listed = set()
    for tag in tags(sections(MAN / "tau.1")["ENVIRONMENT"]):
        listed.update(re.findall(r"\b[A-Z][A-Z0-9_]{2,}\b", tag))
    expected = {v.name for v in every_variable() if v.scope == "user"}
    assert listed == expected, (f"tau(1) ENVIRONMENT drifted from taulib.env.VARS: only on the page "
                                f"{sorted(listed - expected)}, only in the table {sorted(expected - listed)}")


def test_tau_run_5_names_every_variable_a_client_gets():
    text = plain((MAN / "tau-run.5").read_text(encoding="utf-8"))
    missing = [v.name for v in every_variable() if v.scope in ("client", "allocation") and v.name not in text]
    assert not missing, f"tau-run(5) does not describe the variables {missing}"


def test_tau_collect_1_names_every_allocator_setting_it_gives_itself():
    text = plain((MAN / "tau-collect.1").read_text(encoding="utf-8"))
    assert "ENVIRONMENT" in sections(MAN / "tau-collect.1")
    named = [f"{v.name}={v.default}" if isinstance(v.default, str) else f"{v.name}=1" for v in env.VARS.values()
             if v.scope == "memory"]
    missing = [name for name in named if name not in text]
    assert not missing, f"tau-collect(1) ENVIRONMENT does not give {missing}"


def test_tau_1_lists_every_failpoint():
    text = plain((MAN / "tau.1").read_text(encoding="utf-8"))
    missing = [name for name in failpoints.NAMES if name not in text]
    assert not missing, f"tau(1) ENVIRONMENT does not list the failpoints {missing}"


# -- examples ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_page_shows_a_tau_command_in_its_examples(page):
    assert any(tau_invocations(line) for line in example_lines(page)), f"{page.name} EXAMPLES shows no command"


@pytest.mark.parametrize("page_name,line", all_examples(),
                         ids=[f"{page}:{n}" for n, (page, _) in enumerate(all_examples())])
def test_every_example_names_real_commands_and_options(page_name, line):
    invocations = tau_invocations(line)
    assert invocations, f"{page_name}: {line!r} was chosen as a tau call but holds none"
    for name, args in invocations:
        assert name in COMMANDS, f"{page_name}: example {line!r} runs {name}, which is not a tau command"
        if name == "tau":
            assert set(args) <= FRONT_OPTIONS | {"help"} or (args[:1] == ["completion"] and len(args) == 2
                                                             and args[1] in ("bash", "zsh", "fish")), \
                f"{page_name}: {line!r}"
            continue
        known = click_options(click_command(name), name)
        for arg in args:
            if arg.startswith("-") and arg != "-":
                option = arg.split("=", 1)[0]
                assert option in known, f"{page_name}: example {line!r}: {name} has no option {option}"
        try:
            parse_with_click(name, args)
        except click.ClickException as exc:
            pytest.fail(f"{page_name}: example {line!r} does not parse: {exc.format_message()}")


_COMMAND_START = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:\S*/)?(?:tau\b|tau-|python|exec|until|while|if|"
                            r"srun|sudo|env|timeout|watch|nohup|xargs|[0-9*@])")


def test_every_example_line_that_names_a_command_is_a_call_or_its_output():
    """A line that names a tau command and is not read as a call must be output (JSON, or prose that no shell
    would parse): else the call parser missed a way of starting a command, and its options go unchecked."""
    missed = []
    for page in PAGES:
        for line in example_commands(page):
            text = line.strip()
            if not _MENTION.search(text) or _calls(line) or text[:1] in "{[\"":
                continue
            try:
                shlex.split(text, comments=True)
            except ValueError:
                assert not _MENTION.match(text), f"{page.name}: cannot parse example {line!r}"
                continue  # prose with an apostrophe
            if _COMMAND_START.match(text):
                missed.append(f"{page.name}: {line!r}")
    assert not missed, "tau calls the example parser does not read: " + "; ".join(missed)


def test_the_example_parser_sees_through_pipes_redirections_and_assignments():
    line = ("TAU_LOCK_TIMEOUT=5 tau-observe runs/demo 2>/dev/null | tau reconcile runs/demo -o table "
            ">out.txt && tau-retry runs/demo --shard=shard-00001 | jq -r .state")
    assert tau_invocations(line) == [("tau-observe", ["runs/demo"]), ("tau-reconcile", ["runs/demo", "-o", "table"]),
                                     ("tau-retry", ["runs/demo", "--shard=shard-00001"])]


def test_the_example_parser_reads_calls_behind_keywords_wrappers_cron_and_python_m():
    assert tau_invocations("until tau-cancel runs/demo >/dev/null; do sleep 30; done") == [
        ("tau-cancel", ["runs/demo"])]
    assert tau_invocations("*/5 * * * * tau-drive runs/demo --once >/dev/null") == [
        ("tau-drive", ["runs/demo", "--once"])]
    assert tau_invocations("exec /opt/tau/.venv/bin/python -m taulib.cli.attempt run R --submission s") == [
        ("tau-attempt", ["run", "R", "--submission", "s"])]
    assert tau_invocations("timeout 5 srun -n1 env TAU_X=1 tau status R") == [("tau-status", ["R"])]
    assert tau_invocations('{"command":"tau-collect","message":"tau-collect: no"}') == []
    assert tau_invocations("#SBATCH --array=1,3-5,7") == []


def test_an_example_with_an_unknown_option_is_caught():
    with pytest.raises(click.ClickException):
        parse_with_click("tau-collect", ["runs/demo", "--dest", "x"])
    with pytest.raises(click.ClickException):
        parse_with_click("tau-attempt", ["run", "runs/demo"])  # --submission is required


# -- lint -------------------------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("mandoc") is None,
                    reason="mandoc is not installed (make check installs it: contrib/ci/system-deps.sh)")
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_page_lints_clean(page):
    proc = subprocess.run(["mandoc", "-Tlint", "-Wwarning", str(page)], capture_output=True, text=True)
    assert proc.returncode == 0 and not (proc.stdout + proc.stderr).strip(), proc.stdout + proc.stderr


# -- README -----------------------------------------------------------------------------------------------------

def readme_commands() -> list[str]:
    """Command lines of README.md's fenced shell blocks, in order (comments, prompts and output left out)."""
    lines, fence = [], None
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
            continue
        if fence in ("sh", "shell", "bash", "console") and line.strip() and not line.startswith("#"):
            lines.append(line.strip().removeprefix("$ "))
    return lines


def test_readme_starts_with_make_demo_and_make_check():
    assert readme_commands()[:2] == ["make demo", "make check"]


def test_every_make_target_in_the_readme_exists():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.M))
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"\bmake ([a-z][a-z-]*)", text))
    assert named and named <= targets, sorted(named - targets)


def test_every_tau_command_line_in_the_readme_parses():
    for line in readme_commands():
        for name, args in tau_invocations(line):
            assert name in COMMANDS, line
            if name != "tau":
                try:
                    parse_with_click(name, args)
                except click.ClickException as exc:
                    pytest.fail(f"README.md: {line!r} does not parse: {exc.format_message()}")


def test_tau_run_5_lists_every_failpoint_under_its_protocol():
    text = (ROOT / "man" / "tau-run.5").read_text(encoding="utf-8")
    section = text[text.index(".SS Failpoints"):text.index(".SS Locks")]
    missing = [name for name in failpoints.NAMES if name not in section]
    assert not missing, f"tau-run(5) Failpoints does not list {missing}"


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve() or shutil.which("man") is None,
                    reason="the checkout's own venv (make venv), with man installed")
def test_man_finds_every_page_from_the_checkouts_venv_as_readme_says():
    """README: a venv keeps the pages in VENV/share/man, found while VENV/bin is on PATH; `make venv` links them
    there (its editable install copies none: a new user's `man tau-init` after `make demo` found nothing)."""
    environ = {key: value for key, value in os.environ.items() if key != "MANPATH"}  # man's search from PATH
    environ["PATH"] = f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin"
    for page in sorted(MAN.glob("*.[157]")):
        name, section = page.stem, page.suffix[1:]
        found = subprocess.run(["man", "-w", section, name], capture_output=True, text=True, env=environ, check=False)
        assert found.returncode == 0, (page.name, found.stderr)
        assert Path(found.stdout.strip()).resolve() == page.resolve(), found.stdout
