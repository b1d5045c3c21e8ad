"""What a run publishes on its live stream, and Loom's client queries.

Every run and thread hosts one ``temporalio.contrib.workflow_streams.WorkflowStream`` with two
topics:

- ``events`` (`AgentEvent`): published by the workflow itself. A workflow-side publish adds no
  history event; replay rebuilds the log, and continue-as-new carries its tail, so offsets keep
  counting across the chain.
- ``tokens`` (`TokenDelta`): published by the model activity while a streaming provider is still
  generating, in a bounded number of batches per call (each batch is one signal). A call that ends
  before its first batch is due publishes nothing here: its text arrives whole in the ``model``
  event.

A client reads both with the stream's own ``__temporal_workflow_stream_poll`` *query* (see
``treadle/cli/live/``), which adds nothing to the run's history however long it watches.

Pure data: safe in the workflow sandbox.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from treadle.workflows.base import Frozen, Lean

EVENTS_TOPIC = "events"
TOKENS_TOPIC = "tokens"

POLL_QUERY = "__temporal_workflow_stream_poll"
"""The stream's read-only poll query (registered by ``WorkflowStream``; the contrib module
exports no object for the name, so this is the one place it is spelt)."""
OFFSET_QUERY = "__temporal_workflow_stream_offset"
"""The stream's current end (base offset + items kept)."""

EVENTS_KEPT = 1_000
"""The stream keeps this many newest items in memory; older offsets are gone (a watcher that
asks for them starts at the oldest kept)."""
EVENTS_CARRIED = 200
"""At most this many items are handed to the next run of a continue-as-new chain ..."""
CARRIED_BYTES = 256 * 1024
"""... and at most this many bytes of them (the next run's input carries them)."""
MAX_EVENT_TEXT = 4_000
"""An event's ``text`` is cut to this many characters (the whole answer is in ``status``)."""
MAX_ARGUMENT_CHARS = 1_000
"""Each string in an event's ``arguments`` is cut to this many characters."""
REPORTED_EVENTS = 16
"""A sub-agent passes at most this many of its newest events to its parent per report (the
rest are counted); each with its ``text`` cut to ``REPORTED_TEXT`` and no ``arguments``."""
REPORTED_TEXT = 500
MAX_DECLINE_CHARS = 2_000
"""A client's reason for declining a query (``ClientAnswer.declined``) holds at most this many
characters."""

EventKind = Literal[
    "started",
    "state",
    "model",
    "tool_started",
    "tool_finished",
    "approval_needed",
    "decided",
    "guidance_needed",
    "stuck",
    "hint",
    "phase",
    "progress",
    "message",
    "client_query",
    "client_answered",
    "refused",
    "answer",
    "error",
    "continued",
    "hook",
    "mcp_tools",
    "outage",
    "ended",
]
"""``started`` the run began (task); ``state`` a transition (``text`` is "A -> B · why");
``model`` a model reply (whole text, tool calls named in ``text``... see ``AgentEvent``);
``tool_started``/``tool_finished`` one tool call; ``approval_needed`` a call waits for a human
(``arguments`` and ``commands``); ``decided`` a human decided a call; ``guidance_needed`` a
stuck run asks for guidance (``commands``); ``stuck``/``hint`` Nexora's detector and its
recovery hint; ``phase`` a phase started; ``progress`` Nexora's periodic report; ``message`` a
thread's user message arrived; ``client_query``/``client_answered`` Loom's server query;
``refused`` a signal or update that was not understood; ``answer`` the model's final answer of
a run or of a thread's turn; ``error`` the run's error; ``continued`` the run handed over to the
next of its chain; ``hook`` a post-tools hook ran; ``mcp_tools`` the run's MCP tools were listed
(``ok`` false: a server is unavailable); ``outage`` a call waits for the store (``ok`` false:
``waiting: the store at … is unreachable since …``) or the store answered again (``ok`` true);
``ended`` the run is over (``state`` is terminal)."""


class ClientQuery(Frozen):
    """Something only the client has, asked by the model (Loom's server query)."""

    id: str
    """Unique in the run; the answer names it."""
    kind: Literal["file_read", "environment", "question"]
    what: str
    """The file path, the environment variable name(s), or the question."""
    call_id: str
    """The tool call (``ask_client``, or the one detection made) the answer is the result of."""
    step: int
    asked_at: datetime
    timeout_at: datetime | None = None
    detected: bool = False
    """True when found in the model's text by ``client_queries.detect``; False for the tool."""


class ClientAnswer(Frozen):
    """Body of the ``answer_query`` update: ``{"query_id": ..., "kind": ..., "content": ...}``,
    or ``{"query_id": ..., "kind": ..., "declined": "why"}`` when the client will not answer."""

    query_id: str = Field(min_length=1, max_length=200)
    kind: Literal["file_read", "environment", "question"]
    content: str | None = None
    declined: str | None = Field(default=None, max_length=MAX_DECLINE_CHARS)
    decided_by: str | None = Field(default=None, min_length=1, max_length=200)
    """Who answered (``treadle answer --as NAME``); attribution only, like a decision's."""


class AgentEvent(Lean):
    """One item of the ``events`` topic. Fields beyond ``kind``/``step``/``state``/``at``/``text``
    are set where they mean something for the kind."""

    kind: EventKind
    step: int
    state: str
    """The run's state after the event."""
    at: datetime
    """``workflow.now()`` when it happened."""
    text: str = ""
    """A short human line: the transition, the tool's short output, the answer, the reason."""
    run: int = 1
    """Which run of the continue-as-new chain published it."""
    tool: str | None = None
    call_id: str | None = None
    target: str | None = None
    ok: bool | None = None
    arguments: dict[str, Any] | None = None
    commands: tuple[str, ...] = ()
    """What a human can type to act on it (approve / reject / modify / guide / answer)."""
    query: ClientQuery | None = None
    tool_calls: tuple[str, ...] = ()
    """``model``: the calls the reply made, as ``name target``."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    """Run totals after a ``model`` event."""
    decided_by: str | None = None
    """``decided``: who decided, as the decision said."""
    subagent: str | None = None
    """The sub-agent (its workflow id) whose event a parent passes on in its own stream; its
    ``step`` and ``state`` are the sub-agent's. ``None``: the run's own event."""


class TokenDelta(Frozen):
    """One batch of a streaming model call's text, published by the model activity."""

    step: int
    attempt: int
    """The activity attempt: a retried call streams its text again from offset 0."""
    offset: int
    """Where ``text`` starts in the reply's text (characters); a watcher shows only what is
    past what it already showed for ``step``."""
    text: str


def bounded(event: AgentEvent) -> AgentEvent:
    """``event`` with its text and argument strings cut to the limits above, each with a note
    of how much was left out."""
    update: dict[str, Any] = {}
    if len(event.text) > MAX_EVENT_TEXT:
        update["text"] = _cut(event.text, MAX_EVENT_TEXT)
    if event.arguments is not None:
        arguments = _cut_strings(event.arguments)
        if arguments != event.arguments:
            update["arguments"] = arguments
    return event.model_copy(update=update) if update else event


def reported(event: AgentEvent, workflow_id: str) -> AgentEvent:
    """A sub-agent's event as its parent passes it on: tagged with the sub-agent that published
    it (a grandchild's keeps its own tag), shorter, without arguments."""
    text = _cut(event.text, REPORTED_TEXT) if len(event.text) > REPORTED_TEXT else event.text
    update = {"subagent": event.subagent or workflow_id, "text": text, "arguments": None}
    return event.model_copy(update=update)


def _cut(text: str, limit: int) -> str:
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def _cut_strings(value: Any) -> Any:
    if isinstance(value, str):
        return _cut(value, MAX_ARGUMENT_CHARS) if len(value) > MAX_ARGUMENT_CHARS else value
    if isinstance(value, dict):
        return {k: _cut_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v) for v in value]
    return value


def approval_commands(workflow_id: str, call_id: str) -> tuple[str, ...]:
    """Approve, reject and modify one pending call, with ``treadle`` and the stock CLI."""
    body = json.dumps({"call_id": call_id})
    return (
        f"treadle approve {workflow_id} --call {call_id}",
        f'treadle reject {workflow_id} --call {call_id} --reason "..."',
        f"treadle modify {workflow_id} --call {call_id} --args '{{...}}'",
        f"temporal workflow signal --workflow-id {workflow_id} --name approve --input '{body}'",
    )


def guidance_commands(workflow_id: str, child: str | None = None) -> tuple[str, ...]:
    """Guide or halt a stuck run; with ``child``, the stuck sub-agent its call started
    (``call_1``, a grandchild ``call_1/call_2``), through this run, and with the stock CLI."""
    if child is None:
        return (
            f'treadle guide {workflow_id} --guidance "..."',
            f'treadle guide {workflow_id} --halt --reason "..."',
        )
    body = json.dumps({"call_id": child, "guidance": "..."})
    return (
        f'treadle guide {workflow_id} --child {child} --guidance "..."',
        f'treadle guide {workflow_id} --child {child} --halt --reason "..."',
        f"temporal workflow signal --workflow-id {workflow_id} --name guide --input '{body}'",
    )


def answer_commands(workflow_id: str, query: ClientQuery) -> tuple[str, ...]:
    body = json.dumps({"query_id": query.id, "kind": query.kind, "content": "..."})
    return (
        f'treadle answer {workflow_id} {query.id} "..."',
        f"temporal workflow update execute --workflow-id {workflow_id} --name answer_query "
        f"--input '{body}'",
    )
