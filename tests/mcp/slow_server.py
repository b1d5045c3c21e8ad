"""The MCP test server, slow to start and with one more tool: what a worker SIGKILLed in the
middle of a mutating call is tested against.

    python -m tests.mcp.slow_server --start-delay SECONDS   # stdio, from the project root

``note_and_wait(text, seconds)`` (mutating, not idempotent: no annotations saying otherwise)
appends ``text`` to the file ``MCP_TEST_NOTES`` names, then sleeps: a worker can be killed
while the call is on the server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from tests.support.mcp_server import MUTATING, server


@server.tool(annotations=MUTATING)
async def note_and_wait(text: str, seconds: float) -> str:
    """Append a line to the notes file, then wait."""
    notes = os.environ.get("MCP_TEST_NOTES")
    if notes:
        with open(notes, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")
    await asyncio.sleep(seconds)
    return f"noted: {text}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start-delay", type=float, default=0.0)
    args = parser.parse_args()
    time.sleep(args.start_delay)  # a server that takes its time before it answers anything
    server.run("stdio")


if __name__ == "__main__":
    main()
