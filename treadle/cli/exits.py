"""How Treadle's command-line processes end: with the right code, every time."""

from __future__ import annotations

import gc
import importlib
import os
import sys
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import NoReturn, cast


class UsageError(Exception):
    """Bad input from the user: printed as one line (``error: ...``), exit code 2."""


def command(module: str) -> Callable[[], int]:
    """``module.main``, the command line's (``imported``)."""
    return cast(Callable[[], int], imported(module).main)


def imported(module: str) -> ModuleType:
    """``module``, imported with the garbage collector paused and what the import made
    frozen (``gc.freeze``): the commands' modules define a few thousand pydantic models and
    classes that live as long as the process, and the collector, run again and again while
    they are made and at every collection after, found nothing to free in them. A command
    starts in about three quarters of the CPU time; a worker's collections skip them too."""
    gc.disable()
    try:
        return importlib.import_module(module)
    finally:
        gc.freeze()
        gc.enable()


def run_and_exit(main: Callable[[], int]) -> NoReturn:
    """Run ``main`` and leave with its exit code, skipping interpreter teardown.

    A process that used a temporalio client can abort while Python finalises (the core runtime's
    threads outlive the interpreter state), turning a clean exit into a crash code. So we flush
    and ``os._exit``, after printing any traceback ourselves, since ``os._exit`` skips that too.
    """
    code = 1
    try:
        code = main()
    except SystemExit as exc:  # argparse: --help, usage errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = _reader_gone()
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
        except BrokenPipeError:  # what was still buffered when the reader left
            code = _reader_gone()
        sys.stderr.flush()
    os._exit(code)


PIPE_CLOSED = 141
"""The exit code of a command whose reader stopped reading (``| head``): 128 + SIGPIPE, what
a shell reports for a program the signal ended."""


def _reader_gone() -> int:
    """Standard output's reader has gone (``treadle status ID | head``): nothing more can be
    said there, and that is no error to report; what is still buffered goes nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return PIPE_CLOSED


def console() -> NoReturn:
    """The ``treadle`` console script."""
    run_and_exit(command("treadle.cli.main"))  # the parser and every command: loaded when run
