"""The model activity: one interface, one module per wire protocol, httpx only.

Temporal owns retries: the shared ``httpx.AsyncClient`` makes exactly one attempt per activity
attempt, so every attempt is visible in the event history, and errors are classified into
retryable / non-retryable ``ApplicationError``s in one place (``activities.errors``).
API keys are read from the worker's environment by ``ProviderSettings.from_env`` and never leave
this process: not in activity inputs, results, errors or logs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import timedelta

import httpx
from temporalio import activity

from activities import openai_chat
from activities.errors import (
    ModelConfigError,
    ModelConnectionError,
    ModelError,
    ModelResponseError,
)
from workflows.models import ModelRequest, ModelResponse

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
OLLAMA_DEFAULT_BASE_URL = "http://localhost:11434/v1"


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    api_key: str | None
    key_required: bool
    key_name: str

    def __repr__(self) -> str:  # never print a key, not even by accident
        return f"Endpoint(base_url={self.base_url!r}, api_key={'set' if self.api_key else None})"


@dataclass(frozen=True)
class ProviderSettings:
    """Where each OpenAI-compatible provider lives. Built by the worker, from its environment."""

    endpoints: Mapping[str, Endpoint]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProviderSettings:
        openai_url = env.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_BASE_URL
        return cls(
            endpoints={
                "openai": Endpoint(
                    base_url=openai_url,
                    api_key=env.get("OPENAI_API_KEY") or None,
                    # A custom base URL is usually a local server that takes no key.
                    key_required=openai_url.rstrip("/") == OPENAI_DEFAULT_BASE_URL,
                    key_name="OPENAI_API_KEY",
                ),
                "ollama": Endpoint(
                    base_url=env.get("OLLAMA_BASE_URL") or OLLAMA_DEFAULT_BASE_URL,
                    api_key=None,
                    key_required=False,
                    key_name="",
                ),
            }
        )


def split_model(model: str) -> tuple[str, str]:
    provider, _, name = model.partition(":")
    if not name:
        raise ModelConfigError(f"model must look like 'provider:model', got {model!r}")
    return provider, name


def http_client() -> httpx.AsyncClient:
    """The worker's one shared client. Read timeouts are set per call from the activity's."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=10.0, read=300.0, write=30.0, pool=30.0),
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
        # No transport retries: Temporal retries, and each attempt shows in the history.
        transport=httpx.AsyncHTTPTransport(retries=0),
    )


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """Heartbeat while a long call is in flight, so a dead worker is noticed in seconds."""
    info = activity.info()
    if not info.heartbeat_timeout:
        yield
        return
    interval = max(0.5, info.heartbeat_timeout.total_seconds() / 3)

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class ModelActivities:
    """Holds the worker's shared HTTP client and provider settings."""

    def __init__(self, settings: ProviderSettings, client: httpx.AsyncClient) -> None:
        self._settings = settings
        self._client = client

    @activity.defn(name="call_model")
    async def call_model(self, request: ModelRequest) -> ModelResponse:
        """Ask the model for its next move; one HTTP attempt per activity attempt."""
        start_to_close = activity.info().start_to_close_timeout or timedelta(minutes=5)
        try:
            async with heartbeating():
                result = await self.complete(request, read_timeout=start_to_close.total_seconds())
        except ModelError as exc:
            raise exc.to_application_error() from exc
        activity.logger.info(
            "model.call.completed",
            extra={
                "model": request.model,
                "tool_calls": len(result.tool_calls),
                "total_tokens": result.usage.total_tokens,
            },
        )
        return result

    async def complete(self, request: ModelRequest, *, read_timeout: float) -> ModelResponse:
        """One chat completion over HTTP, errors classified. Usable without Temporal."""
        provider, name = split_model(request.model)
        endpoint = self._settings.endpoints.get(provider)
        if endpoint is None:
            known = ", ".join(sorted(self._settings.endpoints))
            raise ModelConfigError(f"unknown model provider {provider!r} (known: {known})")
        if endpoint.key_required and not endpoint.api_key:
            raise ModelConfigError(
                f"{endpoint.key_name} is not set in the worker's environment; "
                f"set it where worker.py runs (keys never travel with the run)"
            )
        headers = {"content-type": "application/json"}
        if endpoint.api_key:
            headers["authorization"] = f"Bearer {endpoint.api_key}"
        timeout = httpx.Timeout(connect=10.0, read=read_timeout, write=30.0, pool=30.0)
        url = endpoint.base_url.rstrip("/") + "/chat/completions"
        secrets = (endpoint.api_key,) if endpoint.api_key else ()
        body = openai_chat.build_body(request, name)
        try:
            response = await self._client.post(url, json=body, headers=headers, timeout=timeout)
        except httpx.TimeoutException as exc:
            raise ModelConnectionError(f"{provider} timed out: {type(exc).__name__}") from exc
        except httpx.TransportError as exc:
            where = openai_chat.safe_url(url)
            raise ModelConnectionError(
                openai_chat.redact(f"{provider} unreachable at {where}: {exc}", secrets)
            ) from exc
        openai_chat.raise_for_status(response, provider, secrets)
        try:
            payload = response.json()
        except ValueError as exc:
            raise ModelResponseError(f"{provider} response is not valid JSON") from exc
        return openai_chat.parse_response(payload, provider)
