"""The layers' import rules, checked over the source.

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
