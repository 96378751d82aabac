"""taulib.rules.program: which argument of an interpreter's command line is the script it runs, and whether a
program lies inside tau's own environment."""

from __future__ import annotations

import pytest

from taulib.rules.program import inside, interpreter, script_index


@pytest.mark.parametrize("program,kind", [
    ("python", "python"), ("python3", "python"), ("python3.11", "python"), ("/usr/bin/python3.12", "python"),
    ("pypy3", "python"), ("bash", "bash"), ("/bin/sh", "sh"), ("Rscript", "Rscript"), ("perl", "perl"),
    ("ruby", "ruby"), ("node", "node"), ("./client.py", None), ("true", None), ("python-config", None),
    ("pythonw", None)])
def test_an_interpreter_is_known_by_its_file_name(program, kind):
    assert interpreter(program) == kind


@pytest.mark.parametrize("argv,index", [
    (["python", "client.py"], 1),
    (["python3", "-u", "client.py", "--rows", "10"], 2),
    (["python3", "-uB", "client.py"], 2),
    (["python3", "-W", "ignore", "client.py"], 3),
    (["python3", "-Werror", "client.py"], 2),
    (["python3", "-X", "dev", "-u", "client.py"], 4),
    (["python3", "--", "client.py"], 2),
    (["python3", "-m", "mypkg.client"], None),
    (["python3", "-um", "mypkg.client"], None),
    (["python3", "-c", "print(1)"], None),
    (["python3", "-"], None),
    (["python3", "--version"], None),
    (["python3"], None),
    (["python3", "-u"], None),
    (["bash", "run.sh", "x"], 1),
    (["sh", "-c", "exec client"], None),
    (["sh", "-e", "run.sh"], None),  # another interpreter's options are not guessed at
    (["Rscript", "fit.R"], 1),
    (["perl", "-e", "print 1"], None),
    (["/opt/client", "client.py"], None),
    ([], None),
    (["bash"], None),  # an interpreter alone reads standard input
    (["python3", "--"], None),
    (["python3", "--", "-"], None),  # standard input, after the end of the options
    (["python3", "--version", "client.py"], None),  # python prints its version; the script is never run
    (["python3", "--help", "client.py"], None),
    (["python3", "-", "client.py"], None),  # the script comes from standard input; client.py is its argument
])
def test_the_script_is_the_interpreters_first_argument_that_is_not_an_option(argv, index):
    assert script_index(argv) == index


def test_a_path_inside_a_prefix_is_inside_it_and_a_neighbour_is_not():
    assert inside("/home/me/tau/.venv/bin/python3", "/home/me/tau/.venv")
    assert inside("/home/me/tau/.venv/bin/../bin/python3", "/home/me/tau/.venv/")
    assert not inside("/home/me/tau/.venv2/bin/python3", "/home/me/tau/.venv")
    assert not inside("/usr/bin/python3", "/home/me/tau/.venv")
    assert not inside("/home/me/tau/.venv", "/home/me/tau/.venv")
    assert inside("/usr/bin/python3", "/")  # everything is inside the root folder
    assert not inside("/home/me/Y/bin/python3", "/home/me/X")  # a prefix is a whole folder name, never trimmed
