"""What ``AgentClient`` answers, as typed models (the run's own messages, ``AgentStatus``,
``Trace``, ``ThreadExport``..., are answered as they are; these are the client's own).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from treadle.workflows.agent.messages.models import AgentStatus, ThreadExport
from treadle.workflows.base import Frozen

__all__ = [
    "Decided",
    "ImportedThread",
    "RunOverview",
    "RunSummary",
    "StartedRun",
    "Woken",
]


class StartedRun(Frozen):
    """A run or thread just started."""

    id: str
    """Its workflow id: what every other call names it by."""
    run_id: str
    """The first run of its chain (continue-as-new starts others under the same id)."""
    task_queue: str
    thread: bool


class Decided(Frozen):
    """A decision the run took (``decide``)."""

    run_id: str
    action: Literal["approve", "reject", "modify", "guide"]
    call_id: str | None = None
    """The call decided (approve / reject / modify); for guide, the sub-agent's call it was
    sent on to, if any."""
    tool: str | None = None
    """The decided call's tool (approve / reject / modify)."""
    halted: bool = False
    """A guide that told the run (or its sub-agent) to halt."""

    @property
    def done(self) -> str:
        """What happened, in a word: approved, rejected, modified, guided or halted."""
        if self.action == "guide":
            return "halted" if self.halted else "guided"
        return {"approve": "approved", "reject": "rejected", "modify": "modified"}[self.action]


class Woken(Frozen):
    """A parked run (the ``wait`` tool) told to wake now."""

    run_id: str
    would_have_woken_at: datetime | None = None
    """When its timer would have woken it."""


class RunOverview(Frozen):
    """A run as a person looks at it: its status and, when its worker answers it, its
    conversation (``export``: every call's arguments and result)."""

    status: AgentStatus
    export: ThreadExport | None = None


class RunSummary(Frozen):
    """One run or thread in a list (Temporal visibility, and the run's status when its worker
    answered in time)."""

    id: str
    state: str
    """The agent's state (``WaitingForHuman``...), or how its workflow closed."""
    execution: str
    """The workflow's execution status: ``running``, ``completed``, ``failed``..."""
    step: int | None = None
    model: str | None = None
    started: datetime | None = None
    closed: datetime | None = None
    task: str | None = None
    """Its task (a thread: its first message), when its worker answered."""
    thread: bool | None = None
    last: str | None = None
    """Its last event, when its worker answered."""
    waiting_for: str | None = None
    """Who an open run waits for, in words (a person, its client, its user, its sub-agent)."""
    waiting_on: str | None = None
    """The workflow id of the sub-agent it waits for (its ``delegate`` call is running)."""
    answered: bool = False
    """Whether its worker answered the state query (else: from visibility alone)."""


class ImportedThread(Frozen):
    """A thread started from an exported one (Loom's JSON)."""

    id: str
    workspace: str
    ignored: tuple[str, ...] = ()
    """Settings the file asked for that were not applied (``trust`` applies them)."""
    widened: tuple[str, ...] = ()
    """With ``trust``: what the file's settings grant beyond the importer's."""
    trusted: bool = False
    workspace_note: str | None = None
    """What became of the thread's workspace snapshot (checked out, or left alone)."""
    memory_note: str | None = None
    """What became of the file's long-term memory items (restored into the new thread's
    namespace, or why not); ``None``: the file had none."""


class Forked(Frozen):
    """A fork just started (``fork``): a new run or thread from a step of another."""

    id: str
    run_id: str
    """The first run of its chain."""
    thread: bool
    forked_from: str
    step: int
    workspace: str
    workspace_note: str
    """What became of step ``step``'s workspace snapshot (checked out, or none to take)."""
