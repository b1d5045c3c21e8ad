"""``AgentClient``'s forks: a new run or thread that goes on from step N of another.

What a fork needs is read without the original's workers: its history (the input it was
started with, and the model call of step N + 1: its request and the record's head its result
names, across the runs of its continue-as-new chain) and the workers' store (step N's
workspace snapshot). The original is only read. The fork's own run is built by
``treadle.workflows.agent.parts.forking`` and started with it as its ``resume``, as an import
is; its ``ForkedFrom`` search attribute (``ID@STEP``) finds it in the Web UI.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError

from treadle.client.errors import InvalidRequest, WorkspaceUnavailable
from treadle.client.results import Forked
from treadle.client.threads import Threads
from treadle.client.workdirs import make_workspace, resolve_workspace
from treadle.workflows.agent.messages import search_attributes as sa
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentInput,
    ForkPoint,
    ModelRequest,
    ModelResponse,
)
from treadle.workflows.agent.parts.forking import fork
from treadle.workflows.base import describe_errors

__all__ = ["Forks"]

MODEL_ACTIVITY = "call_model"


@dataclass(frozen=True)
class _Origin:
    """What a fork reads of its original: the input it was started with, and the point."""

    input: AgentInput
    point: ForkPoint | None
    last_step: int


class Forks(Threads):
    """Forks: a new run or thread from any step of another, the original untouched."""

    async def fork(
        self,
        run_id: str,
        step: int,
        *,
        message: str | None = None,
        id: str | None = None,
        workspace: str | None = None,
        create_workspace: bool = False,
        model: str | None = None,
        config: Mapping[str, Any] | None = None,
        task_queue: str | None = None,
    ) -> Forked:
        """Start a fork of ``run_id`` from the end of its step ``step``: its conversation up to
        there (by reference to the store's record), then ``message`` if given; its workspace
        step ``step``'s snapshot, checked out into ``workspace`` (default ``workspaces/ID``);
        its model the original's unless given, its config the original's with ``config``'s
        fields over it. ``InvalidRequest`` for a step the run has no record of, or a config
        that does not validate, before anything starts."""
        if step < 0:
            raise InvalidRequest("--step must be 0 or more")
        if message is not None and not message.strip():
            raise InvalidRequest("the message is empty")
        origin = await self._origin(run_id, step)
        if origin.point is None:
            raise InvalidRequest(
                f"{run_id} has no model call after step {step} to fork from (its record goes "
                f"to step {origin.last_step}: fork from step 0 to {max(origin.last_step - 1, 0)}"
                "; a worker without a store keeps no record)"
            )
        settings = origin.input.config
        if config:
            try:
                settings = AgentConfig.model_validate(
                    {**settings.model_dump(exclude_unset=True), **config}
                )
            except ValidationError as exc:
                raise InvalidRequest(f"invalid config: {describe_errors(exc)}") from exc
        prefix = "thread" if origin.input.thread else "agent"
        fork_id = id or f"{prefix}-{uuid.uuid4().hex[:12]}"
        directory, create = resolve_workspace(workspace, fork_id, create=create_workspace)
        if directory.is_dir() and any(directory.iterdir()):
            raise InvalidRequest(
                f"workspace {directory} is not empty: a fork starts from step {step}'s files"
            )
        if create:
            make_workspace(directory)
        snapshot, note = await self._check_out(run_id, step, directory)
        agent_input, run = fork(
            origin.input,
            run_id,
            origin.point,
            workspace=str(directory),
            snapshot=snapshot,
            now=datetime.now(UTC),
            message=message,
            model=model,
            config=settings,
        )
        resumed = agent_input.model_copy(update={"resume": run.model_dump(mode="json")})
        started = await self.start(
            resumed,
            id=fork_id,
            task_queue=task_queue,
            summary=f"fork of {run_id} at step {step}: {(message or agent_input.task)[:150]}",
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(sa.FORKED_FROM, f"{run_id}@{step}")]
            ),
        )
        return Forked(
            id=started.id,
            run_id=started.run_id,
            thread=started.thread,
            forked_from=run_id,
            step=step,
            workspace=str(directory),
            workspace_note=note,
        )

    # -- internals -----------------------------------------------------------------------------

    async def _origin(self, run_id: str, step: int) -> _Origin:
        """The original's input and step ``step``'s fork point, read from its histories: the
        latest run of its chain first, then the runs before it, until the point is found."""
        client = self.temporal
        run: str | None = None
        started: AgentInput | None = None
        last_step = 0
        while True:
            handle = self._calls.handle(run_id, run=run)
            try:
                history = await handle.fetch_history()
            except RPCError as exc:
                raise await self._calls.rpc_failed(run_id, exc, what="its history") from exc
            events = list(history.events)
            first = events[0].workflow_execution_started_event_attributes
            (started,) = await client.data_converter.decode(
                list(first.input.payloads), [AgentInput]
            )
            point, last = await self._point(events, step)
            last_step = max(last_step, last)
            if point is not None:
                break
            run = first.continued_execution_run_id or None
            if run is None:
                break
        if started is None:  # a history always starts with its input: not reached
            raise InvalidRequest(f"{run_id} has no input in its history")
        original = started.model_copy(update={"resume": None, "stream": None})
        return _Origin(input=original, point=point, last_step=last_step)

    async def _point(self, events: list[HistoryEvent], step: int) -> tuple[ForkPoint | None, int]:
        """In one run's history: the model call of step ``step + 1`` that completed last, as a
        fork point (``None``: none here), and the last step a model call of it answered."""
        converter = self.temporal.data_converter
        scheduled: dict[int, HistoryEvent] = {}
        point: ForkPoint | None = None
        last = 0
        for event in events:
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attributes = event.activity_task_scheduled_event_attributes
                if attributes.activity_type.name == MODEL_ACTIVITY:
                    scheduled[event.event_id] = event
                continue
            if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                continue
            done = event.activity_task_completed_event_attributes
            asked = scheduled.get(done.scheduled_event_id)
            if asked is None:
                continue
            payloads = asked.activity_task_scheduled_event_attributes.input.payloads
            (request,) = await converter.decode(list(payloads), [ModelRequest])
            if request.step == 0:
                continue  # a summary (Reflecting), not a step's call
            last = max(last, request.step)
            if request.step != step + 1:
                continue
            (response,) = await converter.decode(list(done.result.payloads), [ModelResponse])
            if response.conversation is None:
                continue
            point = ForkPoint(
                step=step,
                conversation=response.conversation,
                conversation_messages=request.conversation_messages + len(request.messages),
                view_from=request.view_from,
                view_summary_at=request.view_summary_at,
            )
        return point, last

    async def _check_out(self, run_id: str, step: int, into: Path) -> tuple[str | None, str]:
        """Step ``step``'s workspace snapshot checked out into ``into`` (its key and one line
        saying what was done; no key when the run has none)."""
        try:
            done = await self.workspace.checkout(run_id, into, step=step)
        except WorkspaceUnavailable as exc:
            return None, f"workspace: {into}, empty ({exc})"
        return done.manifest, (
            f"workspace: {len(done.written)} file(s) of step {done.step}'s snapshot "
            f"{done.manifest[:12]} into {into}"
        )
