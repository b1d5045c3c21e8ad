"""MCP servers' tools: the config file, the names the model sees, listing and calling over
stdio and HTTP, failures, and MCP tools inside real runs.

No fixture of its own yet: the session's (tests/conftest.py) serve it."""
