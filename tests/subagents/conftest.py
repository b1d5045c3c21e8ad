"""Sub-agents: the ``delegate`` tool, child runs, their family budget and lifetime.

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
