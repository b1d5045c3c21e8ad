"""Cron monitor activities: none. A monitor's work is bookkeeping and durable timers, all inside
``MonitorWorkflow``; check-ins reach it as signals from the HTTP service, the CLI or Python code,
and a monitor's state is bounded and carried by continue-as-new, so nothing needs housekeeping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ACTIVITIES: list[Callable[..., Any]] = []
"""Activities worker.py registers for cron monitoring."""
