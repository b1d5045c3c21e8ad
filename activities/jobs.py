"""Periodic job activities: the built-in jobs and the bookkeeping around job runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ACTIVITIES: list[Callable[..., Any]] = []
"""Activities worker.py registers for jobs."""
