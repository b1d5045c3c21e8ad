"""A run's children as the run records them: one ``ChildRun`` per ``delegate`` call that
started a sub-agent, kept in ``AgentRun.family`` (carried across continue-as-new) and shown by
``status``. Pure data; what starts and awaits them is ``delegation``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PrivateAttr

from treadle.workflows.agent.messages.decisions import PendingApproval
from treadle.workflows.agent.messages.events import ClientQuery
from treadle.workflows.base import Frozen, Mutable

SEPARATOR = "/"
"""A child's call as its parent names it: ``<the parent's delegate call id>/<the child's call
id>`` (``call_1/call_t0_0``), so a decision sent to the parent reaches the right child."""

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
    cost_budget_usd: float | None = None
    """The share of the parent's cost cap reserved for it (``None``: the parent has none)."""
    status: ChildStatus = "running"
    tokens: int = 0
    """Tokens it spent (its whole family's): while it runs, what it last reported (held in its
    reservation, not yet in the parent's usage); once it ended, what was counted there."""
    cost_usd: float | None = None
    """Its cost (its whole family's), reported while it runs, final once it ended."""
    state: str | None = None
    """Its state as it last reported (``Planning``, ``WaitingForHuman``...), while it runs."""
    stuck: str | None = None
    """Why it is stuck (recovering, or waiting for guidance in its own id), as it last
    reported; or why one of its own children is (``stuck_at``)."""
    stuck_at: str | None = None
    """Which of its children is stuck, by call path below it (``call_g``, deeper
    ``call_g/call_x``); ``None``: it is itself, or nothing is."""
    steps: int = 0
    outcome: str | None = None
    """Its answer or why it did not answer, cut to a line's worth."""
    pending_approvals: tuple[PendingApproval, ...] = ()
    """Its calls waiting for a human, as it last told its parent (by its own call ids)."""
    client_queries: tuple[ClientQuery, ...] = ()
    """Its client queries waiting for an answer, as it last told its parent (its own by their
    ids, its children's ``call_2/q1``)."""
    run_id: str | None = None
    """Its first run's id, once started (it may outlive its parent's run: it signals its end
    to the parent's workflow id, and a hand-over of the parent carries it)."""
    delivered: dict[str, Any] | None = None
    """How it ended, as it signalled it, until its call observes it: ``result`` (an
    ``AgentResult``'s JSON) or ``ended`` (why it closed without one)."""


class Family(Mutable):
    """The children one run started, in the order it started them."""

    children: list[ChildRun] = Field(default_factory=list)
    lost_cost_usd: float = 0.0
    """Dollars counted for children that ended without saying what they spent (their whole
    cost shares), and what a child's own such children cost: beyond its priced usage."""
    _handing_over: bool = PrivateAttr(default=False)

    @property
    def handing_over(self) -> bool:
        """The run hands over while children run (never carried): no call observes a child's
        end any more in this run; the next run does."""
        return self._handing_over

    def hand_over(self, handing_over: bool = True) -> None:
        """The run starts handing over (or, cancelled meanwhile, does not: its calls end in
        it)."""
        self._handing_over = handing_over

    def reserved(self) -> int:
        """Tokens held for children still running (their shares, spent or not)."""
        return sum(c.token_budget or 0 for c in self.children if c.status == "running")

    def reserved_cost(self) -> float:
        """Dollars held for children still running (their cost shares, spent or not)."""
        return sum(c.cost_budget_usd or 0.0 for c in self.children if c.status == "running")

    def running_tokens(self) -> int:
        """Tokens running children reported spending so far (inside their reservations)."""
        return sum(c.tokens for c in self.running())

    def running_cost(self) -> float:
        """Dollars running children reported spending so far (inside their reservations)."""
        return sum(c.cost_usd or 0.0 for c in self.running())

    def running(self) -> tuple[ChildRun, ...]:
        return tuple(c for c in self.children if c.status == "running")

    def started(self, call_id: str) -> ChildRun | None:
        return next((c for c in self.children if c.call_id == call_id), None)

    def replace(self, child: ChildRun) -> None:
        """``child`` ended (or changed): its record replaces the one of the same call."""
        self.children = [child if c.call_id == child.call_id else c for c in self.children]

    def pending(self) -> tuple[PendingApproval, ...]:
        """Every running child's calls waiting for a human, named as the parent takes decisions
        for them (``call_1/call_t0_0``)."""
        return tuple(
            p.model_copy(update={"call_id": f"{c.call_id}{SEPARATOR}{p.call_id}"})
            for c in self.children
            if c.status == "running"
            for p in c.pending_approvals
        )

    def stuck_below(self) -> tuple[str, str] | None:
        """The first running child that is stuck, or has a stuck child of its own: its call
        path as the parent guides it (``call_1``, ``call_1/call_2``) and why it is stuck."""
        for c in self.running():
            if c.stuck:
                below = f"{SEPARATOR}{c.stuck_at}" if c.stuck_at else ""
                return f"{c.call_id}{below}", c.stuck
        return None

    def queries(self) -> tuple[ClientQuery, ...]:
        """Every running child's client queries waiting for an answer, named as the parent
        takes answers for them (``call_1/q1``)."""
        return tuple(
            q.model_copy(update={"id": f"{c.call_id}{SEPARATOR}{q.id}"})
            for c in self.children
            if c.status == "running"
            for q in c.client_queries
        )

    def waiting_query(self, query_id: str) -> tuple[ChildRun, ClientQuery] | None:
        """The child and its client query an answer names (``call_1/q1``), or ``None``."""
        outer, _, inner = query_id.partition(SEPARATOR)
        return next(
            (
                (c, q)
                for c in self.running()
                for q in c.client_queries
                if (c.call_id, q.id) == (outer, inner)
            ),
            None,
        )

    def waiting_call(self, call_id: str | None) -> tuple[ChildRun, PendingApproval] | None:
        """The child and its pending call a decision names (``call_1/call_t0_0``; no id: the
        only one waiting in the family), or ``None``: not a child's."""
        pending = [(c, p) for c in self.running() for p in c.pending_approvals]
        if call_id is None:
            return pending[0] if len(pending) == 1 else None
        outer, _, inner = call_id.partition(SEPARATOR)
        return next(((c, p) for c, p in pending if (c.call_id, p.call_id) == (outer, inner)), None)
