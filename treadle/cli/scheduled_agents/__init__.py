"""`treadle schedule ...`: scheduled agents on the command line (the schedule and its
monitor themselves are made by ``treadle.agent_schedules``).

The modules: ``commands`` (the `schedule` command and its subcommands), ``plan`` (checking
`create`'s options before anything connects), ``report`` (what `list` and `show` print).
"""

from __future__ import annotations

from treadle.cli.scheduled_agents.commands import register
from treadle.cli.scheduled_agents.report import RunningSlot, ScheduleListing, format_schedule

__all__ = ["RunningSlot", "ScheduleListing", "format_schedule", "register"]
