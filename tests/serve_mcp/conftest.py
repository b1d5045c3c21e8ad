"""Treadle as an MCP server (``treadle serve mcp``), tested as an MCP client uses it: the real
server process (over stdio, and over streamable HTTP), the ``mcp`` package's own client, the
real dev server, a real worker and the scripted model."""
