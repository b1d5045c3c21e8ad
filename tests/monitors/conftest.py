"""Monitors: cron arithmetic, the monitor rules, MonitorWorkflow on real and time-skipping
servers, the HTTP ping service and the ``monitors`` commands.

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
