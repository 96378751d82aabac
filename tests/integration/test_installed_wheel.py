"""tau installed like any Python tool: its wheel, built from a copy of the checkout, in a clean venv.

The copy holds the checkout's files as git sees them, uncommitted work included (tracked and untracked files, less
what .gitignore ignores: no .venv, no build/). From it `python -m build` makes an sdist, a wheel from that sdist, and
a wheel from the tree; the two wheels must hold the same files with the same bytes. The tree's wheel is installed
with pip into a new venv (dependencies from PyPI or pip's cache), and from then on everything runs as a user of that
venv would: its bin first on PATH, then /usr/bin and /bin; no PYTHONPATH; in a folder outside the checkout. README's
worked example runs end to end with the demo client copied next to the run; man finds and renders the pages from
PATH alone; the completion files load where each shell looks for them; and Python imports tau from the venv's
site-packages, never from the checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from helpers import PYTHON, ROOT
from taulib.cli import completion, registry

pytestmark = pytest.mark.install

DIST = "tau-0.1.0"
MAN_PAGES = sorted(p.name for p in (ROOT / "man").iterdir() if re.fullmatch(r"[a-z][a-z0-9-]*\.[1-8]", p.name))
SCHEMAS = sorted(p.name for p in (ROOT / "share" / "schemas").glob("*.schema.json"))


def run(args: list[str], *, env: dict | None = None, cwd: Path | None = None, timeout: float = 300,
        input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, cwd=cwd, input=input, capture_output=True, text=True, timeout=timeout)


def copy_checkout(dest: Path) -> Path:
    """The checkout's files as git sees them (uncommitted and untracked work too, nothing .gitignore ignores)."""
    listed = run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"])
    assert listed.returncode == 0, listed.stderr
    for name in sorted(set(filter(None, listed.stdout.split("\0")))):
        source, target = ROOT / name, dest / name
        if not os.path.lexists(source):  # deleted in the work tree, not yet in the index
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        else:
            shutil.copy2(source, target)
    return dest


def build(args: list[str], source: Path, outdir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = run([PYTHON, "-m", "build", *args, "--outdir", str(outdir), str(source)], env=env, cwd=source)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def contents(wheel: Path) -> dict[str, str]:
    """Every file in a wheel with the sha256 of its bytes (the zip's own timestamps left out)."""
    with zipfile.ZipFile(wheel) as zf:
        return {info.filename: hashlib.sha256(zf.read(info)).hexdigest() for info in zf.infolist()
                if not info.is_dir()}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """{"tree": the wheel built from the copied checkout, "sdist": the wheel built from its sdist, "tarball": the
    sdist}."""
    base = tmp_path_factory.mktemp("wheels")
    source = copy_checkout(base / "tau")
    build([], source, base / "from-sdist")  # the sdist, then a wheel built from it
    build(["--wheel"], source, base / "from-tree")
    return {"tree": base / "from-tree" / f"{DIST}-py3-none-any.whl",
            "sdist": base / "from-sdist" / f"{DIST}-py3-none-any.whl",
            "tarball": base / "from-sdist" / f"{DIST}.tar.gz"}


@pytest.fixture(scope="module")
def user(wheels, tmp_path_factory) -> dict:
    """A clean venv with the tree's wheel pip-installed, and the environment of a user of it."""
    home = tmp_path_factory.mktemp("user")
    venv = home / "venv"
    made = run([PYTHON, "-m", "venv", str(venv)], cwd=home)
    assert made.returncode == 0, made.stderr
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TAU_", "PYTHON", "VIRTUAL_ENV", "MANPATH", "XDG_DATA_DIRS", "BASH_COMPLETION"))}
    env["PATH"] = f"{venv}/bin:/usr/bin:/bin"
    installed = run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-input",
                     str(wheels["tree"])], env=env, cwd=home, timeout=600)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return {"home": home, "venv": venv, "env": env, "python": str(venv / "bin" / "python")}


def test_a_wheel_built_from_the_sdist_holds_the_same_files_with_the_same_bytes_as_one_from_the_checkout(wheels):
    tree, sdist = contents(wheels["tree"]), contents(wheels["sdist"])
    assert sorted(tree) == sorted(sdist)
    differing = sorted(name for name in tree if tree[name] != sdist[name])
    assert differing == [], f"these files differ between the wheels: {differing}"


def test_the_wheel_carries_the_schemas_the_man_pages_and_the_completion_files(wheels):
    names = set(contents(wheels["tree"]))
    data = f"{DIST}.data/data/"
    assert {f"taulib/schemas/{name}" for name in SCHEMAS} <= names
    assert {f"{data}share/man/man{page[-1]}/{page}" for page in MAN_PAGES} <= names
    for shell in completion.SHELLS:
        assert {data + path for path in completion.files(shell)} <= names, shell
    with zipfile.ZipFile(wheels["tree"]) as zf:
        assert zf.read("taulib/schemas/plan-request.schema.json") == (
            ROOT / "share/schemas/plan-request.schema.json").read_bytes()
    import tarfile

    with tarfile.open(wheels["tarball"]) as tf:
        member = tf.getmember(f"{DIST}/taulib/schemas/plan-request.schema.json")
        assert member.isfile(), "the sdist must hold the schemas themselves, not the checkout's symbolic link"


def test_python_imports_tau_and_its_schemas_from_the_venv_never_from_the_checkout(user):
    code = ("import sysconfig, taulib, taulib.schema as s; print(sysconfig.get_path('purelib')); "
            "print(taulib.__file__); print(s.folder()); print(len(s.load('plan-request')['properties']))")
    proc = run([user["python"], "-c", code], env=user["env"], cwd=user["home"])
    assert proc.returncode == 0, proc.stderr
    site, module, schemas, count = proc.stdout.splitlines()
    site = Path(site)
    assert site.is_relative_to(user["venv"])
    assert Path(module) == site / "taulib" / "__init__.py"
    assert Path(schemas) == site / "taulib" / "schemas" and not Path(schemas).is_symlink()
    assert int(count) > 0
    assert str(ROOT) not in proc.stdout


def test_every_command_is_on_the_path_and_answers_help_pointing_to_its_man_page(user):
    for program in ["tau", *(c.program for c in registry.COMMANDS)]:
        assert shutil.which(program, path=user["env"]["PATH"]) == str(user["venv"] / "bin" / program)
    proc = run(["tau-init", "--help"], env=user["env"], cwd=user["home"])
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("Usage: tau-init")
    assert "man tau-init" in proc.stdout


def test_the_worked_example_runs_end_to_end_with_the_installed_tau(user):
    work = user["home"] / "example"
    work.mkdir()
    for name in ("run-demo.sh", "client.py"):  # the user's own copies: nothing is run from the checkout
        shutil.copy2(ROOT / "contrib" / "demo" / name, work / name)
    env = {**user["env"], "TAU_PYTHON": user["python"], "DEMO_CLIENT": str(work / "client.py"),
           "DEMO_DIR": str(work / "demo")}
    proc = run([str(work / "run-demo.sh")], env=env, cwd=work, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == f"demo: ok: 8 of 8 shards won; 800 of 800 records collected in {work}/demo/dataset"
    created = next(doc for doc in (json.loads(line) for line in lines if line.startswith("{"))
                   if isinstance(doc, dict) and "created" in doc)  # tau-init's output
    assert created["program"] == user["python"]
    assert "Traceback" not in proc.stderr


def test_man_finds_every_page_from_the_path_alone_and_renders_it(user):
    env = {**user["env"], "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80"}
    for page in MAN_PAGES:
        name, section = page.rsplit(".", 1)
        proc = run(["man", "-w", section, name], env=env, cwd=user["home"])
        assert (proc.returncode, proc.stdout.strip()) == (0, f"{user['venv']}/share/man/man{section}/{page}"), (
            proc.stderr)
    proc = run(["man", "tau-init"], env=env, cwd=user["home"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("TAU-INIT(1)")
    assert re.search(r"^NAME\n\s+tau-init - create a run", proc.stdout, re.M)


def test_tau_completion_bash_prints_a_script_that_bash_sources(user):
    proc = run(["bash", "-c", "source <(tau completion bash) && complete -p tau-init tau"], env=user["env"],
               cwd=user["home"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["complete -o nosort -F _tau_init_completion tau-init",
                                        "complete -o nosort -F _tau_completion tau"]


def test_the_installed_completion_files_load_where_each_shell_looks(user):
    share = user["venv"] / "share"
    env = {**user["env"], "XDG_DATA_DIRS": f"{share}:/usr/share"}  # as for an install under /usr/local or ~/.local
    bash = run(["bash", "-c", "source /usr/share/bash-completion/bash_completion; _completion_loader tau-observe; "
                "COMP_WORDS=(tau-observe --ku); COMP_CWORD=1; _tau_observe_completion tau-observe; "
                "printf '%s\\n' \"${COMPREPLY[@]}\""], env=env, cwd=user["home"])
    assert (bash.returncode, bash.stdout) == (0, "--kubernetes\n"), bash.stderr
    fish = run(["fish", "-c", "complete -C 'tau-observe --ku'; complete -C 'tau observe --wa'"], env=env,
               cwd=user["home"])
    assert fish.returncode == 0, fish.stderr
    assert [line.split("\t")[0] for line in fish.stdout.splitlines()] == ["--kubernetes", "--watch"]
    zsh = run(["zsh", "-fc", f"fpath=({share}/zsh/site-functions $fpath); autoload -U compinit && compinit -u -D; "
               "print -r -- $_comps[tau] $_comps[tau-init] $_comps[tau-bundle-fetch]"], env=env, cwd=user["home"])
    assert (zsh.returncode, zsh.stdout) == (0, "_tau _tau _tau\n"), zsh.stderr
