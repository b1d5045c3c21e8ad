"""`starter.py jobs ...`: list, history, trigger, pause, unpause, sync."""

from __future__ import annotations

from typing import Any


def register(subparsers: Any) -> None:
    """Add the `jobs` command; each leaf sets `handler` (async (client, args) -> exit code)."""
