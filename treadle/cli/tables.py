"""The one table printer of the command line: left-aligned columns, two spaces apart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

__all__ = ["table"]

Strip = Literal["lines", "end", "none"]


def table(rows: Sequence[Sequence[str]], *, strip: Strip = "lines") -> str:
    """``rows`` (the header first) as text, one line per row, without a final newline.

    Every column but the last is padded to its widest cell; the last is written as it is, so a
    long last column (details, output) never widens the others. ``strip`` says where trailing
    blanks go: ``"lines"`` from every line (so padding every column, last included, gives the
    same text), ``"end"`` only from the end of the table, ``"none"`` nowhere (a row whose last
    cell is empty then ends in the separator).
    """
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join([*(row[i].ljust(width) for i, width in enumerate(widths)), row[-1]])
        for row in rows
    ]
    if strip == "lines":
        lines = [line.rstrip() for line in lines]
    text = "\n".join(lines)
    return text.rstrip() if strip == "end" else text
