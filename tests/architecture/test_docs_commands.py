"""Every command the docs print runs as written in a fresh shell after the README's install:
Treadle's programs and the ``temporal`` CLI by their virtualenv path (nothing is on ``PATH``;
``python starter.py`` needs the virtualenv's Python), and every ``treadle`` command named is
one the command line has."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from treadle.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
JOURNAL = ROOT / "docs" / "benchmarks-journal.md"
"""A record of what was measured, each entry as it was run then: not instructions."""

SHELL_BLOCKS = {"bash", "sh", "shell", "console"}
"""Fenced blocks of commands (an unlabelled block is a layout, a listing or output)."""
BARE = re.compile(
    r"^(?:\$ )?(?:(?:treadle|temporal) [a-z]|python3? (?!-m venv)|starter\.py|worker\.py|pip )"
)
"""A command line that only works with the virtualenv activated (or not at all)."""
INLINE = re.compile(
    r"(?<![/\w.-])`((?:treadle|temporal) [a-z][\w-]*[^`]*|python3? -m (?!venv)[^`]*)`"
)
"""An inline command: ``treadle run ...``, ``temporal workflow ...``, ``python -m ...``."""
TREADLE = re.compile(r"\.venv/bin/treadle(?: --[\w-]+(?: [^\s-][^\s]*)?)* ([a-z][\w-]*)")
"""A command of ours, after any global options: its subcommand."""


def bare_commands(path: Path) -> list[tuple[int, str]]:
    """The commands of ``path`` that name a program bare: lines of its shell blocks, and
    inline commands outside blocks, with their line numbers."""
    found: list[tuple[int, str]] = []
    block: str | None = None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = re.match(r"\s*```(\w*)", line)
        if fence:
            block = None if block is not None else fence.group(1)
            continue
        if block in SHELL_BLOCKS and BARE.match(line.strip()):
            found.append((number, line.strip()))
        elif block is None and line.startswith("    ") and BARE.match(line.strip()):
            found.append((number, line.strip()))  # an indented code block (in a list)
        elif block is None:
            found += [(number, m.group(1)) for m in INLINE.finditer(line)]
    return found


def subcommands() -> set[str]:
    parser = build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(action.choices)


def test_every_command_in_the_docs_names_its_program_by_path() -> None:
    """No doc but the benchmarks journal prints ``treadle ...``, ``temporal ...``, ``python
    ...`` or ``starter.py`` bare: each is ``.venv/bin/...``, as the README's install leaves it."""
    bare = [
        f"{path.relative_to(ROOT)}:{number}: {text}"
        for path in DOCS
        if path != JOURNAL
        for number, text in bare_commands(path)
    ]
    assert bare == []


def test_every_treadle_command_in_the_docs_exists() -> None:
    """Each ``.venv/bin/treadle SUBCOMMAND`` the docs print is a subcommand the CLI has."""
    known = subcommands()
    unknown = [
        f"{path.relative_to(ROOT)}:{number}: {match.group(1)}"
        for path in DOCS
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in TREADLE.finditer(line)
        if match.group(1) not in known
    ]
    assert unknown == []
