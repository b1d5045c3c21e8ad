"""Typed messages shared by the workflow, the activities and every client.

Everything that crosses a Temporal boundary (workflow input/output, activity input/output,
signals, queries) is one of these pydantic models, serialised by
``temporalio.contrib.pydantic.pydantic_data_converter``. This module is pure data: no I/O, no
clock, safe to import inside the workflow sandbox.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from treadle.workflows.agent.messages.config import AgentConfig as AgentConfig
from treadle.workflows.agent.messages.config import AgentInput as AgentInput
from treadle.workflows.agent.messages.config import ForkOrigin as ForkOrigin
from treadle.workflows.agent.messages.config import MidTurn as MidTurn
from treadle.workflows.agent.messages.config import Price as Price
from treadle.workflows.agent.messages.config import SubagentConfig as SubagentConfig
from treadle.workflows.agent.messages.decisions import MAX_CALL_ID_CHARS as MAX_CALL_ID_CHARS
from treadle.workflows.agent.messages.decisions import MAX_HUMAN_TEXT_CHARS as MAX_HUMAN_TEXT_CHARS
from treadle.workflows.agent.messages.decisions import (
    MAX_MODIFY_ARGUMENTS_BYTES as MAX_MODIFY_ARGUMENTS_BYTES,
)
from treadle.workflows.agent.messages.decisions import ApprovalDecision as ApprovalDecision
from treadle.workflows.agent.messages.decisions import ApproveSignal as ApproveSignal
from treadle.workflows.agent.messages.decisions import Decision as Decision
from treadle.workflows.agent.messages.decisions import GuideSignal as GuideSignal
from treadle.workflows.agent.messages.decisions import ModifySignal as ModifySignal
from treadle.workflows.agent.messages.decisions import PendingApproval as PendingApproval
from treadle.workflows.agent.messages.decisions import RejectSignal as RejectSignal
from treadle.workflows.agent.messages.events import ClientQuery
from treadle.workflows.agent.messages.family import ChildRun
from treadle.workflows.agent.messages.mcp import TOOL_NAME
from treadle.workflows.agent.messages.progress import ProgressSummary
from treadle.workflows.agent.messages.snapshots import WorkspaceSync
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.messages.tool_args import (
    DEFAULT_COMMAND_ALLOWLIST as DEFAULT_COMMAND_ALLOWLIST,
)
from treadle.workflows.agent.messages.tool_args import ToolPolicy as ToolPolicy
from treadle.workflows.base import Frozen, Lean

TASK_QUEUE = "treadle-agent"
"""The task queue ``treadle worker`` polls and ``treadle`` starts runs on."""


# --------------------------------------------------------------------------------------------
# Tool calls and the agent's memory
# --------------------------------------------------------------------------------------------


class ToolCall(Frozen):
    """One tool call as the model asked for it. ``arguments`` is the raw JSON text it sent."""

    id: str
    name: str
    arguments: str = "{}"


class ToolResult(Lean):
    """What one tool call produced, whatever ran it (the ``run_tool`` and ``call_mcp_tool``
    activities' result, and the result inside every ``ToolOutcome``). ``success=False``
    carries an ``ERROR: ...`` output: tool failures are data."""

    success: bool
    output: str
    """The whole output, or a preview of it when ``output_ref`` is set."""
    mutated_paths: tuple[str, ...] = ()
    content_hashes: dict[str, str] = Field(default_factory=dict)
    """path -> sha256 prefix of the content written, for progress tracking."""
    output_ref: str | None = None
    """The whole output as a blob in the conversation store, when it was too long to carry."""
    output_chars: int | None = None
    snapshot: str | None = None
    """The key of the workspace's snapshot after the call, when the worker took one (a worker
    with ``--workspace-root``, for a call that may change files): the run's latest from now.
    Without one it is not serialised (``Lean``): a result keeps its size."""
    snapshot_skipped: str | None = None
    """Why a worker asked to snapshot the run's own workspace after the call took none (it
    has no store): the run takes no ``snapshot_workspace`` for it either."""
    snapshot_left_out: str | None = None
    """What the call's snapshot could not record and the run's trace must say (a file whose
    name is not UTF-8), when there is any."""

    @model_validator(mode="after")
    def _error_prefix(self) -> ToolResult:
        if not self.success and not self.output.startswith("ERROR:"):
            raise ValueError("a failed tool result must start with 'ERROR:'")
        return self


class ToolOutcome(Frozen):
    """One tool call and what it produced: an observation the model sees on its next turn."""

    call: ToolCall
    result: ToolResult

    @classmethod
    def of(cls, call: ToolCall, observation: str, *, success: bool) -> ToolOutcome:
        """An outcome the workflow decides itself (an error, a phase started, an answer)."""
        return cls(call=call, result=ToolResult(success=success, output=observation))

    @property
    def observation(self) -> str:
        """What the model sees, or a preview of it when ``observation_ref`` is set."""
        return self.result.output

    @property
    def success(self) -> bool:
        return self.result.success

    @property
    def mutated_paths(self) -> tuple[str, ...]:
        return self.result.mutated_paths

    @property
    def content_hashes(self) -> dict[str, str]:
        return self.result.content_hashes

    @property
    def observation_ref(self) -> str | None:
        """The whole observation as a blob in the conversation store."""
        return self.result.output_ref

    @property
    def observation_chars(self) -> int | None:
        return self.result.output_chars


class Turn(Frozen):
    """One completed planning step: what the model said and what its tool calls produced; or,
    in a thread, the user's next message (``user_message``), which starts a turn."""

    step: int
    user_message: str | None = None
    assistant_text: str | None = None
    """What the model said (a preview when ``assistant_ref`` is set)."""
    assistant_ref: str | None = None
    """The whole of a long reply's text, stored (a reply that called tools; see
    ``ModelResponse.content_ref``)."""
    assistant_chars: int | None = None
    outcomes: tuple[ToolOutcome, ...] = ()
    note: str | None = None
    """Feedback from the loop itself (answer too short, blacklisted tool), sent as a user turn."""
    interrupted: bool = False
    """The model call of this step was cut by a user's message (``MidTurn.INTERRUPT``):
    ``assistant_text`` is what it had said so far."""


class TokenUsage(Frozen):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0
    estimated_tokens: int = 0
    """How many of ``total_tokens`` were estimated by the worker because the provider reported
    no usage (llama.cpp's server sends none in a stream): budgets and cost still count them."""

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            estimated_tokens=self.estimated_tokens + other.estimated_tokens,
        )


class TraceEntry(Frozen):
    """One line of the append-only trace. ``timestamp`` comes from ``workflow.now()``."""

    step: int
    state: State
    event: str
    """A transition's ``Event`` value, or a note's name (``Feedback``, ``SignalRefused``...)."""
    data: str = ""
    timestamp: datetime


class Trace(Frozen):
    entries: tuple[TraceEntry, ...] = ()
    earlier: int = 0
    """Entries before these, left behind when the run continued as new (only a tail is
    carried, so a run of days keeps a bounded trace)."""


class RunStatus(enum.StrEnum):
    RUNNING = "running"
    DONE = "done"
    ERROR = "error"
    HALTED = "halted"
    """Stopped on purpose: stuck beyond recovery, or a human said halt."""


class AgentStatus(Frozen):
    """Answer of the ``state`` query."""

    state: State
    step: int
    max_steps: int
    model: str
    task: str
    pending_approvals: tuple[PendingApproval, ...] = ()
    usage: TokenUsage = TokenUsage()
    cost_usd: float | None = None
    """Usage priced with ``config.prices``; ``None`` without a price for the model."""
    token_budget: int | None = None
    max_cost_usd: float | None = None
    """The run's cost cap (``config.max_cost_usd``), which ``cost_usd`` stays under."""
    confidence: float | None = None
    """The last response's confidence, when the endpoint reports log-probabilities."""
    last_event: str | None = None
    final_answer: str | None = None
    error: str | None = None
    progress: ProgressSummary | None = None
    stuck: str | None = None
    """Why the run is recovering or waiting for guidance, when it is."""
    thread: bool = False
    queued_messages: int = 0
    """A thread's user messages waiting to be answered."""
    forked_from: ForkOrigin | None = None
    """A fork's origin: the run or thread and the step it was forked from."""
    run_in_chain: int = 1
    """Which run of its continue-as-new chain answers (the workflow id stays the same)."""
    client_query: ClientQuery | None = None
    """Loom's server query waiting for the client (``WaitingForClient``)."""
    child_queries: tuple[ClientQuery, ...] = ()
    """Its sub-agents' client queries waiting for an answer, named as it takes answers for them
    (``call_1/q1``: ``answer_query`` on this run sends the answer on)."""
    wakes_at: datetime | None = None
    """When a run parked by the ``wait`` tool (``Waiting``) wakes, unless woken earlier."""
    stream_offset: int = 0
    """Where the run's live stream ends now: ``watch --from`` this to see only what follows."""
    last_decision: str | None = None
    """The last approval, rejection, modification, guidance or client answer, with who sent it
    (``approve call_1 by alice@laptop``), as the trace has it."""
    outage: str | None = None
    """The store a call waits for, while it cannot be reached: ``the store at … is unreachable
    since …`` (the call goes on when it answers; none of its attempts is spent)."""
    served_by: str | None = None
    """The model that answered the last model call: ``model``, or a fallback that took it."""
    usage_by_model: dict[str, TokenUsage] = Field(default_factory=dict)
    """``usage`` by the model that spent it (what ``cost_usd`` is priced by)."""
    children: tuple[ChildRun, ...] = ()
    """The run's sub-agents (``delegate``): each one's state and what it spent. ``usage`` and
    ``cost_usd`` are the family's: the run's own plus every child's that ended."""


class AgentResult(Frozen):
    """Output of a run. ``status`` is ``done`` only when the model gave a final answer."""

    status: RunStatus
    answer: str | None = None
    error: str | None = None
    steps: int = 0
    usage: TokenUsage = TokenUsage()
    cost_usd: float | None = None
    output: Any = None
    """The typed answer, parsed (JSON that validates against ``config.output_schema``)."""
    usage_by_model: dict[str, TokenUsage] = Field(default_factory=dict)
    """``usage`` by the model that spent it: the run's model and any fallback that served."""
    workspace_snapshot: str | None = None
    """The key of the run's latest workspace snapshot when it ended (a sub-agent's parent
    merges it into its own); ``None``: none was taken."""
    final: AgentStatus | None = None
    """What the ``state`` query answered as the run ended: a closed run's ``status`` is read
    from here, from its history, with no worker to replay it (a top run's; a sub-agent's
    parent keeps what it needs of its child in its own status)."""
    trace: Trace | None = None
    """The trace's tail as the run ended (``RESULT_TRACE_ENTRIES``, the rest counted), read by
    ``trace`` of a closed run."""
    export: ThreadExport | None = None
    """The ``export`` query's answer as the run ended, when its conversation is in the store
    (named by reference, small): ``treadle export`` of a closed run reads it from here."""


RESULT_TRACE_ENTRIES = 50
"""Trace entries a run's result carries (``AgentResult.trace``): the newest. The result is
written into history once, at the end: 50 entries are about 8 KB a run, what a closed run's
``trace`` shows (with a count of the earlier ones, which its live ``trace`` showed)."""


# --------------------------------------------------------------------------------------------
# Threads: a user's message, and Loom's JSON shape
# --------------------------------------------------------------------------------------------

MAX_USER_MESSAGE_CHARS = 100_000


class UserMessage(Frozen):
    """Input of a thread's ``send`` update: ``{"text": "..."}``."""

    text: str = Field(min_length=1, max_length=MAX_USER_MESSAGE_CHARS)
    mode: MidTurn | None = None
    """What to do with it if a turn is running (``queue``, ``steer``, ``interrupt``,
    ``reject``); unset: the thread's ``mid_turn``."""


class SendReceipt(Frozen):
    """What ``send`` answers: whether the message waits behind a running turn, and where."""

    queued: bool
    """A turn is running (or other messages wait): this one is answered after them."""
    position: int
    """1 for the next message to be answered (queued), or for the next to join the running
    turn (steered or interrupting)."""
    state: State
    mode: MidTurn | None = None
    """How it met the running turn (``None``: no turn was running, it starts one)."""
    step: int = 0
    """The thread's step when it arrived: a steered message is read before step ``step + 1``'s
    model call (or the call it interrupts is redone as that step)."""


class LoomAgentState(Frozen):
    """Loom's ``agent_state``: which of its states the thread is in, and calls not yet run."""

    kind: Literal[
        "waiting_for_user_input",
        "calling_llm",
        "processing_llm_response",
        "executing_tools",
        "post_tools_hook",
        "error",
        "shutting_down",
    ]
    pending_tool_calls: tuple[ToolCall, ...] = ()


class LoomConversation(Frozen):
    messages: tuple[ChatMessage, ...] = Field(min_length=2)


class ThreadSettings(Frozen):
    """What Loom's shape has no place for: how to continue the thread here."""

    model: str = Field("openai:gpt-4o", max_length=200)
    task_type: str = Field("default", min_length=1, max_length=100)
    config: AgentConfig = AgentConfig()


class StoredRecord(Frozen):
    """Where the whole conversation is: the store's append-only record of a thread."""

    head: str
    """The record's head in the conversation store (``ConversationStore.messages``)."""
    messages: int
    """How many messages the record holds."""
    after: int = 0
    """How many of the export's last ``conversation.messages`` follow the record (not stored
    yet); the export's other messages are already in it."""


class ExportedMemory(Frozen):
    """A thread's long-term memory namespace as ``treadle export`` found it: what it held."""

    namespace: str
    items: tuple[str, ...] = ()
    """Each live item's text, oldest first."""


class ThreadExport(Frozen):
    """A thread in Loom's JSON shape (``agent_state`` and ``conversation.messages``), plus
    Treadle's own settings under ``treadle``. ``treadle export`` writes it, ``import``
    starts a new thread that continues from it. The ``export`` query of a thread whose record
    is in the store names it (``record``): the whole conversation is the record's messages and
    then the last ``record.after`` ones here; ``treadle export`` writes that whole."""

    agent_state: LoomAgentState
    conversation: LoomConversation
    treadle: ThreadSettings = ThreadSettings()
    record: StoredRecord | None = None
    workspace: str | None = None
    """The key of the thread's latest workspace snapshot in the store (``treadle
    workspace``): an import continues from it. The files stay in the store; the file names
    them."""
    memory: ExportedMemory | None = None
    """With ``config.memory``: the namespace's items when the thread was exported (written by
    ``treadle export``; the namespace itself lives on, shared with other threads)."""


# --------------------------------------------------------------------------------------------
# Activity messages
# --------------------------------------------------------------------------------------------


class ChatMessage(Lean):
    """Provider-neutral chat message; each provider module maps it to its wire format."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    content_ref: str | None = None
    """The full content is a blob in the conversation store (``content`` holds a preview):
    the model activity reads it back, so the text itself never travels through history."""
    content_chars: int | None = None
    """Length of the full content when it is stored by reference (for token estimates)."""
    interrupted: bool = False
    """An assistant reply cut by the user's message: what the model had said so far."""


class ToolSchema(Frozen):
    """A tool the catalogue does not hold (an MCP server's), as the model is shown it."""

    name: str = Field(pattern=TOOL_NAME.pattern)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    """Its arguments' JSON Schema (an object schema), or a placeholder when
    ``parameters_ref`` names it."""
    parameters_ref: str | None = None
    """The schema as a blob in the worker's store (``McpToolInfo.schema_ref``): the model
    activity reads it, so a request carries a key per tool, not the schema."""
    parameters_chars: int | None = None
    """The stored schema's length, for token estimates."""

    @model_serializer(mode="wrap")
    def _inline_as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A schema carried inline (a worker without a store) says nothing of a reference: the
        # request carries no empty fields.
        data: dict[str, Any] = handler(self)
        if self.parameters_ref is None and self.parameters_chars is None:
            data.pop("parameters_ref", None)
            data.pop("parameters_chars", None)
        return data

    def prompt_chars(self) -> int:
        """How much of the prompt this tool takes, in characters of JSON (as if inline)."""
        if self.parameters_chars is None:
            return len(self.model_dump_json())
        bare: dict[str, Any] = {"parameters": {}, "parameters_ref": None, "parameters_chars": None}
        return len(self.model_copy(update=bare).model_dump_json()) - 2 + self.parameters_chars


class ForkPoint(Frozen):
    """A run's conversation as it was after one of its steps, by reference to its stored
    record: what the model call of the next step sent (``treadle fork`` reads it from the
    run's history; nothing of the content is copied)."""

    step: int = Field(ge=0)
    conversation: str
    """The record's head after that call: every message up to the end of ``step``."""
    conversation_messages: int = Field(ge=2)
    """How many messages it holds."""
    view_from: int = 0
    view_summary_at: int = 0
    """The view that call showed its model (``ModelRequest``): the fork's calls show the same."""


MODEL_CALL_INTERRUPTED = "ModelCallInterrupted"
"""The failure type of an interruptible model call cancelled by the run: its one detail is what
the model had said so far (redacted, at most ``MAX_INTERRUPTED_CHARS``)."""
MAX_INTERRUPTED_CHARS = 8_000
"""The most of an interrupted reply that is kept (its start): a failure's detail is history."""


class ModelRequest(Lean):
    """Input of ``call_model``. Catalogue tools go by name (the activity builds their JSON
    schemas); others (MCP tools) come in ``tool_schemas``, each schema by its store key (the
    activity reads it) or, from a worker without a store, inline."""

    model: str
    messages: tuple[ChatMessage, ...]
    """What the store does not hold yet: appended after ``conversation``."""
    conversation: str | None = None
    """Head of the conversation the store already holds (``None``: ``messages`` is all)."""
    conversation_messages: int = 0
    """How many messages ``conversation`` holds, checked by the activity."""
    tools: tuple[str, ...] = ()
    tool_schemas: tuple[ToolSchema, ...] = ()
    """Offered tools outside the catalogue, after ``tools``, with their schemas."""
    temperature: float | None = None
    max_tokens: int | None = None
    logprobs: bool = False
    """Ask for token log-probabilities (for the confidence check), where the protocol has them."""
    stream: bool = False
    """Stream the reply from the provider and publish its text on the run's ``tokens`` topic."""
    step: int = 0
    """The run's step, named by the published ``TokenDelta``s."""
    interruptible: bool = False
    """A thread's planning call that a user's message may interrupt: cancelled, the call
    answers with what it had said so far (``ModelCallInterrupted``) instead of nothing."""
    accept_cut: bool = False
    """A reply cut by its output limit is still the reply (a summary); otherwise it is an error,
    never an answer."""
    output_schema: dict[str, Any] | None = None
    """A typed answer by the provider's structured output: the reply's text must be JSON for
    this (object) schema (OpenAI's ``response_format``)."""
    require_tool: bool = False
    """The reply must call a tool (OpenAI ``tool_choice: "required"``, Anthropic ``any``): a
    typed answer comes as the ``final_answer`` tool's arguments."""
    view_from: int = 0
    """The model is shown the conversation's first messages (system prompt, task), then from
    this one on: Reflecting summarised those between (0: all are shown)."""
    view_summary_at: int = 0
    """The message holding that summary, shown right after the task instead (0: none)."""
    context_window_tokens: int | None = None
    """The model's context window: a longer conversation is shown to it as a view (a summary
    of the older messages, then the recent ones; ``treadle.activities.store.view``)."""
    attempt: int = 1
    """Which try of the step's call this is: the provider's errors before it, plus one. The run
    makes each try as an activity of one attempt (``calls.model_call``), so a try lost with its
    worker is not counted; the activity's backoff and its live tokens go by it."""
    repeated: str | None = None
    """The fingerprint of the provider error the try before failed with, when that may be the
    request's own fault (a 500): the same error again is not tried a third time."""
    loaded_tools: tuple[str, ...] | None = None
    """The tools the worker loaded from your own modules, offered in ``tools`` (a run's first
    call, ``AgentRun.lean_start``): the reply names them back (``ModelResponse.loaded_tools``),
    so the run records what it offered without a local activity of its own."""


class ModelResponse(Lean):
    content: str | None = None
    """The reply's text; a preview when ``content_ref`` is set."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Long string values of their arguments are stored
    (``treadle.workflows.agent.messages.content_refs``)."""
    usage: TokenUsage = TokenUsage()
    finish_reason: str | None = None
    model: str | None = None
    confidence: float | None = None
    """exp(mean token log-probability) when the endpoint returned log-probabilities."""
    conversation: str | None = None
    """Head of the stored conversation after this call: the request's messages and this
    reply. ``None`` from a worker that keeps no store."""
    content_ref: str | None = None
    """The whole text of a long reply that calls tools, stored by the content door (a reply
    without tool calls is an answer: its text stays whole, as the run's result)."""
    content_chars: int | None = None
    loaded_tools: tuple[str, ...] | None = None
    """The request's ``loaded_tools``, as they were sent: what the run offered, recorded."""


class LoadedToolsRequest(Frozen):
    """Input of ``list_loaded_tools`` (nothing: the worker answers what it loaded)."""


class LoadedTools(Frozen):
    """What ``list_loaded_tools`` answers: the tools the worker loaded from your own modules
    (``treadle worker --tools``, ``treadle.tools`` entry points), which a run then offers."""

    names: tuple[str, ...] = ()


class ToolRequest(Lean):
    """Input of ``run_tool``: one already schema-checked call, its workspace and policy."""

    call: ToolCall
    workspace: str
    policy: ToolPolicy = ToolPolicy()
    sync: WorkspaceSync | None = None
    """The run's latest snapshot, for a worker with ``--workspace-root`` (a run always sends
    it; ``None``: a call made outside a run, which every worker runs in ``workspace``)."""
    follows: str | None = None
    """The id of the activity this call was first made as, when every attempt of it (and of
    any after it) lost its worker and ``calls.run_tool`` made the call again: an attempt still
    running on this worker is waited for, not repeated."""
    sent_before: bool = False
    """That earlier activity had marked the call sent (``treadle.activities.sent_marks``): a
    call not safe to repeat is not run again; the model is told its outcome is unknown."""
