"""The model activity: one interface, one module per wire protocol, httpx only.

Temporal owns retries: the shared ``httpx.AsyncClient`` makes exactly one attempt per activity
attempt, so every attempt is visible in the event history, and errors are classified into
retryable / non-retryable ``ApplicationError``s in one place (``treadle.activities.errors``); HTTP
failures are turned into those errors the same way for every protocol (``http_errors``).
API keys are read from the worker's environment by ``ProviderSettings.from_env`` and never leave
this process: not in activity inputs, results, errors or logs. Every failure leaving
``call_model`` goes through one ``Redactor`` holding every key the worker has (a proxy may echo
another provider's key) and carries no lone surrogate (see ``payload``); its cause chain is cut,
as Temporal records a failure's causes (messages and all) in the history and the worker logs
them. A ``Retry-After`` is honoured up to the attempt's retry policy ``maximum_interval``
(``http_errors.retry_after_cap``).

A request with ``stream`` set asks the provider to stream (``streaming``): the reply is read as
it is generated, its text published on the run's live stream in a bounded number of batches
(``tokens``), and it is assembled into the same ``ModelResponse`` the non-streaming call
returns. A stream cut short, or one holding a malformed event, fails the attempt retryably; an
error event inside it is classified like the HTTP error it names. A server that answers a
streaming request with a plain JSON body is read as if it had not been asked to stream.

A server that refuses streaming (a 400 or 422 naming ``stream`` or ``stream_options``, see
``http_errors.streaming_refusal``) is asked again at once, in the same attempt, without them:
the same body otherwise, and at most once. This is no retry of a failure Temporal should see
(the second request is a different one, and the only one that can succeed); its outcome, success
or error, is the attempt's. When it succeeds the endpoint (its URL and model) is remembered as
one that does not stream, for as long as this worker runs: later calls to it do not stream, and
``model.stream.unsupported`` is logged once. A 200 stream that ends before its first event is a
refusal too, remembered for requests that offer tools apart from those that do not:
llama-cpp-python's function-calling format streams plain replies but raises on a streamed
``tool_choice: "auto"`` after sending its headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Protocol, cast

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError, FailureError

from treadle.activities import telemetry
from treadle.activities.content import door
from treadle.activities.content.redaction import current
from treadle.activities.errors import (
    ModelConfigError,
    ModelError,
    ModelHTTPError,
    ModelOutputCut,
    ModelResponseError,
    StoreUnavailable,
)
from treadle.activities.heartbeat import heartbeating
from treadle.activities.model import (
    anthropic_messages,
    body,
    http_errors,
    openai_chat,
    output_cap,
    typed_fallback,
    usage,
)
from treadle.activities.model.payload import DEFAULT_MAX_TOKENS, well_formed
from treadle.activities.model.streaming import (
    ErrorEvent,
    StreamAssembler,
    TextCallback,
    sse_events,
)
from treadle.activities.model.tokens import publishing
from treadle.activities.model.tool_schemas import ToolSchemas
from treadle.activities.store.conversation import ConversationStore, refers
from treadle.activities.store.tail import view_of
from treadle.activities.store.view import view
from treadle.workflows.agent.messages.models import (
    MAX_INTERRUPTED_CHARS,
    MODEL_CALL_INTERRUPTED,
    ChatMessage,
    ModelRequest,
    ModelResponse,
)
from treadle.workflows.agent.messages.providers import ModelStringError, known, resolve
from treadle.workflows.agent.parts.outages import FINGERPRINT_PREFIX

READ_TIMEOUT_GRACE_SECONDS = 2.0
"""The HTTP read timeout outlasts the attempt's start-to-close timeout by this much, so an
attempt too slow for it always ends by Temporal's timeout (``start-to-close timeout`` in the
history and the run's error) and never, by a race of milliseconds, by the client's own."""


class WireProtocol(Protocol):
    """What one provider module provides (``openai_chat``, ``anthropic_messages``)."""

    def path(self) -> str: ...
    def headers(self, api_key: str | None) -> dict[str, str]: ...
    def build_body(self, request: ModelRequest, model_name: str) -> dict[str, Any]: ...
    def parse_response(self, payload: Any, provider: str) -> ModelResponse: ...
    def error_message(self, payload: Any) -> str | None: ...
    def stream_assembler(self, provider: str, on_text: TextCallback | None) -> StreamAssembler: ...


PROTOCOLS: Mapping[str, WireProtocol] = MappingProxyType(
    {"openai": cast(WireProtocol, openai_chat), "anthropic": cast(WireProtocol, anthropic_messages)}
)


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    api_key: str | None = field(repr=False)
    key_required: bool
    key_name: str | None

    def __repr__(self) -> str:  # never print a key, not even by accident
        return f"Endpoint(base_url={self.base_url!r}, api_key={'set' if self.api_key else None})"


@dataclass(frozen=True)
class ProviderSettings:
    """Where each provider lives and its key. Built by the worker, from its environment."""

    endpoints: Mapping[str, Endpoint]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProviderSettings:
        endpoints = {}
        for spec in known().values():  # the built-in providers and those this process named
            base_url = env.get(spec.base_url_env) or spec.default_base_url
            endpoints[spec.name] = Endpoint(
                base_url=base_url,
                api_key=(env.get(spec.key_env) or None) if spec.key_env else None,
                # A custom base URL is usually a local server or a proxy that takes no key.
                key_required=spec.key_required
                and base_url.rstrip("/") == spec.default_base_url.rstrip("/"),
                key_name=spec.key_env,
            )
        return cls(endpoints=endpoints)

    def api_keys(self) -> tuple[str, ...]:
        """Every key configured on this worker, whichever provider it is for."""
        return tuple(e.api_key for e in self.endpoints.values() if e.api_key)


def http_client() -> httpx.AsyncClient:
    """The worker's one shared client. Read timeouts are set per call from the activity's."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=10.0, read=300.0, write=30.0, pool=30.0),
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
        # No transport retries: Temporal retries, and each attempt shows in the history.
        transport=httpx.AsyncHTTPTransport(retries=0),
    )


class ModelActivities:
    """Holds the worker's shared HTTP client and provider settings."""

    def __init__(
        self,
        settings: ProviderSettings,
        client: httpx.AsyncClient,
        store: ConversationStore | None = None,
    ) -> None:
        self._settings = settings
        self._client = client
        self._redact = http_errors.Redactor(settings.api_keys())
        self._store = store
        self._tool_schemas = ToolSchemas(store)
        self._unstreamable: set[tuple[str, str, bool]] = set()
        """Endpoints (URL, model name, tools offered) found to refuse streaming; called without
        it."""
        self._json_object_only: set[tuple[str, str]] = set()
        """Endpoints (URL, model name) that took a typed answer only as ``json_object``
        (``typed_fallback``); asked so from the start."""

    @activity.defn(name="call_model")
    async def call_model(self, request: ModelRequest) -> ModelResponse:
        """Ask the model for its next move; one HTTP attempt per activity attempt."""
        with telemetry.model_call(request) as call:  # its span, metrics and step for logs
            result = await self._call_model(request)
            call.finished(result)
        return result

    async def _call_model(self, request: ModelRequest) -> ModelResponse:
        info = activity.info()
        start_to_close = info.start_to_close_timeout or timedelta(minutes=5)
        said: list[str] = []
        streams: list[StreamAssembler] = []
        """The streams this call read (its last one the cut one, when the run cuts it)."""
        try:
            # Heartbeats go on for as long as the call, however long its stream.
            async with heartbeating(), publishing(request) as on_text:
                whole, added = await self._shown(request)
                whole = self.with_output_cap(await self._tool_schemas.inline(whole))
                telemetry.record_input(whole.messages)  # only with content capture on
                result = await self.complete(
                    whole,
                    read_timeout=start_to_close.total_seconds() + READ_TIMEOUT_GRACE_SECONDS,
                    on_text=_collecting(said, on_text) if request.interruptible else on_text,
                    on_stream=streams.append if request.interruptible else None,
                )
                result = usage.with_usage(whole, result)  # never silently zero
                _never_cut(whole, result)
                if self._store is not None:
                    # What this call sent is stored once; the next call sends only what is new.
                    head = await self._store.extend(request.conversation, request.messages, added)
                    result = result.model_copy(update={"conversation": head})
                result = await door.reply(self._store, result)  # long arguments by reference
        except ModelError as exc:
            cap = http_errors.retry_after_cap(info.retry_policy)
            backoff = http_errors.provider_backoff(request.attempt, info.retry_policy)
            raise self._failure(_unless_repeated(exc, request), cap, backoff) from None
        except StoreUnavailable as exc:  # infrastructure: the workflow waits, no attempt spent
            raise exc.to_application_error() from None
        except FailureError:
            raise  # Temporal's own (cancellation): it must reach the SDK as it is
        except asyncio.CancelledError:
            if not request.interruptible or activity.is_worker_shutdown():
                raise
            # The run cut this call for its user's message: it answers with what the model had
            # said so far (the run waits for it: ``WAIT_CANCELLATION_COMPLETED``), and the
            # tokens its stream reported before the cut (``None``: it reported none, so what
            # the call spent is unknown; never an estimate).
            partial = current()("".join(said))[:MAX_INTERRUPTED_CHARS]
            reported = streams[-1].reported_usage() if streams else None
            raise ApplicationError(
                "the model call was interrupted by the user's message",
                partial,
                reported.model_dump(mode="json") if reported is not None else None,
                type=MODEL_CALL_INTERRUPTED,
                non_retryable=True,
            ) from None
        except Exception as exc:  # a bug, or an error nobody foresaw: its text may hold a key
            raise self._failure(ApplicationError(str(exc), type=type(exc).__name__)) from None
        if request.loaded_tools is not None:  # the run records what it offered from here
            result = result.model_copy(update={"loaded_tools": request.loaded_tools})
        activity.logger.info(
            "model.call.completed",
            extra={
                "model": request.model,
                "tool_calls": len(result.tool_calls),
                "total_tokens": result.usage.total_tokens,
            },
        )
        return result

    async def _shown(self, request: ModelRequest) -> tuple[ModelRequest, tuple[ChatMessage, ...]]:
        """The request as its model is shown it, and its new messages with their stored
        contents read back (the store's next segment is made of them).

        A stored conversation is read from its end (``treadle.activities.store.tail``): a
        conversation longer than the model's context window becomes a view
        (``treadle.activities.store.view``), and only what the view shows is read. The view's
        summary is stored beside the record (the record itself stays whole)."""
        added = request.messages
        if request.conversation is not None or any(refers(m) for m in added):
            if self._store is None:
                raise ModelConfigError(
                    "the run refers to a conversation store, but this worker keeps none (start "
                    "it with --store DIR, the same store as the worker that wrote it)"
                )
            added = await self._store.resolve(added)
        window, start, at = (
            request.context_window_tokens,
            request.view_from,
            request.view_summary_at,
        )
        if request.conversation is None or self._store is None:
            shown = view(added, window, start, at)
        else:
            shown = await view_of(
                self._store,
                request.conversation,
                request.conversation_messages,
                added,
                window,
                start,
                at,
            )
        if shown.left_out:
            summary = None
            if shown.summary is not None and self._store is not None:
                summary = await self._store.put_text(shown.summary)
            activity.logger.info(
                "model.view",
                extra={
                    "left_out": shown.left_out,
                    "shown": len(shown.messages),
                    "summary": summary,
                },
            )
        whole = request.model_copy(update={"messages": shown.messages, "conversation": None})
        return whole, added

    def _failure(
        self,
        error: ApplicationError,
        cap: timedelta | None = None,
        backoff: timedelta | None = None,
    ) -> ApplicationError:
        """``error`` as it may leave the activity: no key and no lone surrogate in its message,
        and a next retry delay (a provider's Retry-After, else ``backoff``) no longer than
        ``cap``."""
        delay = error.next_retry_delay
        if delay is None and not error.non_retryable:
            delay = backoff
        if delay is not None and cap is not None:
            delay = min(delay, cap)
        return ApplicationError(
            self._redact(well_formed(error.message)),
            *error.details,  # a repeatable error's fingerprint: a hash, no text of the error
            type=error.type,
            non_retryable=error.non_retryable,
            next_retry_delay=delay,
        )

    async def complete(
        self,
        request: ModelRequest,
        *,
        read_timeout: float,
        on_text: TextCallback | None = None,
        on_stream: Callable[[StreamAssembler], None] | None = None,
    ) -> ModelResponse:
        """One model call over HTTP, errors classified. Usable without Temporal.

        When ``request.stream`` is set, the provider streams and ``on_text`` is called with each
        piece of the reply's text as it arrives (the pieces join into ``content``), and
        ``on_stream`` with each stream's assembler as its reading starts (what it reported so
        far is readable when the call is cut); an endpoint that refuses streaming is asked
        without it, and neither is called. A typed answer the endpoint cannot give as asked is
        asked as ``json_object`` with its schema (``typed_fallback``)."""
        request = self.with_output_cap(request)
        typed = self._typed_endpoint(request)
        remembered = typed in self._json_object_only
        streaming = _Streaming(on_text, on_stream)
        try:
            return await self._complete(request, read_timeout, streaming, json_object=remembered)
        except ModelHTTPError as exc:
            if typed is None or remembered or exc.status not in typed_fallback.FALLBACK_STATUS:
                raise
            result = await self._complete(request, read_timeout, streaming, json_object=True)
        if typed not in self._json_object_only:
            self._json_object_only.add(typed)
            activity.logger.warning(
                "model.typed_answer.json_object",
                extra={"model": request.model, "url": self._redact(http_errors.safe_url(typed[0]))},
            )
        return result

    def with_output_cap(self, request: ModelRequest) -> ModelRequest:
        """``request`` naming its output limit: its own, else its endpoint's default (lower for
        a server on this machine, ``output_cap``)."""
        if request.max_tokens is not None:
            return request
        try:
            spec, _ = resolve(request.model)
        except ModelStringError:
            return request  # ``_complete`` says what is wrong
        endpoint = self._settings.endpoints.get(spec.name)
        base_url = endpoint.base_url if endpoint is not None else spec.default_base_url
        cap = output_cap.default_max_tokens(spec.name, base_url)
        return request.model_copy(update={"max_tokens": cap})

    def _typed_endpoint(self, request: ModelRequest) -> tuple[str, str] | None:
        """The endpoint (base URL, model name) an OpenAI-protocol typed answer goes to."""
        if request.output_schema is None and not request.require_tool:
            return None
        try:
            spec, name = resolve(request.model)
        except ModelStringError:
            return None  # ``_complete`` says what is wrong
        endpoint = self._settings.endpoints.get(spec.name)
        if spec.protocol != "openai" or endpoint is None:
            return None
        return endpoint.base_url, name

    async def _complete(
        self,
        request: ModelRequest,
        read_timeout: float,
        streaming: _Streaming,
        *,
        json_object: bool,
    ) -> ModelResponse:
        try:
            spec, name = resolve(request.model)
        except ModelStringError as exc:
            raise ModelConfigError(str(exc)) from exc
        endpoint = self._settings.endpoints.get(spec.name)
        if endpoint is None:
            raise ModelConfigError(f"provider {spec.name!r} is not configured on this worker")
        if endpoint.key_required and not endpoint.api_key:
            raise ModelConfigError(
                f"{endpoint.key_name} is not set in the worker's environment; "
                f"set it where the worker runs (keys never travel with the run)"
            )
        protocol = PROTOCOLS[spec.protocol]
        url = endpoint.base_url.rstrip("/") + protocol.path()
        timeout = httpx.Timeout(connect=10.0, read=read_timeout, write=30.0, pool=30.0)
        headers = protocol.headers(endpoint.api_key)  # JSON's content type among them
        kind = (url, name, bool(request.tools or request.tool_schemas))
        streams = request.stream and kind not in self._unstreamable
        refusal: str | None = None
        try:
            if streams:
                async with self._client.stream(
                    "POST",
                    url,
                    content=await body.encoded(
                        _body(protocol, request, name, json_object), request
                    ),
                    headers=headers,
                    timeout=timeout,
                ) as response:
                    if response.is_success and _is_event_stream(response):
                        try:
                            return await self._read_stream(response, protocol, spec.name, streaming)
                        except _NothingStreamed:
                            refusal = "the stream ended before its first event"
                    else:
                        await response.aread()  # an error, or a server that does not stream
                        refusal = http_errors.streaming_refusal(
                            response, protocol.error_message, self._redact
                        )
            if not streams or refusal is not None:
                plain = request.model_copy(update={"stream": False}) if request.stream else request
                sent = await body.encoded(_body(protocol, plain, name, json_object), plain)
                try:
                    response = await self._client.post(
                        url, content=sent, headers=headers, timeout=timeout
                    )
                except (httpx.RemoteProtocolError, httpx.ReadError):
                    if refusal is None:
                        raise
                    # The pooled connection the refused stream came on may be one its server
                    # is closing (llama.cpp's, after the stream it could not finish; or reset,
                    # llama-cpp-python's, whose stream fails after its 200 with no event).
                    response = await self._client.post(
                        url, content=sent, headers=headers, timeout=timeout
                    )
        except httpx.TransportError as exc:  # timeouts included
            raise http_errors.connection_error(exc, spec.name, url, self._redact) from exc
        except httpx.DecodingError as exc:  # a body its Content-Encoding does not describe
            raise ModelResponseError(f"{spec.name} response body cannot be decoded") from exc
        except httpx.InvalidURL as exc:
            raise ModelConfigError(
                f"{spec.base_url_env} is not a usable URL for {spec.name}: {exc}"
            ) from exc
        http_errors.raise_for_status(response, spec.name, protocol.error_message, self._redact)
        if refusal is not None:
            self._streaming_refused(kind, request.model, refusal)
        try:
            payload = response.json()
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
            raise ModelResponseError(f"{spec.name} response is not valid JSON") from exc
        return protocol.parse_response(payload, spec.name)

    def _streaming_refused(self, kind: tuple[str, str, bool], model: str, refusal: str) -> None:
        """Remember that the endpoint refused to stream what it answered whole; say so once."""
        if kind in self._unstreamable:
            return  # a call that was streaming as another learnt it
        self._unstreamable.add(kind)
        url = kind[0]
        activity.logger.warning(
            "model.stream.unsupported",
            extra={
                "model": model,
                "url": self._redact(http_errors.safe_url(url)),
                "refusal": refusal,
            },
        )

    async def _read_stream(
        self,
        response: httpx.Response,
        protocol: WireProtocol,
        provider: str,
        streaming: _Streaming,
    ) -> ModelResponse:
        """The events of a 200 stream, assembled; every way it can break, a ``ModelError``."""
        assembler = protocol.stream_assembler(provider, streaming.on_text)
        if streaming.on_stream is not None:
            streaming.on_stream(assembler)
        fed = False
        async with contextlib.aclosing(sse_events(response.aiter_lines())) as events:
            try:
                async for event in events:
                    fed = True
                    assembler.feed(event)
                    if assembler.done:
                        break
            except httpx.TransportError as exc:  # cut mid-way, or a read timed out
                raise http_errors.stream_cut(exc, provider, self._redact) from exc
            except httpx.DecodingError as exc:
                raise ModelResponseError(f"{provider} stream cannot be decoded") from exc
            except ErrorEvent as event:
                raise http_errors.stream_error(
                    event.payload, event.data, provider, protocol.error_message, self._redact
                ) from None
            if not assembler.done:
                if not fed:
                    raise _NothingStreamed
                raise http_errors.stream_ended(provider, assembler.end)
            # Nothing after the last event matters, but a body read to its end leaves the
            # connection to the pool for the next call; a server that lingers is not waited for.
            with contextlib.suppress(TimeoutError, httpx.HTTPError, ErrorEvent):
                async with asyncio.timeout(DRAIN_SECONDS):
                    async for _ in events:
                        pass
        return assembler.result()


def _body(
    protocol: WireProtocol, request: ModelRequest, name: str, json_object: bool
) -> dict[str, Any]:
    """The request's body; with ``json_object``, its typed answer asked in that form."""
    built = protocol.build_body(request, name)
    if json_object and protocol is PROTOCOLS["openai"]:
        built = typed_fallback.json_object(built) or built
    return built


CUT_REASONS = frozenset({"length", "max_tokens"})
"""Finish reasons that say the output limit cut the reply (OpenAI's, Anthropic's)."""


def _never_cut(request: ModelRequest, response: ModelResponse) -> None:
    """A reply its output limit cut is no answer: its text stops mid-way and its tool calls'
    arguments may be cut JSON. ``ModelOutputCut`` says so, with the limit to raise."""
    if response.finish_reason not in CUT_REASONS or request.accept_cut:
        return
    limit = request.max_tokens or DEFAULT_MAX_TOKENS
    raise ModelOutputCut(
        f"the reply was cut at its output limit of {limit} tokens (finish reason "
        f"{response.finish_reason}); raise max_tokens (or the token budget) for this run",
        usage=response.usage.model_dump(),
    )


REPEATED_STATUS = 500
"""A server error that, answered word for word to the same request twice running, is taken for
the request's fault: servers that report a malformed request as a 500 (llama.cpp's template
errors) would otherwise get the same doomed request on every attempt. 502, 503, 504 and 529
say the server is down or busy, which the next attempt may find otherwise."""


def _unless_repeated(exc: ModelError, request: ModelRequest) -> ApplicationError:
    """``exc`` as an ``ApplicationError``; non-retryable when it is the same 500 as the try
    before (a try's request is the same on every try, but for its number).

    A 500's failure carries its fingerprint as its first detail; the run hands it to the next
    try (``ModelRequest.repeated``), whichever worker runs it."""
    error = exc.to_application_error()
    if not (isinstance(exc, ModelHTTPError) and exc.status == REPEATED_STATUS):
        return error
    fingerprint = FINGERPRINT_PREFIX + hashlib.sha256(str(exc).encode()).hexdigest()[:24]
    if request.repeated != fingerprint:
        return ApplicationError(
            error.message,
            fingerprint,
            type=error.type,
            non_retryable=error.non_retryable,
            next_retry_delay=error.next_retry_delay,
        )
    return ApplicationError(
        f"{error.message} (the same error as the try before, for the same request: "
        "not retried again)",
        type=error.type,
        non_retryable=True,
    )


class _NothingStreamed(Exception):
    """A 200 stream ended before its first event: the server could not stream this request."""


DRAIN_SECONDS = 1.0
"""How long the rest of a stream's body is read after its last event."""


def _is_event_stream(response: httpx.Response) -> bool:
    """The body is a stream of events. Only a JSON body is not: some compatible servers ignore
    ``stream`` and answer whole, and a stream sent under another type is still a stream."""
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    return not (kind == "application/json" or kind.endswith("+json"))


@dataclass(frozen=True)
class _Streaming:
    """Who hears a streaming call as it goes: its text (``on_text``), its assembler
    (``on_stream``)."""

    on_text: TextCallback | None = None
    on_stream: Callable[[StreamAssembler], None] | None = None


def _collecting(said: list[str], on_text: TextCallback | None) -> TextCallback:
    """``on_text``, keeping the text of the reply so far in ``said`` too (what an interrupted
    call answers with)."""

    def collect(text: str) -> None:
        said.append(text)
        if on_text is not None:
            on_text(text)

    return collect
