"""The benchmark suite runs end to end (nothing timed is asserted).

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
