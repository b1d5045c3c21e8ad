"""The base of every tool's argument model (built-in, your own), apart from the catalogue so a
tool module can import it without importing the catalogue that lists it."""

from __future__ import annotations

from workflows.base import Frozen


class ToolArgs(Frozen):
    """Base of every argument schema: unknown keys are an error, not silently dropped."""
