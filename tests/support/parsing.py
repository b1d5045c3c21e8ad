"""``ast.parse`` for the suite's source checks, safe beside other threads.

CPython 3.11 up to 3.11.8 keeps the AST constructor's recursion depth in state the threads
share (python/cpython#106905): a parse in one thread while another parses (3.11's traceback
module parses a line to place its carets, so any thread that logs a traceback does) can fail
with ``SystemError: AST constructor recursion depth mismatch``. Seen once in the suite beside
CPU burners, while a worker thread logged an error. The source is fine; parsing it again is.
"""

from __future__ import annotations

import ast

__all__ = ["parse"]

TRIES = 5


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source)``, again when the shared-depth race (and only it) failed it."""
    for _ in range(TRIES - 1):
        try:
            return ast.parse(source, filename=filename)
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc):
                raise
    return ast.parse(source, filename=filename)
