"""Threads: a conversation that waits for its user, from the workflow, the command line, and
through killed workers and a restarted server.

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
