"""What outlives a process: killed workers, several workers, replay of recorded histories, a
small history, the conversation store (file and S3), External Storage and encryption, and
new builds deployed while runs live (Worker Deployments).

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
