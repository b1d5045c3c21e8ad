"""Cron monitor activities (housekeeping and anything with I/O)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ACTIVITIES: list[Callable[..., Any]] = []
"""Activities worker.py registers for cron monitoring."""
