"""The one door for content: every secret the worker knows is redacted from whatever leaves an
activity (results, failures, heartbeats, logs, stored blobs, streamed tokens, spans).

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
