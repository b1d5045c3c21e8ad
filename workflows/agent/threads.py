"""Threads (Loom): which messages and closes a thread takes. Pure checks for the ``send`` and
``close`` update validators; a refusal rejects the update before anything reaches history."""

from __future__ import annotations

from pydantic_core import PydanticSerializationError
from temporalio.exceptions import ApplicationError

from workflows.agent.models import UserMessage
from workflows.agent.state import AgentRun


def _refuse(why: str) -> ApplicationError:
    return ApplicationError(why, type="MessageRefused", non_retryable=True)


def check_message(run: AgentRun, message: UserMessage) -> None:
    """A thread that is open takes a non-empty message that can be written to history."""
    if not run.input.thread:
        raise _refuse("this run is not a thread: it ends at its answer (start one with --thread)")
    if run.closing or run.state.is_terminal:
        raise _refuse("the thread is closed")
    if not message.text.strip():
        raise _refuse("the message is empty")
    try:
        message.model_dump_json()
    except PydanticSerializationError:
        raise _refuse("the message contains text that is not valid Unicode") from None


def check_close(run: AgentRun) -> None:
    if not run.input.thread:
        raise _refuse("this run is not a thread (cancel a run instead)")
    if run.closing or run.state.is_terminal:
        raise _refuse("the thread is already closed")
