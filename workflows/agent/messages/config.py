"""A run's configuration and input: what it is asked to do and the rules it runs under.

Pure data, safe inside the workflow sandbox; ``treadle.workflows.agent.messages.models`` re-exports
every name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from temporalio.contrib.workflow_streams import WorkflowStreamState

from treadle.workflows.agent.messages import json_schema
from treadle.workflows.agent.messages.catalogue import TOOLS
from treadle.workflows.agent.messages.decisions import Name
from treadle.workflows.agent.messages.hooks import check_hook_names, parse_author
from treadle.workflows.agent.messages.mcp import (
    ALL_SERVERS,
    check_server_name,
    is_tool_name,
    server_of,
)
from treadle.workflows.agent.messages.progress import ProgressConfig
from treadle.workflows.agent.messages.providers import ModelStringError, resolve
from treadle.workflows.agent.messages.snapshots import SnapshotConfig
from treadle.workflows.agent.messages.tool_args import DEFAULT_COMMAND_ALLOWLIST
from treadle.workflows.base import Frozen


def _check_model(value: str) -> str:
    try:
        resolve(value)
    except ModelStringError as exc:
        raise ValueError(str(exc)) from None
    return value


class Price(Frozen):
    """US dollars per million tokens."""

    prompt: float = Field(ge=0)
    completion: float = Field(ge=0)
    cached_prompt: float | None = Field(None, ge=0)
    """Price of prompt tokens served from the provider's cache; ``prompt`` when unset."""


DEFAULT_CONTEXT_WINDOW_TOKENS = 128_000
"""The context window of a model ``context_window_tokens`` does not name."""


def context_window(config: AgentConfig, model: str) -> int:
    """The tokens ``model`` takes in, as ``config.context_window_tokens`` says."""
    windows = config.context_window_tokens
    return windows.get(model) or windows.get("default") or DEFAULT_CONTEXT_WINDOW_TOKENS


def _model_list(value: Any) -> Any:
    """An ordered list of models, given as a list or as ``"a,b"``, each model string checked."""
    if isinstance(value, str):
        value = tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, list | tuple):
        for model in value:
            if isinstance(model, str):
                _check_model(model)
    return value


class SubagentConfig(Frozen):
    """Sub-agents (``delegate``): how deep a family may grow, and how wide."""

    max_depth: int = Field(2, ge=1, le=10)
    """Levels of runs below the top one: 1 lets a run delegate but not its children."""
    max_children: int = Field(8, ge=1, le=200)
    """Children one run may start in all (continue-as-new keeps the count)."""
    models: tuple[str, ...] = ()
    """Models a child may be given besides the run's own (its model, ``models`` values and
    ``fallback_models``)."""
    depth: int = Field(0, ge=0, le=10)
    """Where this run is in its family: 0 for the top run; a child's config carries its
    parent's plus one."""

    @field_validator("models", mode="before")
    @classmethod
    def _models(cls, value: Any) -> Any:
        return _model_list(value)


class AgentConfig(Frozen):
    """Limits and policies of one run. Validated once, when the run is started."""

    max_steps: int = Field(20, ge=1, le=100_000)
    """Hard cap on planning cycles (model calls); the run ends with a max-steps error."""
    require_approval: tuple[str, ...] = ()
    """Tools whose calls wait for a human ``approve`` / ``reject`` / ``modify`` signal."""
    approvers: tuple[Name, ...] | None = None
    """The names whose decisions (approve, reject, modify, guide) the run takes, as their
    ``decided_by`` says; any other name, or none, is refused. ``None``: anyone's. Attribution,
    not authentication: who may signal a run at all is the Temporal server's authorizer's."""
    blacklisted_tools: tuple[str, ...] = ()
    """Tools the model may not call; a call becomes an ``ERROR:`` observation."""
    hooks: tuple[str, ...] = ()
    """Post-tools hooks (Loom), run in this order after a step whose tools changed files:
    ``git_commit`` commits the change in a workspace that is a git repository. A failing hook
    is a trace line; the loop goes on."""
    commit_author: str | None = None
    """``"Name <email>"`` of the ``git_commit`` hook's commits (default
    ``Treadle <treadle@localhost>``)."""
    # -- workspace snapshots (issue 25) --------------------------------------------------
    snapshots: SnapshotConfig = SnapshotConfig()
    """Workspace snapshots in the store after each step whose tools changed files: whether,
    and what they leave out (``docs/workspaces.md``)."""
    tools: tuple[str, ...] | None = None
    """The tools this run offers the model, by name (built-in and your own); default: all of
    them. ``run_command`` still needs ``allow_run_command``. MCP tools (``mcp__<server>__<tool>``)
    are known only once listed: a name no server offers is a trace line, not an error."""
    mcp_servers: tuple[str, ...] = ()
    """The worker's MCP servers whose tools this run offers (``"*"``: all it has). Listed once,
    before the first model call; a server that is down is a trace line and its tools are
    missing. ``tools`` and ``blacklisted_tools`` narrow the choice by namespaced name."""
    mcp_approval: Literal["hints", "all", "listed"] = "hints"
    """Which MCP calls wait for a human: ``hints`` those the server does not mark read-only or
    non-destructive, plus ``require_approval``; ``all`` every one; ``listed`` only those
    ``require_approval`` names (the server's hints are ignored)."""
    parallel_tools: bool = True
    """Run several tool calls from one model response concurrently."""
    tool_task_queue: str | None = Field(None, min_length=1, max_length=200, pattern=r"^\S+$")
    """Run the workspace's tools (file tools, ``run_command``, your own) and the post-tools
    hooks on this task queue: served by ``treadle worker --tools-only --task-queue NAME`` on the
    machine that holds the workspace, while model calls (and MCP calls) run on the run's own
    queue, anywhere. Default: the run's queue."""
    max_tool_calls_per_step: int = Field(64, ge=1, le=1000)
    """A reply asking for more calls than this runs none of them; the model is told to ask for
    fewer. (Temporal allows a run at most 2,000 pending activities.)"""
    min_answer_length: int = Field(0, ge=0)
    """Final answers shorter than this are sent back to the model once per step."""
    system_prompt: str | None = None
    """Replaces the built-in system prompt."""
    temperature: float | None = Field(None, ge=0, le=2)
    models: dict[str, str] = Field(default_factory=dict)
    """Model per task type (agentsm): ``models[task_type]``, then ``models["default"]``, then
    the run's ``model``. Values are ``provider:model`` or just ``provider`` (its default)."""

    token_budget: int | None = Field(None, ge=1)
    """Total tokens the run may spend; the run stops before a call that would exceed it."""
    max_tokens: int | None = Field(None, ge=1)
    """Completion cap for every call (the budget may lower it further)."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """``provider:model`` -> price, to turn usage into cost in ``status``."""
    max_cost_usd: float | None = Field(None, gt=0)
    """Total US dollars the run (and its sub-agents) may spend, priced with ``prices``; the
    run stops before a call that would exceed it, like ``token_budget``. A model without a
    price cannot be kept under it: the run stops before calling it. ``None``: no cap."""
    confidence_threshold: float | None = Field(None, gt=0, le=1)
    """Answers below this confidence (from the endpoint's token log-probabilities) are
    reconsidered, up to ``max_retries`` times. Off where the endpoint returns none."""
    max_retries: int = Field(2, ge=0, le=20)
    """Low-confidence retry budget."""

    progress: ProgressConfig = ProgressConfig()
    """Nexora's stuck-detection thresholds."""
    recovery: Literal["hint", "ask_human", "halt"] = "hint"
    """On stuck: ``hint`` tells the model what repeats (at most ``max_hints`` times, then
    halts), ``ask_human`` waits for a ``guide`` signal, ``halt`` ends the run halted."""
    max_hints: int = Field(2, ge=0, le=100)
    max_wait_seconds: float = Field(86_400, ge=0, le=366 * 86_400)
    """Longest the ``wait`` tool may park the run on a durable timer; 0 does not offer it."""
    phases: tuple[str, ...] = ()
    """Phase descriptions, if the task is planned in phases; phase 1 starts with the run and the
    model moves on with the ``start_phase`` tool (which also works without this)."""
    test_commands: tuple[str, ...] = ("pytest", "go test", "npm test", "cargo test", "make test")
    """A ``run_command`` containing one of these is a test run for progress tracking."""
    reflect_every_n_steps: int | None = Field(None, ge=1)
    """Compress the history every N steps (agentsm's reflection)."""
    reflection_keep_recent: int = Field(4, ge=1, le=100)
    """Turns kept verbatim when the history is compressed; older ones become a summary."""
    reflection_model: str | None = Field(None, max_length=200)
    """Model for summaries; default: the run's model."""

    allow_run_command: bool = False
    """``run_command`` is refused unless the run allows it."""
    command_allowlist: tuple[str, ...] = DEFAULT_COMMAND_ALLOWLIST
    """Programs ``run_command`` may start (matched against the first word, exactly)."""
    command_timeout_seconds: float = Field(60, gt=0, le=3600)
    max_observation_chars: int = Field(12_000, ge=200, le=1_000_000)
    """Tool output beyond this is cut (with a note) before the model and the history see it."""

    context_window_tokens: dict[str, int] = Field(
        default_factory=lambda: {"default": DEFAULT_CONTEXT_WINDOW_TOKENS}
    )
    """How many tokens each model takes in (``provider:model`` -> tokens; ``default`` for the
    others). A conversation longer than its model's window is shown as a view: the system
    prompt and task, a summary of the older turns, the recent turns verbatim; the thread's
    record keeps every message (docs/threads.md)."""
    model_timeout_seconds: float = Field(300, gt=0, le=86_400)
    """Start-to-close timeout of one model call attempt."""
    model_max_attempts: int = Field(5, ge=1, le=100)
    tool_timeout_seconds: float = Field(120, gt=0, le=86_400)
    """Start-to-close timeout of one tool call attempt."""
    tool_max_attempts: int = Field(3, ge=1, le=100)
    step_attributes_every_seconds: float = Field(300, ge=1, le=86_400)
    """How stale ``AgentStep`` in visibility may get while a run steps: a step's own moves are
    sent at most once per this much workflow time (at once when the run waits, hands over or
    ends). Each upsert is a billed Temporal Cloud action: at the default and 10 s steps, one
    every 30 steps (``treadle.workflows.agent.parts.publishing``)."""
    heartbeat_timeout_seconds: float = Field(9, ge=1, le=3600)
    """A worker that dies during a model call, command, MCP call or hook is noticed after this
    long, not after the call's timeout; a model call is then made again at once, spending none
    of its ``model_max_attempts`` (``calls``). Beats go every two thirds of it
    (``treadle.activities.heartbeat``): at the default, every 6 s of a call, so a 10 s model
    call sends one (each beat that reaches the server is a billed Temporal Cloud action), and a
    live attempt is taken for lost only if its worker's event loop stalls for 3 s. Lower it for
    faster recovery at the price of more beats (3 s: a dead worker noticed within 3 s, a beat
    every 2 s; docs/reliability.md has the figures); raise it where workers stall for longer.
    A command, an edit or another call that is not safe to repeat is never run twice either way
    (``treadle.activities.sent_marks``)."""
    thread_idle_timeout_seconds: float = Field(7 * 24 * 3600, gt=0, le=365 * 24 * 3600)
    """A thread with no message for this long ends (Done) — a durable timer, no polling."""
    continue_as_new_after_events: int | None = Field(800, ge=20, le=50_000)
    """Continue as new once the run's history has this many events (at a safe point: between
    steps, while a thread waits, or while only sub-agents run): about 55 steps. It bounds what
    a worker replays after a cache miss (a restart, an eviction, another worker taking over) to
    under a second.
    Temporal's own suggestion (4,096 events or 4 MB) applies always; ``None`` leaves only it.
    Every run gets it, named or not (``temporal workflow start`` with plain JSON, or another
    SDK, leaves the field out)."""
    stream_tokens: bool = True
    """Ask the provider to stream its reply, so watchers see the text as it is generated. The
    text reaches the run's stream in at most 6 batches per attempt and 10 per call (each one
    signal: at most 40 history events); a call under half a second adds none."""
    client_queries: bool = True
    """Loom's server query: the ``ask_client`` tool is offered, and a final answer that asks
    for something only the client has ("I need to read src/main.rs") waits for the client."""
    client_query_timeout_seconds: float = Field(600, gt=0, le=7 * 24 * 3600)
    """How long a client query waits for its answer; then the model sees an ``ERROR:``."""
    client_query_max_answer_chars: int = Field(100_000, ge=100, le=1_000_000)
    """Longer answers are refused by the update's validator (they would sit in history)."""
    search_attributes: bool = True
    """Keep AgentState / AgentStep / AgentModel current. Turn off only where they cannot be
    registered (the time-skipping test server): upserting an unknown one fails the run's task."""

    # Typed answers and fallback models (issue 24)
    output_schema: dict[str, Any] | None = None
    """A JSON Schema the final answer must satisfy: the answer is then JSON that validates,
    and ``AgentResult.output`` holds it parsed. ``treadle run --output-schema`` takes a
    schema file or a pydantic model's import path (``pkg.module:Model``), resolved to its JSON
    Schema by the client before the run starts (the workflow imports nothing of yours)."""
    output_mode: Literal["auto", "native", "tool"] = "auto"
    """How the model is asked for the typed answer: ``native`` is the provider's structured
    output (``response_format`` with the schema; OpenAI protocol), ``tool`` a forced
    ``final_answer`` tool whose parameters are the schema (every protocol). ``auto``: native on
    the OpenAI protocol, the tool on Anthropic's, which has no native form (``native`` too)."""
    output_retries: int = Field(2, ge=0, le=20)
    """Typed answers that do not validate are sent back to the model with the validation error
    this many times in a turn; one more and the run ends in error, saying why."""
    fallback_models: tuple[str, ...] = ()
    """Models that take a model call, in order, when the run's model fails it after all its
    attempts (``model_max_attempts``) with retryable errors (an outage, overload, timeouts);
    a refusal (a 4xx) is no outage and falls back to nothing. Each step begins with the run's
    model. ``treadle run --model a,b`` sets them."""

    # Sub-agents (issue 26)
    subagents: SubagentConfig | None = None
    """The ``delegate`` tool: the model hands a sub-task to a child run (a child workflow)
    that spends from this run's token budget and ends with it. ``None``: not offered.
    ``treadle run --subagents`` turns the defaults on (see docs/subagents.md)."""

    @field_validator("hooks", mode="before")
    @classmethod
    def _hooks(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = tuple(part.strip() for part in value.split(",") if part.strip())
        return check_hook_names(value) if isinstance(value, list | tuple) else value

    @field_validator("commit_author")
    @classmethod
    def _commit_author(cls, value: str | None) -> str | None:
        if value is not None:
            parse_author(value)
        return value

    @field_validator("models")
    @classmethod
    def _models(cls, value: dict[str, str]) -> dict[str, str]:
        for model in value.values():
            _check_model(model)
        return value

    @field_validator("output_schema")
    @classmethod
    def _output_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else json_schema.check(value)

    @field_validator("fallback_models", mode="before")
    @classmethod
    def _fallback_models(cls, value: Any) -> Any:
        return _model_list(value)

    @field_validator("reflection_model")
    @classmethod
    def _reflection_model(cls, value: str | None) -> str | None:
        return None if value is None else _check_model(value)

    @field_validator(
        "require_approval",
        "approvers",
        "blacklisted_tools",
        "command_allowlist",
        "tools",
        "mcp_servers",
        mode="before",
    )
    @classmethod
    def _split_csv(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("require_approval", "blacklisted_tools", "tools")
    @classmethod
    def _known_tools(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        # An MCP tool is known only when the run lists its server: its name's shape is checked.
        unknown = sorted(name for name in set(value) - set(TOOLS) if not is_tool_name(name))
        if unknown:
            raise ValueError(
                f"unknown tool name(s): {', '.join(unknown)} (known: {', '.join(sorted(TOOLS))}"
                ", and mcp__<server>__<tool>)"
            )
        return value

    @field_validator("mcp_servers")
    @classmethod
    def _mcp_servers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if name != ALL_SERVERS:
                check_server_name(name)
        if ALL_SERVERS in value and len(value) > 1:
            raise ValueError(f"{ALL_SERVERS!r} (every server) cannot be mixed with server names")
        return tuple(dict.fromkeys(value))

    @model_validator(mode="after")
    def _mcp_tools_need_their_server(self) -> AgentConfig:
        """``tools`` / ``require_approval`` naming an MCP tool of a server the run does not list
        could never take effect: a config error, not a silent no-op."""
        named = {*(self.tools or ()), *self.require_approval}
        for name in sorted(named):
            server = server_of(name)
            if (
                server is not None
                and ALL_SERVERS not in self.mcp_servers
                and server not in self.mcp_servers
            ):
                raise ValueError(
                    f"{name} is a tool of MCP server {server!r}, which mcp_servers does not list "
                    f"(mcp_servers: {', '.join(self.mcp_servers) or 'none'})"
                )
        return self


class AgentInput(Frozen):
    """What a run is asked to do. Carries no secrets: keys live in the worker's environment."""

    task: str = Field(min_length=1, max_length=100_000)
    model: str = Field("openai:gpt-4o", max_length=200)
    """``provider:model`` (or ``provider`` for its default model); the provider picks the wire
    protocol. ``config.models`` may choose another model for the run's ``task_type``."""
    workspace: str = Field(min_length=1, max_length=4096)
    """Directory on the worker host that every tool path is confined to."""
    task_type: str = Field("default", min_length=1, max_length=100)
    thread: bool = False
    """A thread (Loom): after each answer it waits for its user's next message (the ``send``
    update) instead of ending, until ``close`` or ``config.thread_idle_timeout_seconds``."""
    config: AgentConfig = AgentConfig()
    resume: dict[str, Any] | None = None
    """A whole run to continue (an ``AgentRun`` as JSON): set by continue-as-new, and by
    ``treadle import``. Left out when a run starts fresh."""
    stream: WorkflowStreamState | None = None
    """The live stream's tail and offsets, handed over by continue-as-new."""
    workspace_snapshot: str | None = None
    """The workspace snapshot the run starts from (a sub-agent: its parent's latest, so its
    tools see the parent's files wherever they run). Left out when there is none."""

    @model_serializer(mode="wrap")
    def _without_snapshot(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # No empty field in every input a run, a child and each hand-over write to history.
        data: dict[str, Any] = handler(self)
        if data.get("workspace_snapshot", "") is None:
            del data["workspace_snapshot"]
        return data

    @field_validator("model")
    @classmethod
    def _model_format(cls, value: str) -> str:
        return _check_model(value)
