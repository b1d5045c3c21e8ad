"""What outlives a process: killed workers, several workers, replay of recorded histories, a
small history, the conversation store (file and S3), External Storage and encryption.

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
