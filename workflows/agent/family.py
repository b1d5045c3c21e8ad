"""A run's children as the run records them: one ``ChildRun`` per ``delegate`` call that
started a sub-agent, kept in ``AgentRun.family`` (carried across continue-as-new) and shown by
``status``. Pure data; what starts and awaits them is ``delegation``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from workflows.base import Frozen, Mutable

ChildStatus = Literal["running", "done", "error", "halted", "cancelled", "failed"]
"""``running`` until it ends; then its ``AgentResult`` status (``done``, ``error``, ``halted``),
or ``cancelled`` / ``failed`` (it crashed, timed out, was terminated) by how its workflow
closed."""


class ChildRun(Frozen):
    """One sub-agent of the run: which call started it, where it is, what it spent."""

    call_id: str
    workflow_id: str
    task: str
    """The sub-task, cut to a line's worth."""
    model: str
    step: int
    """The parent's step whose call started it."""
    token_budget: int | None = None
    """The share of the parent's budget reserved for it (``None``: the parent has none)."""
    status: ChildStatus = "running"
    tokens: int = 0
    """Tokens it spent (its whole family's), counted in the parent's usage once it ended."""
    cost_usd: float | None = None
    steps: int = 0
    outcome: str | None = None
    """Its answer or why it did not answer, cut to a line's worth."""


class Family(Mutable):
    """The children one run started, in the order it started them."""

    children: list[ChildRun] = Field(default_factory=list)

    def reserved(self) -> int:
        """Tokens held for children still running (their shares, spent or not)."""
        return sum(c.token_budget or 0 for c in self.children if c.status == "running")

    def running(self) -> tuple[ChildRun, ...]:
        return tuple(c for c in self.children if c.status == "running")

    def started(self, call_id: str) -> ChildRun | None:
        return next((c for c in self.children if c.call_id == call_id), None)

    def replace(self, child: ChildRun) -> None:
        """``child`` ended (or changed): its record replaces the one of the same call."""
        self.children = [child if c.call_id == child.call_id else c for c in self.children]
