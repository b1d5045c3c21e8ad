"""The agent loop: the state machine and its table, the run's state and memory rules,
progress and stuck detection, budgets and confidence, and how runs end on bad input, bad model
output and failures.

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
