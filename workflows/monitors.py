"""Cron monitors: one long-lived workflow per monitor, missed runs and timeouts by timers."""

from __future__ import annotations

from typing import Any

WORKFLOWS: list[type[Any]] = []
"""Workflow classes worker.py registers for cron monitoring."""
