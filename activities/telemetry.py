"""Spans and metrics of the activities: model calls, tool calls, hooks.

Each activity wraps its work in one of the context managers here. They make

- a span under the activity's own ``RunActivity`` span (temporalio's ``OpenTelemetryPlugin``
  carries the run's trace context in the activity's headers): ``chat <model>`` with the
  OpenTelemetry GenAI semantic conventions for a model call, ``execute_tool <tool>`` for a tool
  call, ``hook <name>`` for a post-tools hook. Without a tracer provider (nothing configured,
  see ``treadle.observability``) OpenTelemetry hands out non-recording spans: no cost but a call;
- Treadle's activity metrics through ``_meter()``, the worker's Temporal runtime
  meter: on its Prometheus endpoint when ``treadle worker --metrics-port`` is given, a no-op
  otherwise. An activity's metrics are recorded by the attempt that ran, so a retried call
  counts each attempt (``outcome="error"`` for the failed ones);
- the run's step, for the worker's log lines (``current_step``, read by ``treadle.logs``).

Prompts and completions go on a span only when content capture is on
(``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, set by ``treadle.observability``),
with the worker's secrets redacted (``treadle.activities.content``); API keys never do otherwise:
nothing here reads a request's headers, and an error is recorded by its type, not its message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from temporalio import activity
from temporalio.common import MetricMeter
from temporalio.exceptions import ApplicationError

from treadle.activities.content.redaction import redacted
from treadle.workflows.agent.messages.models import ChatMessage, ModelRequest, ModelResponse

__all__ = [
    "HOOK_RUNS",
    "MODEL_CALLS",
    "MODEL_CALL_LATENCY",
    "MODEL_TOKENS",
    "TOOL_CALLS",
    "TOOL_CALL_LATENCY",
    "ModelCall",
    "ToolCallSpan",
    "content_capture",
    "current_step",
    "hook_run",
    "model_call",
    "record_input",
    "set_content_capture",
    "tool_call",
]

MODEL_TOKENS = "treadle_model_tokens"
MODEL_CALLS = "treadle_model_calls"
MODEL_CALL_LATENCY = "treadle_model_call_latency"
TOOL_CALLS = "treadle_tool_calls"
TOOL_CALL_LATENCY = "treadle_tool_call_latency"
HOOK_RUNS = "treadle_hook_runs"

# GenAI semantic conventions (https://opentelemetry.io/docs/specs/semconv/gen-ai/), spelled out
# here: the semantic-conventions package keeps them in a private, incubating module.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHED_TOKENS = "gen_ai.usage.cache_read.input_tokens"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
ERROR_TYPE = "error.type"
ATTEMPT = "temporal.activity.attempt"
STEP = "treadle.step"
TOOL_TARGET = "treadle.tool.target"
OUTCOME = "treadle.outcome"

TARGET_CHARS = 200
"""A tool call's target (a path, a command) is cut to this many characters on its span."""

_capture = False
_step: ContextVar[int | None] = ContextVar("treadle_activity_step", default=None)


def set_content_capture(on: bool) -> None:
    """Record prompts and completions on model-call spans (off unless the worker says so)."""
    global _capture
    _capture = on


def content_capture() -> bool:
    return _capture


def current_step() -> int | None:
    """The run's step the running activity works for (``None``: not known here)."""
    return _step.get()


class ModelCall:
    """The span of one model call, given its response by the activity."""

    def __init__(self, span: Span, request: ModelRequest) -> None:
        self.span = span
        self.request = request
        self.response: ModelResponse | None = None

    def finished(self, response: ModelResponse) -> None:
        self.response = response
        usage = response.usage
        attributes: dict[str, Any] = {
            INPUT_TOKENS: usage.prompt_tokens,
            OUTPUT_TOKENS: usage.completion_tokens,
            CACHED_TOKENS: usage.cached_tokens,
            FINISH_REASONS: [response.finish_reason] if response.finish_reason else [],
        }
        if response.model:
            attributes[RESPONSE_MODEL] = response.model
        self.span.set_attributes(attributes)
        if _capture:
            self.span.set_attribute(OUTPUT_MESSAGES, _messages_json([_reply(response)]))


@contextmanager
def model_call(request: ModelRequest) -> Iterator[ModelCall]:
    """Span and metrics of one try of ``call_model`` (the run makes each try an activity of one
    attempt: its number is the request's)."""
    provider, _, name = request.model.partition(":")
    attributes: dict[str, Any] = {
        OPERATION: "chat",
        PROVIDER: provider,
        REQUEST_MODEL: name,
        ATTEMPT: request.attempt,
        STEP: request.step,
    }
    if request.temperature is not None:
        attributes[REQUEST_TEMPERATURE] = request.temperature
    if request.max_tokens is not None:
        attributes[REQUEST_MAX_TOKENS] = request.max_tokens
    started = time.monotonic()
    outcome = "error"
    call: ModelCall | None = None
    try:
        with _span(f"chat {name}", attributes, request.step, SpanKind.CLIENT) as span:
            call = ModelCall(span, request)
            yield call
            outcome = "ok"
    finally:
        meter = _meter()
        labels = {"model": request.model}
        meter.create_counter(MODEL_CALLS, "Model call attempts, by model and outcome").add(
            1, {**labels, "outcome": outcome}
        )
        meter.create_histogram_timedelta(
            MODEL_CALL_LATENCY, "Model call attempt latency, by model", "ms"
        ).record(timedelta(seconds=time.monotonic() - started), labels)
        if call is not None and call.response is not None:
            tokens = meter.create_counter(
                MODEL_TOKENS, "Model tokens, by model and kind (input, output, cached)"
            )
            usage = call.response.usage
            for kind, count in (
                ("input", usage.prompt_tokens),
                ("output", usage.completion_tokens),
                ("cached", usage.cached_tokens),
            ):
                if count > 0:
                    tokens.add(count, {**labels, "kind": kind})


def record_input(messages: Sequence[ChatMessage]) -> None:
    """Put what the model is sent on the current model-call span, when content capture is on."""
    if _capture:
        trace.get_current_span().set_attribute(INPUT_MESSAGES, _messages_json(messages))


class ToolCallSpan:
    """The span of one tool call, told whether the call succeeded."""

    def __init__(self, span: Span) -> None:
        self.span = span
        self.success: bool | None = None

    def finished(self, success: bool) -> None:
        self.success = success
        self.span.set_attribute(OUTCOME, "ok" if success else "error")
        if not success:
            # A tool failure is data for the model, not a failed activity: the span says so
            # without an exception.
            self.span.set_status(Status(StatusCode.ERROR, "the tool call failed"))


@contextmanager
def tool_call(
    tool: str, call_id: str, target: str = "", step: int | None = None, **more: str
) -> Iterator[ToolCallSpan]:
    """Span and metrics of one tool call (built-in, your own, or an MCP server's)."""
    attributes: dict[str, Any] = {
        OPERATION: "execute_tool",
        TOOL_NAME: tool,
        TOOL_CALL_ID: call_id,
        ATTEMPT: _attempt(),
        **more,
    }
    if target:
        attributes[TOOL_TARGET] = target[:TARGET_CHARS]
    if step is not None:
        attributes[STEP] = step
    started = time.monotonic()
    call: ToolCallSpan | None = None
    try:
        with _span(f"execute_tool {tool}", attributes, step) as span:
            call = ToolCallSpan(span)
            try:
                yield call
            except BaseException:
                span.set_attribute(OUTCOME, "error")
                raise
    finally:
        outcome = "ok" if call is not None and call.success else "error"
        meter = _meter()
        meter.create_counter(TOOL_CALLS, "Tool calls, by tool and outcome (ok, error)").add(
            1, {"tool": tool, "outcome": outcome}
        )
        meter.create_histogram_timedelta(
            TOOL_CALL_LATENCY, "Tool call latency, by tool", "ms"
        ).record(timedelta(seconds=time.monotonic() - started), {"tool": tool})


@contextmanager
def hook_run(hook: str, step: int) -> Iterator[ToolCallSpan]:
    """Span and metric of one post-tools hook (``finished(success)`` as for a tool call)."""
    run: ToolCallSpan | None = None
    attributes = {"treadle.hook": hook, STEP: step, ATTEMPT: _attempt()}
    try:
        with _span(f"hook {hook}", attributes, step) as span:
            run = ToolCallSpan(span)
            yield run
    finally:
        outcome = "ok" if run is not None and run.success else "error"
        _meter().create_counter(
            HOOK_RUNS, "Post-tools hook runs, by hook and outcome (ok, error)"
        ).add(1, {"hook": hook, "outcome": outcome})


@contextmanager
def _span(
    name: str,
    attributes: dict[str, Any],
    step: int | None,
    kind: SpanKind = SpanKind.INTERNAL,
) -> Iterator[Span]:
    """The current span of one model call, tool call or hook, with its step for log lines. An
    exception marks it failed by the error's type only and goes on: its message may quote what a
    provider or a tool said, so it is never recorded."""
    token = _step.set(step) if step is not None else None
    try:
        with trace.get_tracer(__name__).start_as_current_span(
            name,
            kind=kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as exc:
                _failed(span, exc)
                raise
    finally:
        if token is not None:
            _step.reset(token)


def _attempt() -> int:
    return activity.info().attempt if activity.in_activity() else 1


def _meter() -> MetricMeter:
    """The activity's meter; none when called outside an activity (a direct call in a test)."""
    return activity.metric_meter() if activity.in_activity() else MetricMeter.noop


def _failed(span: Span, exc: BaseException) -> None:
    """Mark ``span`` failed by the error's type only: messages can quote a provider's reply."""
    kind = exc.type if isinstance(exc, ApplicationError) and exc.type else type(exc).__name__
    span.set_attribute(ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, kind))


def _reply(response: ModelResponse) -> ChatMessage:
    return ChatMessage(role="assistant", content=response.content, tool_calls=response.tool_calls)


def _messages_json(messages: Sequence[ChatMessage]) -> str:
    """Messages in the GenAI conventions' shape (role and parts), as one JSON string."""
    shaped = []
    for message in messages:
        parts: list[dict[str, Any]] = []
        if message.content is not None:
            parts.append({"type": "text", "content": message.content})
        for call in message.tool_calls:
            parts.append(
                {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
            )
        if message.tool_call_id is not None:
            parts = [
                {"type": "tool_call_response", "id": message.tool_call_id, "response": p["content"]}
                for p in parts
                if p["type"] == "text"
            ]
        shaped.append({"role": message.role, "parts": parts})
    # What the model was sent or said may quote a secret (a tool read a key file): the door's
    # redactor, as everywhere content leaves an activity.
    return json.dumps(redacted(shaped), ensure_ascii=False)
