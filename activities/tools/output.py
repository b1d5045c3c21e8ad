"""What a tool produced, before the output cap: shared by the built-in tools and your own."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


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


def content_hash(data: bytes) -> str:
    """What a tool wrote (or a command printed), for progress tracking: sha256, 16 hex digits."""
    return hashlib.sha256(data).hexdigest()[:16]
