"""The completion files in share/, which the wheel installs where each shell looks, are what tau prints now.

They are golden files generated from taulib.cli.completion: `make completions` (contrib/completion/build.py) writes
them again after an intended change. These tests fail when one differs from what `tau completion SHELL` prints, is
missing, or is left over from a command that no longer exists.
"""

from __future__ import annotations

import importlib.util
import subprocess

import pytest

from helpers import PYTHON, ROOT, tau
from taulib.cli import completion, registry

REGENERATE = "run `make completions` to write them again from the code"


@pytest.mark.parametrize("shell", completion.SHELLS)
def test_the_committed_files_joined_are_exactly_what_tau_completion_prints(shell):
    proc = tau("tau", "completion", shell)
    assert proc.returncode == 0, proc.stderr
    paths = list(completion.files(shell))
    missing = [path for path in paths if not (ROOT / path).is_file()]
    assert not missing, f"{missing} are missing; {REGENERATE}"
    committed = "\n".join((ROOT / path).read_text(encoding="utf-8") for path in paths)
    assert committed == proc.stdout, f"share/'s {shell} completion differs from `tau completion {shell}`; {REGENERATE}"


def test_every_program_has_its_file_where_its_shell_loads_it():
    programs = ["tau", *(c.program for c in registry.COMMANDS)]
    assert sorted(completion.files("bash")) == sorted(f"share/bash-completion/completions/{p}" for p in programs)
    assert sorted(completion.files("fish")) == sorted(f"share/fish/vendor_completions.d/{p}.fish" for p in programs)
    (zsh,) = completion.files("zsh").values()
    assert zsh.splitlines()[0] == f"#compdef {' '.join(programs)}"


def test_the_check_finds_no_stale_missing_or_extra_file_and_names_the_one_that_differs(tmp_path):
    check = subprocess.run([PYTHON, str(ROOT / "contrib/completion/build.py"), "--check"], capture_output=True,
                           text=True, timeout=60)
    assert (check.returncode, check.stdout, check.stderr) == (0, "", "")
    spec = importlib.util.spec_from_file_location("completion_build", ROOT / "contrib/completion/build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    for path, text in build.wanted().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    assert build.differences(tmp_path) == []
    (tmp_path / "share/bash-completion/completions/tau-init").write_text("# edited by hand\n", encoding="utf-8")
    (tmp_path / "share/fish/vendor_completions.d/tau-gone.fish").write_text("", encoding="utf-8")
    (tmp_path / "share/zsh/site-functions/_tau").unlink()
    assert build.differences(tmp_path) == ["extra   share/fish/vendor_completions.d/tau-gone.fish",
                                           "differs share/bash-completion/completions/tau-init",
                                           "missing share/zsh/site-functions/_tau"]
