"""A run's requests in a few words, the same on every face: a line cut short, and what a client
query asks for (``the file src/main.rs``)."""

from __future__ import annotations

from treadle.workflows.agent.messages.events import ClientQuery

__all__ = ["SHORT_CHARS", "describe_query", "short"]

SHORT_CHARS = 120
"""A tool's output or an argument list is cut to this in one line."""


def short(text: str, limit: int = SHORT_CHARS) -> str:
    """The first line of ``text``, cut to ``limit`` characters."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def describe_query(query: ClientQuery) -> str:
    """What a client query asks for, as a phrase (``the file src/main.rs``)."""
    what = short(query.what, 200)
    if query.kind == "file_read":
        return f"the file {what}"
    if query.kind == "environment":
        return "its environment" if what in ("", "*") else f"the environment variable(s) {what}"
    return f"an answer: {what}"
