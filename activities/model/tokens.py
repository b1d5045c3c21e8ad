"""A streaming model call's text on the run's live stream, in few batches.

While the provider is still generating, the model activity publishes the text so far as
``TokenDelta``s on the run's ``tokens`` topic (``treadle.workflows.agent.messages.events``),
through ``WorkflowStreamClient``. Each batch is one signal to the run: a billed Temporal Cloud
action, one ``WorkflowExecutionSignaled`` event, and a workflow task to take it (three more
events at most). So the batches are few, about two a call:

- only text the provider is still adding to: a batch goes out once its text has waited
  ``HOLD_SECONDS`` (0.5 s) with the stream still open. A reply that comes whole (a server that
  does not stream, or one that sends the reply in one burst at its end) publishes nothing: the
  workflow's own ``model`` event carries it whole a moment later;
- nothing before ``FIRST_BATCH_AFTER`` (1 s) into the try, and ``NEXT_BATCH_AFTER`` (4 s)
  between two batches: a 10 s streamed reply shows at about 1 s and 5 s, then whole;
- at most ``MAX_TOKEN_BATCHES`` (2) batches on a first try, half as many on the next
  (``batch_limit``: 2, 1, then none), so a model call sends at most
  ``MAX_TOKEN_BATCHES_PER_CALL`` (3) signals;
- at most ``MAX_BATCH_CHARS`` (2,000) characters a batch: a batch cut there is the try's last,
  so a reply of any length adds at most a few KB of history a call, whatever the machine's
  timing (a live view shows the rest from the ``model`` event, itself cut at
  ``MAX_EVENT_TEXT``; the whole reply is the run's, in ``status`` and the store);
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
    "HOLD_SECONDS",
    "MAX_BATCH_CHARS",
    "MAX_TOKEN_BATCHES",
    "MAX_TOKEN_BATCHES_PER_CALL",
    "NEXT_BATCH_AFTER",
    "Publish",
    "TokenBatcher",
    "TokenPublisher",
    "batch_limit",
    "publishing",
]

MAX_TOKEN_BATCHES = 2
"""Batches (signals) a first try publishes at most."""
FIRST_BATCH_AFTER = 1.0
"""Seconds into a try before its first batch ..."""
NEXT_BATCH_AFTER = 4.0
"""... and between two batches."""
MAX_BATCH_CHARS = 2_000
"""The most text one batch carries; a batch cut there ends the try's batches."""
HOLD_SECONDS = 0.5
"""How long text must have waited, the stream still open, before it goes out: a reply that
arrives in one burst and ends is never published in pieces."""
CLOSE_WAIT_SECONDS = 2.0
"""How long the end of a call waits for a batch still being sent (so it lands before the
activity's result); then that signal is abandoned."""

Publish = Callable[[TokenDelta], Awaitable[None]]
"""Sends one batch to the run (one signal)."""


def batch_limit(attempt: int) -> int:
    """Batches try ``attempt`` (1, 2, ...) may publish: ``MAX_TOKEN_BATCHES``, halved on each
    try after the first."""
    return MAX_TOKEN_BATCHES >> max(0, attempt - 1)


MAX_TOKEN_BATCHES_PER_CALL = sum(
    batch_limit(n) for n in range(1, MAX_TOKEN_BATCHES.bit_length() + 1)
)
"""Batches a model call publishes at most, over all its tries (2 + 1)."""


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
        self._offset = 0
        self._pending: list[str] = []
        self._waiting_since: float | None = None
        self._redact = redact
        """The worker's secrets out of each batch (offsets count the text as published)."""

    def add(self, text: str, now: float) -> None:
        """More of the reply's text, arrived at ``now``."""
        if text and self.batches < self.limit:
            if not self._pending:
                self._waiting_since = now
            self._pending.append(text)

    def ready_at(self) -> float | None:
        """When the text waiting now may go out (``take``), if any waits and batches are left."""
        if not self._pending or self._waiting_since is None or self.batches >= self.limit:
            return None
        return max(self._due, self._waiting_since + HOLD_SECONDS)

    def take(self, now: float) -> TokenDelta | None:
        """The batch to publish at ``now``: the text since the last batch, if it has waited its
        hold, a batch is due and the try has batches left; else ``None``."""
        ready = self.ready_at()
        if ready is None or now < ready:
            return None
        text = "".join(self._pending)
        if self._redact is not None:
            text = self._redact(text)
        if len(text) > MAX_BATCH_CHARS:
            text = text[:MAX_BATCH_CHARS]
            self.limit = self.batches + 1  # nothing after a cut: offsets stay contiguous
        self._pending = []
        delta = TokenDelta(step=self.step, attempt=self.attempt, offset=self._offset, text=text)
        self._offset += len(text)
        self.batches += 1
        self._due = now + NEXT_BATCH_AFTER
        self._waiting_since = None
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
        self._wake: asyncio.TimerHandle | None = None
        self._stopped = False
        self.failed = False
        """A batch could not be sent, so nothing more is."""

    def __call__(self, text: str) -> None:
        if self._stopped:
            return
        self._batcher.add(text, self._clock())
        self._try_send()

    def _try_send(self) -> None:
        """Send the batch that is ready, or wake up when one will be (the stream may add no
        more text to call us again)."""
        self._wake = None
        if self._stopped or self._sending is not None:
            return  # stopped, or the batch being sent is not out yet: the text waits
        now = self._clock()
        delta = self._batcher.take(now)
        if delta is not None:
            self._sending = asyncio.create_task(self._send(delta))
            return
        ready = self._batcher.ready_at()
        if ready is not None and self._wake is None:
            self._wake = asyncio.get_running_loop().call_later(ready - now, self._try_send)

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
        self._try_send()  # text that arrived while this batch was out

    async def aclose(self, *, wait: float = CLOSE_WAIT_SECONDS) -> None:
        """Publish nothing more. A batch still being sent gets ``wait`` seconds to land (so it
        is in the history before the activity's result), then is abandoned; the text not
        published stays unpublished (the workflow's own event carries it whole)."""
        self._stopped = True
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
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
