"""Scheduled agents: ``schedule`` commands, runs checking in with their monitors, and time
passing on the time-skipping server.

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
