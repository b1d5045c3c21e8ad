"""A streaming model call's text on the run's live stream, in few batches.

While the provider is still generating, the model activity publishes the text so far as
``TokenDelta``s on the run's ``tokens`` topic (``treadle.workflows.agent.messages.events``), through
``WorkflowStreamClient``. Each batch is one signal to the run: one ``WorkflowExecutionSignaled``
event, and a workflow task to take it (three more events at most). A reply's length must not
decide how much history it adds, so the batches are few, and further apart the longer a call
runs:

- nothing before the attempt has run ``FIRST_BATCH_AFTER`` (0.5 s): a fast call publishes
  nothing, and its text reaches watchers whole, in the workflow's own ``model`` event;
- then at most one batch per gap, each gap twice the one before (1 s, 2 s, 4 s ...): batches at
  0.5 s, 1.5 s, 3.5 s, 7.5 s ... into the attempt at the earliest;
- at most ``MAX_TOKEN_BATCHES`` (6) batches on a first attempt, half as many on each retry
  (``batch_limit``: 6, 3, 1, then none), so a model call, whatever its attempts, sends at most
  ``MAX_TOKEN_BATCHES_PER_CALL`` (10) signals: at most 40 history events;
- never the rest at the end: the ``model`` event carries the whole text anyway.

Each batch is redacted (``treadle.activities.content``: the worker's secrets, any 8 characters of
one) before it goes out, and offsets count the text as published. A batch holds the text since the
one before; together a call's batches hold its text at most once per attempt. A retried attempt
streams again from offset 0 with its own ``attempt``, so a watcher shows only what goes past
what it already showed for that step.

Publishing never fails the call: when a signal fails (the run is gone, the server refuses) it is
logged once (``model.tokens.publish_failed``) and the attempt publishes nothing more. Batches
are sent in the background, one at a time, so reading the stream never waits for a signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from treadle.activities.content.redaction import current
from treadle.activities.model.streaming import TextCallback
from treadle.workflows.agent.messages.events import TOKENS_TOPIC, TokenDelta
from treadle.workflows.agent.messages.models import ModelRequest

__all__ = [
    "CLOSE_WAIT_SECONDS",
    "FIRST_BATCH_AFTER",
    "MAX_TOKEN_BATCHES",
    "MAX_TOKEN_BATCHES_PER_CALL",
    "Publish",
    "TokenBatcher",
    "TokenPublisher",
    "batch_limit",
    "publishing",
]

MAX_TOKEN_BATCHES = 6
"""Batches (signals) a first attempt publishes at most."""
FIRST_BATCH_AFTER = 0.5
"""Seconds into an attempt before its first batch; each later gap is twice the one before."""
CLOSE_WAIT_SECONDS = 2.0
"""How long the end of a call waits for a batch still being sent (so it lands before the
activity's result); then that signal is abandoned."""

Publish = Callable[[TokenDelta], Awaitable[None]]
"""Sends one batch to the run (one signal)."""


def batch_limit(attempt: int) -> int:
    """Batches attempt ``attempt`` (1, 2, ...) may publish: ``MAX_TOKEN_BATCHES``, halved on
    each retry."""
    return MAX_TOKEN_BATCHES >> max(0, attempt - 1)


MAX_TOKEN_BATCHES_PER_CALL = sum(
    batch_limit(n) for n in range(1, MAX_TOKEN_BATCHES.bit_length() + 1)
)
"""Batches a model call publishes at most, over all its attempts (6 + 3 + 1)."""


class TokenBatcher:
    """When an attempt's text is published, and as which ``TokenDelta``s: the timing policy
    alone, with the time passed in (seconds on any monotonic clock)."""

    def __init__(
        self,
        *,
        step: int,
        attempt: int,
        started: float,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.step = step
        self.attempt = attempt
        self.limit = batch_limit(attempt)
        self.batches = 0
        """Batches taken so far."""
        self._due = started + FIRST_BATCH_AFTER
        self._gap = FIRST_BATCH_AFTER * 2
        self._offset = 0
        self._pending: list[str] = []
        self._redact = redact
        """The worker's secrets out of each batch (offsets count the text as published)."""

    def add(self, text: str) -> None:
        """More of the reply's text."""
        if text and self.batches < self.limit:
            self._pending.append(text)

    def take(self, now: float) -> TokenDelta | None:
        """The batch to publish at ``now``: the text since the last batch, if a batch is due,
        there is new text, and the attempt has batches left; else ``None``."""
        if not self._pending or now < self._due or self.batches >= self.limit:
            return None
        text = "".join(self._pending)
        if self._redact is not None:
            text = self._redact(text)
        self._pending = []
        delta = TokenDelta(step=self.step, attempt=self.attempt, offset=self._offset, text=text)
        self._offset += len(text)
        self.batches += 1
        self._due = now + self._gap
        self._gap *= 2
        return delta


class TokenPublisher:
    """The text callback of a streaming call: feeds a ``TokenBatcher`` and sends each batch it
    lets out with ``publish``, in the background, one at a time."""

    def __init__(
        self,
        batcher: TokenBatcher,
        publish: Publish,
        *,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.LoggerAdapter[Any] | logging.Logger = activity.logger,
    ) -> None:
        self._batcher = batcher
        self._publish = publish
        self._clock = clock
        self._logger = logger
        self._sending: asyncio.Task[None] | None = None
        self._stopped = False
        self.failed = False
        """A batch could not be sent, so nothing more is."""

    def __call__(self, text: str) -> None:
        if self._stopped:
            return
        self._batcher.add(text)
        if self._sending is not None:
            return  # the batch being sent is not out yet: this text waits for the next
        delta = self._batcher.take(self._clock())
        if delta is not None:
            self._sending = asyncio.create_task(self._send(delta))

    async def _send(self, delta: TokenDelta) -> None:
        try:
            await self._publish(delta)
        except Exception as exc:  # the run is gone, the server refused...: the call goes on
            self._stopped = self.failed = True
            self._logger.warning(
                "model.tokens.publish_failed",
                extra={
                    "step": delta.step,
                    "attempt": delta.attempt,
                    "offset": delta.offset,
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )
        finally:
            self._sending = None

    async def aclose(self, *, wait: float = CLOSE_WAIT_SECONDS) -> None:
        """Publish nothing more. A batch still being sent gets ``wait`` seconds to land (so it
        is in the history before the activity's result), then is abandoned; the text not
        published stays unpublished (the workflow's own event carries it whole)."""
        self._stopped = True
        sending = self._sending
        if sending is None:
            return
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sending, wait)  # cancels it on timeout
            return
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending


def _stream_publish() -> Publish:
    """Publishes on the ``tokens`` topic of the run that scheduled this activity."""
    client = WorkflowStreamClient.from_within_activity()
    topic = client.topic(TOKENS_TOPIC, type=TokenDelta)

    async def publish(delta: TokenDelta) -> None:
        topic.publish(delta)
        await client.flush()  # one signal, confirmed by the server (or raises)

    return publish


@contextlib.asynccontextmanager
async def publishing(request: ModelRequest) -> AsyncIterator[TextCallback | None]:
    """The text callback for ``request``: a ``TokenPublisher`` when it streams from an activity
    a workflow scheduled; ``None`` when there is nothing to publish to (no streaming asked for,
    the activity called directly as tests do, a standalone activity)."""
    if not request.stream or not activity.in_activity():
        yield None
        return
    info = activity.info()
    if info.workflow_id is None:
        yield None
        return
    try:
        publish = _stream_publish()
    except RuntimeError as exc:  # no client in this activity context
        activity.logger.warning(
            "model.tokens.publish_failed", extra={"step": request.step, "error": str(exc)}
        )
        yield None
        return
    batcher = TokenBatcher(
        step=request.step, attempt=request.attempt, started=time.monotonic(), redact=current()
    )
    publisher = TokenPublisher(batcher, publish)
    try:
        yield publisher
    except BaseException:  # a failed or cancelled call waits for no signal
        await publisher.aclose(wait=0)
        raise
    await publisher.aclose()
