"""What leaves a worker: traces, metrics, logs; and API keys in none of them, nor in a run's
history.

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
