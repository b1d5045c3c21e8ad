"""What a tool produced, before the output cap: shared by the built-in tools and your own, and
the one place it becomes the ``ToolResult`` every tool activity returns (``result``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from treadle.workflows.agent.messages.models import ToolResult


@dataclass(frozen=True)
class ToolOutput:
    """What a tool produced, before the output cap.

    ``success=False`` is a failure whose output is still worth showing (a command's exit code
    and log); failures with only a message raise ``ToolError`` instead.
    """

    text: str
    success: bool = True
    mutated_paths: tuple[str, ...] = ()
    content_hashes: tuple[tuple[str, str], ...] = ()
    """(path, sha256 of the new content) per written file, so progress tracking can tell a
    real change from the same content written again."""
    omitted_chars: int = 0
    """Output dropped before ``text`` was built; for a command's flood of output this counts
    undecoded bytes, which equals characters for ASCII."""

    def result(self, limit: int) -> ToolResult:
        """The ``ToolResult`` this output is: its text capped at ``limit`` characters, and a
        failure's prefixed with ``ERROR:``."""
        text = cap_output(self.text, limit, self.omitted_chars)
        if not self.success:
            return failed(text)
        return ToolResult(
            success=True,
            output=text,
            mutated_paths=self.mutated_paths,
            content_hashes=dict(self.content_hashes),
        )


def failed(message: str, limit: int | None = None) -> ToolResult:
    """A failed call as the model reads it: ``ERROR: ...``, capped at ``limit`` when given."""
    text = message if limit is None else cap_output(message, limit)
    return ToolResult(success=False, output=f"ERROR: {text}")


def cap_output(text: str, limit: int, omitted: int = 0) -> str:
    """``text`` cut to ``limit`` characters, with a note saying how much was cut."""
    cut = max(0, len(text) - limit) + omitted
    if cut == 0:
        return text
    return f"{text[:limit]}\n[... {cut} more characters cut]"


def content_hash(data: bytes) -> str:
    """What a tool wrote (or a command printed), for progress tracking: sha256, 16 hex digits."""
    return hashlib.sha256(data).hexdigest()[:16]
