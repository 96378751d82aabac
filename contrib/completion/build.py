#!/usr/bin/env python3
"""Write the shell completion files an installed tau carries, from the code that prints them.

`tau completion SHELL` prints tau's completion for bash, zsh and fish; the wheel also installs it as files where each
shell loads completion by itself (taulib.cli.completion.files says which). This script writes those files into the
checkout at the same paths under `share/` (what pyproject.toml's data-files installs), and removes any other file
there, so that the files in the repository are always exactly what the code prints. `make completions` runs it;
tests/test_completion_files.py fails when a committed file differs from what `tau completion SHELL` prints now.

  contrib/completion/build.py           write the files; print one line per file changed
  contrib/completion/build.py --check   write nothing; exit 1 when a file differs, is missing or is extra
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from taulib.cli import completion  # noqa: E402  (the checkout's taulib, whichever tau is installed)

# The folders that hold nothing but generated completion files.
FOLDERS = ("share/bash-completion/completions", "share/zsh/site-functions", "share/fish/vendor_completions.d")


def wanted() -> dict[str, str]:
    """Every completion file, by its path relative to the checkout, with its text."""
    result: dict[str, str] = {}
    for shell in completion.SHELLS:
        result.update(completion.files(shell))
    return result


def differences(root: Path = ROOT) -> list[str]:
    """One line per file under FOLDERS that is missing, extra or different from what the code prints."""
    want = wanted()
    have = {str(p.relative_to(root)) for folder in FOLDERS if (root / folder).is_dir()
            for p in (root / folder).iterdir() if p.is_file()}
    lines = [f"extra   {path}" for path in sorted(have - set(want))]
    for path, text in want.items():
        if path not in have:
            lines.append(f"missing {path}")
        elif (root / path).read_text(encoding="utf-8") != text:
            lines.append(f"differs {path}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contrib/completion/build.py", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is out of date")
    args = parser.parse_args(argv)
    lines = differences()
    if args.check:
        for line in lines:
            print(line)
        if lines:
            print("contrib/completion/build.py: completion files are out of date; run make completions",
                  file=sys.stderr)
        return 1 if lines else 0
    want = wanted()
    for line in lines:
        state, path = line.split(maxsplit=1)
        if state == "extra":
            (ROOT / path).unlink()
        else:
            (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
            (ROOT / path).write_text(want[path], encoding="utf-8")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
