"""Periodic jobs: the job workflow started by Temporal Schedules, and each job's run ledger."""

from __future__ import annotations

from typing import Any

WORKFLOWS: list[type[Any]] = []
"""Workflow classes worker.py registers for jobs."""
