"""A run that waits on someone: approvals of tool calls, and the questions a run asks its
client (the client's answers and what it refuses to share).

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
