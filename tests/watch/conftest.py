"""Watching a run: the live stream a run publishes, reading it, and the live view of
``watch``, ``run --wait`` and ``chat``.

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
