"""What the HTTP API takes and answers, as pydantic models: the OpenAPI document's schemas are
generated from them (``operations.openapi``), and a body that does not fit one is a 400 naming
the field. Unknown fields are refused (``Frozen``), so a typo is an error, not a silent default.

What the API answers that the run itself answers (``AgentStatus``, ``Trace``, ``AgentResult``,
``ThreadExport``) and what the client answers (``StartedRun``, ``RunSummary``, ``Woken``) are
sent as they are; the models here are the API's own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from treadle.client import RunSummary
from treadle.workflows.agent.messages.events import MAX_DECLINE_CHARS
from treadle.workflows.agent.messages.models import AgentConfig
from treadle.workflows.base import Frozen

__all__ = [
    "Answer",
    "Answered",
    "Approve",
    "Cancelling",
    "Closing",
    "DecisionTaken",
    "ErrorBody",
    "Guide",
    "Message",
    "Modify",
    "Reject",
    "RunList",
    "RunView",
    "Sent",
    "StartRun",
    "Transcript",
    "Wake",
]

Name = Field(default=None, min_length=1, max_length=200)


class ErrorBody(Frozen):
    """Every error: its status code and one line saying why."""

    error: str


class StartRun(Frozen):
    """A run (or a thread, ``thread: true``) to start."""

    task: str = Field(min_length=1, max_length=100_000)
    """What to do (a thread: its first message)."""
    model: str | None = Field(default=None, min_length=1, max_length=200)
    """``provider:model``: ``openai:gpt-4o``, ``ollama:llama3``... (docs/models.md); default:
    the server's (``--model``: ``openai:gpt-4o``, or the demo's ``openai:demo`` on its queue)."""
    thread: bool = False
    workspace: str | None = Field(default=None, max_length=4096)
    """A directory on the worker's host that must exist; default: a new one of its own in the
    data directory (``workspaces/ID``)."""
    config: AgentConfig = AgentConfig()
    """Limits, approvals, tools...: the run's whole configuration (docs/configuration.md)."""
    id: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"^[\w.:-]+$")
    """Its workflow id (default ``agent-<random>`` / ``thread-<random>``); never a second run
    under one (409)."""
    task_type: str = Field("default", min_length=1, max_length=100)


class RunList(Frozen):
    """The newest runs and threads, and the filters the list takes."""

    runs: list[RunSummary]
    filters: list[str]


class RunView(Frozen):
    """A run as a front end shows it: its status, its calls' arguments and results (from its
    conversation), the schemas of the calls waiting for approval, its Web UI link, its memory
    namespace."""

    id: str
    status: dict[str, Any]
    """``AgentStatus``, as ``GET /v1/runs/{id}`` answers it."""
    progress: str | None
    calls: dict[str, dict[str, Any]]
    schemas: dict[str, dict[str, Any]]
    web_ui: str | None
    memory: str | None = None
    """The long-term memory namespace the run remembers in (``config.memory``), if any."""


class Transcript(Frozen):
    """The run's stream folded into blocks (user messages, model text, tool calls, notes), and
    the offset they reach: follow it with ``GET /v1/runs/{id}/transcript/events?from=OFFSET``.
    ``offset`` is ``null`` when the run publishes no stream (``unavailable`` says why)."""

    blocks: list[dict[str, Any]]
    offset: int | None
    unavailable: str | None = None


class Approve(Frozen):
    """Approve the call waiting (``call_id``: needed when several wait)."""

    call_id: str | None = Field(default=None, max_length=200)
    decided_by: str | None = Name


class Reject(Frozen):
    """Reject the call waiting; the model reads ``reason``."""

    reason: str = Field(min_length=1, max_length=MAX_DECLINE_CHARS)
    call_id: str | None = Field(default=None, max_length=200)
    decided_by: str | None = Name


class Modify(Frozen):
    """Run the call waiting with new arguments. With ``tool`` (the call's), they are checked
    against its schema first; the run checks them again either way."""

    arguments: dict[str, Any]
    call_id: str | None = Field(default=None, max_length=200)
    tool: str | None = Field(default=None, max_length=200)
    decided_by: str | None = Name


class Guide(Frozen):
    """A stuck run waiting for a person: continue with ``guidance``, or ``halt`` it (``reason``:
    why). ``child``: a stuck sub-agent's call (``call_1``), which the run sends it on to."""

    guidance: str | None = Field(default=None, min_length=1, max_length=MAX_DECLINE_CHARS)
    halt: bool = False
    reason: str | None = Field(default=None, max_length=MAX_DECLINE_CHARS)
    child: str | None = Field(default=None, max_length=200)
    decided_by: str | None = Name


class DecisionTaken(Frozen):
    """What the run did with a decision."""

    done: Literal["approved", "rejected", "modified", "guided", "halted"]
    call_id: str | None = None
    tool: str | None = None


class Answer(Frozen):
    """Answer the run's client query ``query_id`` with ``content``, or decline it
    (``declined``: why); one of the two. A sub-agent's query is ``call_1/q1``."""

    query_id: str = Field(min_length=1, max_length=200)
    content: str | None = None
    declined: str | None = Field(default=None, min_length=1, max_length=MAX_DECLINE_CHARS)
    decided_by: str | None = Name


class Answered(Frozen):
    done: Literal["answered", "declined"]
    query_id: str


class Message(Frozen):
    """A thread's next message, and what it does when a turn is running (``mode``)."""

    text: str = Field(min_length=1, max_length=100_000)
    id: str | None = Field(default=None, min_length=1, max_length=200)
    """The message's own id: sending it again with the same id is one message (retries)."""
    mode: Literal["queue", "steer", "interrupt", "reject"] | None = None
    """While a turn runs: queued behind it, steered into it, interrupting its model call, or
    refused (409 with the reason); none: the thread's own ``mid_turn`` (docs/threads.md)."""


class Sent(Frozen):
    done: Literal["sent", "queued", "steered", "interrupting"]
    """``sent``: it starts a turn; otherwise how it met the running one."""
    position: int
    """1 for the next message to be answered (or to join the running turn)."""
    step: int = 0
    """The thread's step when it arrived."""


class Fork(Frozen):
    """A new run or thread from the end of step ``step`` of this one (docs/threads.md): its
    conversation up to there by reference, its workspace that step's snapshot (checked out
    into the server's ``workspaces/ID``), its config the original's with ``config`` over it."""

    step: int = Field(ge=0, le=1_000_000)
    message: str | None = Field(default=None, min_length=1, max_length=100_000)
    """A new instruction the fork's first model call reads."""
    id: str | None = Field(default=None, min_length=1, max_length=200)
    model: str | None = Field(default=None, min_length=1, max_length=200)
    config: dict[str, Any] | None = None
    """``AgentConfig`` fields over the original's."""


class Wake(Frozen):
    """End the ``wait`` tool's wait now; the model reads ``reason``."""

    reason: str = Field("", max_length=MAX_DECLINE_CHARS)


class Closing(Frozen):
    done: Literal["closing"]
    queued: int
    """Messages still queued, answered before the thread closes."""


class Cancelling(Frozen):
    done: Literal["cancelling"]
