"""starter.py and worker.py as users run them: commands, exit codes, validation of starts,
the demo, the dev server, the worker process.

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
