"""How Treadle's command-line processes end: with the right code, every time."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn


class UsageError(Exception):
    """Bad input from the user: printed as one line (``error: ...``), exit code 2."""


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
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def console() -> NoReturn:
    """The ``treadle`` console script."""
    from treadle.cli.main import main  # the parser and every command: loaded when run

    run_and_exit(main)
