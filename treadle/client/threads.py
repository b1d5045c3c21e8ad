"""``AgentClient``'s threads: send a thread its next message, wait for the turn that answers it,
close it, export it as Loom's JSON and import such a file as a new thread.

Sending and waiting are ``activities.thread_turns``' (the ``send_to_thread`` activity waits the
same way): this module makes them the client's, with its errors, and carries a request across
a continue-as-new. An update that reaches a thread as it continues as new is answered
NOT_FOUND; ``thread_turns.why_not`` tells that race (the thread still runs: the request is made
again, with the same update id, so it is one message) from a thread that is gone.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from temporalio.client import WorkflowHandle, WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from treadle.activities import thread_turns
from treadle.activities.errors import ThreadUnavailable as ThreadTurnUnavailable
from treadle.activities.errors import TreadleError
from treadle.activities.store.conversation import ConversationStore, whole_thread
from treadle.client.calls import HANDOVER_ATTEMPTS, HANDOVER_PAUSE_SECONDS
from treadle.client.errors import (
    InvalidRequest,
    StoredContentUnavailable,
    ThreadUnavailable,
)
from treadle.client.results import ImportedThread
from treadle.client.runs import Runs
from treadle.client.thread_import import ImportPlan, plan_thread
from treadle.client.workspaces import open_store
from treadle.workflows.agent.messages.content_refs import holds_refs
from treadle.workflows.agent.messages.models import (
    AgentStatus,
    MidTurn,
    SendReceipt,
    ThreadExport,
    ThreadSettings,
    UserMessage,
)
from treadle.workflows.agent.workflow import AgentWorkflow
from treadle.workflows.base import describe_errors

__all__ = ["Threads"]

T = TypeVar("T")


class Threads(Runs):
    """Threads: conversations that wait, durably, for their user's next message."""

    async def send(
        self,
        thread_id: str,
        text: str,
        *,
        update_id: str | None = None,
        mode: MidTurn | str | None = None,
    ) -> SendReceipt:
        """Send the thread ``text``, its next message (its ``send`` update): answered at once,
        or, while a turn runs, as ``mode`` says (else the thread's ``mid_turn``): queued behind
        the turn (``SendReceipt.queued``), steered into it, interrupting its model call, or
        refused (``ThreadUnavailable`` saying the thread is busy). The same ``update_id``
        again is the same message. ``ThreadUnavailable`` when it cannot take it."""
        try:
            message = UserMessage(text=text, mode=mode)
        except ValidationError as exc:
            raise InvalidRequest(f"invalid message: {describe_errors(exc)}") from exc
        # One update id for every attempt: a message sent again across a handover is one message.
        update = update_id or f"send-{uuid.uuid4().hex}"
        handle = self._calls.handle(thread_id)
        receipt: SendReceipt = await self._across_handover(
            handle,
            lambda: thread_turns.send_message(handle, text, update_id=update, mode=message.mode),
        )
        return receipt

    async def close(self, thread_id: str) -> AgentStatus:
        """Close the thread: it ends once the messages it has taken are answered (the status
        says how many still wait: ``queued_messages``)."""
        handle = self._calls.handle(thread_id)

        async def close() -> AgentStatus:
            status: AgentStatus = await handle.execute_update(AgentWorkflow.close)
            return status

        return await self._across_handover(handle, close)

    async def ask(self, thread_id: str, text: str) -> AgentStatus:
        """Send the thread ``text`` and wait for the turn that answers it (``wait_for_answer``)."""
        await self.send(thread_id, text)
        return await self.wait_for_answer(thread_id)

    async def wait_for_answer(
        self, thread_id: str, *, seen: Callable[[AgentStatus], None] | None = None
    ) -> AgentStatus:
        """The thread's status once it has answered every message it took: it waits for its
        user again with nothing queued (``final_answer``), or it has ended. ``seen`` is shown
        each status on the way (what waits for approval, say). ``ThreadUnavailable`` if its
        workflow closed without ending its turn (terminated, timed out)."""
        handle = self._calls.handle(thread_id)
        try:
            return await thread_turns.wait_for_answer(handle, seen=seen)
        except ThreadTurnUnavailable as exc:
            raise ThreadUnavailable(str(exc)) from exc
        except WorkflowQueryFailedError as exc:
            raise await self._calls.query_failed(thread_id, exc, what="the state query") from exc
        except RPCError as exc:
            raise await self._calls.rpc_failed(thread_id, exc, what="the state query") from exc

    async def turn_over(self, thread_id: str) -> AgentStatus | None:
        """The thread's status if it has answered every message it took, else ``None``."""
        status = await self.status(thread_id)
        return status if thread_turns.turn_is_over(status) else None

    async def check_thread(self, thread_id: str) -> AgentStatus:
        """The status of a running thread that can take a message; ``ThreadUnavailable`` for
        no such workflow, one that has ended, is no thread, or does not answer."""
        try:
            return await thread_turns.check_thread(self.temporal, thread_id)
        except ThreadTurnUnavailable as exc:
            raise ThreadUnavailable(str(exc)) from exc
        except RPCError as exc:
            raise await self._calls.rpc_failed(thread_id, exc, what="describe") from exc

    async def export(self, run_id: str, *, whole: bool = True) -> ThreadExport:
        """The run or thread as Loom's JSON (``ThreadExport``). ``whole``: every stored content
        read back from the store (the run itself holds previews), so the export is the whole
        conversation on its own."""
        ended = await self.closed_result(run_id)
        if ended is not None and ended.export is not None:
            exported = ended.export  # a completed run's, from its history: no worker needed
        else:
            exported = await self._calls.query(
                run_id, AgentWorkflow.export, what="the export query"
            )
        return await self._filled_in(exported) if whole else exported

    async def import_thread(
        self,
        thread: ThreadExport,
        *,
        settings: ThreadSettings | None = None,
        id: str | None = None,
        workspace: str | None = None,
        create_workspace: bool = False,
        trust: bool = False,
        task_queue: str | None = None,
    ) -> ImportedThread:
        """A new thread that continues ``thread`` (an export), under ``settings`` (model and
        config; default: the defaults), or, with ``trust``, the file's own. ``InvalidRequest``
        for a conversation that could not take a turn, before anything starts (``plan_thread``
        checks an import without a client; ``start_import`` starts what it planned)."""
        thread_id = id or f"thread-{uuid.uuid4().hex[:12]}"
        plan = plan_thread(
            thread,
            settings=settings or ThreadSettings(),
            thread_id=thread_id,
            workspace=workspace,
            create_workspace=create_workspace,
            trust=trust,
        )
        return await self.start_import(plan, thread_id, task_queue=task_queue)

    async def start_import(
        self, plan: ImportPlan, thread_id: str, *, task_queue: str | None = None
    ) -> ImportedThread:
        """Start the thread ``thread_import.plan_thread`` planned; its workspace snapshot (an
        export's files) is checked out into its workspace first, unless that directory has
        files of its own."""
        workspace = Path(plan.input.workspace)
        if plan.make_workspace:
            workspace.mkdir(parents=True, exist_ok=True)
        snapshot = (plan.input.resume or {}).get("workspace_snapshot")
        note = None
        if snapshot:
            note = await self.workspace.check_out_snapshot(thread_id, snapshot, workspace)
        await self.start(
            plan.input,
            id=thread_id,
            task_queue=task_queue,
            summary=f"thread (imported): {plan.input.task[:180]}",
        )
        return ImportedThread(
            id=thread_id,
            workspace=plan.input.workspace,
            ignored=plan.ignored,
            widened=plan.widened,
            trusted=plan.trusted,
            workspace_note=note,
        )

    # -- internals -----------------------------------------------------------------------------

    async def _filled_in(self, exported: ThreadExport) -> ThreadExport:
        stored = [
            m
            for m in exported.conversation.messages
            if m.content_ref is not None or any(holds_refs(c.arguments) for c in m.tool_calls)
        ]
        if not stored and exported.record is None:
            return exported
        blobs = open_store(self._store, self._environ)
        if blobs is None:
            raise StoredContentUnavailable(
                "the thread's conversation is in the store, but TREADLE_STORE is 'none'"
            )
        try:
            return await whole_thread(ConversationStore(blobs), exported)
        except TreadleError as exc:
            raise StoredContentUnavailable(
                f"cannot read the thread's stored contents: {exc}"
            ) from exc

    async def _across_handover(
        self, handle: WorkflowHandle[Any, Any], request: Callable[[], Awaitable[T]]
    ) -> T:
        """``request`` (an update of the thread), made again while the thread is between two
        runs of its chain (see the module); every refusal is ``ThreadUnavailable``."""
        for attempt in range(1, HANDOVER_ATTEMPTS + 1):
            try:
                return await request()
            except WorkflowUpdateFailedError as exc:
                raise ThreadUnavailable(thread_turns.refusal(exc)) from exc
            except ThreadTurnUnavailable as exc:
                raise ThreadUnavailable(str(exc)) from exc
            except RPCError as exc:
                if exc.status is not RPCStatusCode.NOT_FOUND:
                    raise await self._calls.rpc_failed(handle.id, exc, what="the update") from exc
                try:
                    reason = await thread_turns.why_not(handle, exc)
                except RPCError as again:
                    if again is not exc or attempt == HANDOVER_ATTEMPTS:
                        raise await self._calls.rpc_failed(
                            handle.id, again, what="the update"
                        ) from again
                    await asyncio.sleep(HANDOVER_PAUSE_SECONDS)
                    continue
                raise ThreadUnavailable(reason) from exc
        raise AssertionError("unreachable: the last attempt returns or raises")
