"""`starter.py monitors ...` and `starter.py serve` (the HTTP ping service)."""

from __future__ import annotations

from typing import Any


def register(subparsers: Any) -> None:
    """Add the `monitors` and `serve` commands; each leaf sets `handler`."""
