"""``send_to_thread``: a scheduled agent's slot sends a thread its next message and waits,
heartbeating, for the turn that answers it.

Sending and waiting are ``activities.thread_turns``, which ``treadle.client`` uses for a person
too; this module is the activity around them: the update id that makes a retried attempt the
same message, the heartbeat that says the message went through, and a slower pace of queries
(nobody watches a slot, and it may wait for hours).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from treadle.activities.errors import ThreadUnavailable
from treadle.activities.heartbeat import heartbeating
from treadle.activities.thread_turns import send_message, wait_for_answer
from treadle.workflows.scheduled.models import SendToThreadInput, ThreadAnswer

__all__ = ["ACTIVITIES", "ANSWER_POLL_MAX_SECONDS", "ANSWER_POLL_SECONDS", "send_to_thread"]

ANSWER_POLL_SECONDS = 1.0
ANSWER_POLL_MAX_SECONDS = 15.0
"""How often ``send_to_thread`` asks: every second at first, then less and less often, up to
every 15 s (``thread_turns.poll_delays``): nobody watches it, and it may wait for hours."""
SENT = "sent"
"""``send_to_thread``'s heartbeat detail once the message went through: a retried attempt
waits for the answer without sending the message again."""


@activity.defn
async def send_to_thread(request: SendToThreadInput) -> ThreadAnswer:
    """Send a thread its next message, then wait, heartbeating, until it has answered it."""
    info = activity.info()
    handle = activity.client().get_workflow_handle(request.thread_id)
    try:
        if SENT not in info.heartbeat_details:
            async with heartbeating():  # no worker for the thread: the update waits
                # Named after this activity of this run (two slots triggered in one second
                # share a workflow id): an attempt retried after a send that went through but
                # was never heartbeaten is the same update, not a second message.
                update_id = f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"
                await send_message(handle, request.text, update_id=update_id)
            activity.heartbeat(SENT)
        async with heartbeating(SENT):
            status = await wait_for_answer(
                handle, poll_seconds=ANSWER_POLL_SECONDS, max_poll_seconds=ANSWER_POLL_MAX_SECONDS
            )
    except ThreadUnavailable as exc:
        raise ApplicationError(str(exc), type="ThreadUnavailable", non_retryable=True) from exc
    # Any other error is retried (within the answer timeout): the server or the thread's worker
    # did not answer, or the message reached a run that had just continued as new
    # (``thread_turns.why_not``).
    activity.logger.info(
        "thread.message.answered",
        extra={"thread.id": request.thread_id, "thread.state": status.state.value},
    )
    return ThreadAnswer(
        thread_id=request.thread_id,
        state=status.state,
        answer=status.final_answer,
        error=status.error,
    )


ACTIVITIES: list[Callable[..., Any]] = [send_to_thread]
"""Activities the worker registers for threads."""
