#!/usr/bin/env python3
"""Render and lint tau's man pages.

The roff sources in `man/` (man(7) macros, one page per command plus tau-run(5)) are the one source of the manual.
This script renders each with `mandoc -Tutf8` into `build/man/<page>.txt` (plain text: overstrike removed) and lints
each with `mandoc -Tlint -Wwarning`. It prints one line per page and exits 0 when every page rendered and linted
clean, 1 when any page has a lint warning or failed to render, and 69 when mandoc is not installed
(`apt-get install mandoc`, or `make system-deps` as root).

  man/build.py              every page
  man/build.py tau.1 ...    only these pages (names or paths)
  man/build.py --lint-only  lint, write nothing
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

MAN_DIR = Path(__file__).resolve().parent
ROOT = MAN_DIR.parent
OUT_DIR = ROOT / "build" / "man"
PAGE = re.compile(r"^[a-z][a-z0-9-]*\.[1-8]$")
OVERSTRIKE = re.compile(r".\x08")


def pages(names: list[str] | None = None) -> list[Path]:
    """The page sources: every `man/<name>.<section>`, or the ones named."""
    if not names:
        return sorted(p for p in MAN_DIR.iterdir() if p.is_file() and PAGE.match(p.name))
    found = []
    for name in names:
        path = Path(name) if "/" in name else MAN_DIR / name
        if not path.is_file():
            raise FileNotFoundError(f"man/build.py: no man page {name!r}")
        found.append(path)
    return found


def lint(page: Path) -> list[str]:
    """mandoc's lint messages at level warning and above (empty when the page is clean)."""
    proc = subprocess.run(["mandoc", "-Tlint", "-Wwarning", str(page)], capture_output=True, text=True)
    messages = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    if proc.returncode != 0 and not messages:
        messages = [f"{page.name}: mandoc -Tlint exited with status {proc.returncode}"]
    return messages


def render(page: Path) -> str:
    """The page as plain UTF-8 text, as `man` would show it in a terminal."""
    proc = subprocess.run(["mandoc", "-Tutf8", str(page)], capture_output=True, text=True)
    if proc.returncode not in (0, 1):  # 1: mandoc rendered, but with messages below the warning level
        raise RuntimeError(f"{page.name}: mandoc -Tutf8 exited with status {proc.returncode}: {proc.stderr}")
    return OVERSTRIKE.sub("", proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="man/build.py", description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", help="page names (tau.1) or paths; default: every page in man/")
    parser.add_argument("--lint-only", action="store_true", help="lint only; write nothing")
    args = parser.parse_args(argv)
    if shutil.which("mandoc") is None:
        print("man/build.py: mandoc is not installed; install it (apt-get install mandoc, or make system-deps)",
              file=sys.stderr)
        return 69
    try:
        selected = pages(args.pages)
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 66
    if not selected:
        print(f"man/build.py: no man pages in {MAN_DIR}", file=sys.stderr)
        return 66
    failed = 0
    if not args.lint_only:
        OUT_DIR.mkdir(parents=True, exist_ok=True)
    for page in selected:
        messages = lint(page)
        try:
            text = None if args.lint_only else render(page)
        except RuntimeError as exc:
            messages.append(str(exc))
            text = None
        if text is not None:
            (OUT_DIR / f"{page.name}.txt").write_text(text, encoding="utf-8")
        if messages:
            failed += 1
            print(f"FAIL {page.name}", file=sys.stderr)
            for message in messages:
                print(f"  {message}", file=sys.stderr)
        else:
            where = "" if args.lint_only else f" -> {(OUT_DIR / (page.name + '.txt')).relative_to(ROOT)}"
            print(f"ok   {page.name}{where}")
    if failed:
        print(f"man/build.py: {failed} of {len(selected)} page(s) have lint warnings", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
