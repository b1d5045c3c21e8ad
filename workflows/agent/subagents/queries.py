"""A sub-agent's client queries, answered through its parent.

A child asks its client (``ask_client``, or a detected query) as any run does, and reports the
query to its parent (``ChildReport.queries``); the parent shows it in its ``status``
(``AgentStatus.child_queries``) and stream, named by its ``delegate`` call and the child's query
id (``call_1/q1``; a grandchild's ``call_1/call_2/q1``). An answer the parent's ``answer_query``
update takes for that name is checked there against the query, and sent on to the child with
the ``client_answer`` signal (an update cannot be sent from a workflow); the child takes it as
its own answer, or sends it on to its own child.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from treadle.workflows.agent.messages.events import ClientAnswer, ClientQuery
from treadle.workflows.agent.messages.family import SEPARATOR, ChildRun
from treadle.workflows.agent.parts.client_queries import AnswerRefused, check_answer
from treadle.workflows.agent.parts.publishing import Publisher
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.base import describe_errors

CLIENT_ANSWER = "client_answer"
"""The signal a parent sends an answer on to its child with (``{"query_id": "q1", ...}``, a
``ClientAnswer``)."""


def for_child(run: AgentRun, answer: ClientAnswer) -> tuple[ChildRun, ClientQuery] | None:
    """The child and its query (named as this run names it) an answer is for; ``None``: the
    answer names no child's query (it is the run's own)."""
    if SEPARATOR not in answer.query_id:
        return None
    found = run.family.waiting_query(answer.query_id)
    if found is None:
        waiting = ", ".join(q.id for q in run.family.queries()) or "none"
        raise AnswerRefused(
            f"no sub-agent's query {answer.query_id[:80]!r} waits (waiting: {waiting})"
        )
    child, query = found
    named = query.model_copy(update={"id": answer.query_id})
    check_answer(named, answer, run.input.config.client_query_max_answer_chars)
    return child, query


def forward(run: AgentRun, pub: Publisher, answer: ClientAnswer) -> ClientQuery | None:
    """A parent: send an answer on to the child whose query it names; returns the query as this
    run names it, or ``None``: the answer is the run's own. ``AnswerRefused`` as ``for_child``."""
    found = for_child(run, answer)
    if found is None:
        return None
    child, query = found
    remaining = tuple(q for q in child.client_queries if q.id != query.id)
    run.family.replace(child.model_copy(update={"client_queries": remaining}))
    how = "declined" if answer.declined is not None else "answered"
    by = f" by {answer.decided_by}" if answer.decided_by else ""
    pub.record(run.state, "AnswerForwarded", f"{answer.query_id} {how}{by} to {child.workflow_id}")
    body = answer.model_copy(update={"query_id": query.id}).model_dump(exclude_none=True)
    handle = workflow.get_external_workflow_handle(child.workflow_id)
    # Handlers are not coroutines: the signal goes out as a task of the run's own loop.
    asyncio.get_running_loop().create_task(_send(handle, body))
    pub.show()
    return query.model_copy(update={"id": answer.query_id})


def from_parent(run: AgentRun, pub: Publisher, bodies: tuple[Any, ...]) -> str | None:
    """A child: its parent sent an answer on (``client_answer``). It is this run's own, or its
    child's (sent on again). Returns why it was refused, or ``None``."""
    if len(bodies) != 1:
        return f"{CLIENT_ANSWER} takes one JSON body; got {len(bodies)}"
    try:
        answer = ClientAnswer.model_validate(bodies[0])
        if forward(run, pub, answer) is not None:
            return None
        client = run.client
        open_query = client.query if client.answer is None else None
        check_answer(open_query, answer, run.input.config.client_query_max_answer_chars)
    except ValidationError as exc:
        return describe_errors(exc)
    except AnswerRefused as exc:
        return str(exc)
    client.answer = answer
    how = "declined" if answer.declined is not None else "answered"
    by = f" by {answer.decided_by}" if answer.decided_by else ""
    pub.record(run.state, "ClientAnswerReceived", f"{answer.query_id}: {how}{by} (via parent)")
    return None


async def _send(handle: workflow.ExternalWorkflowHandle[Any], body: Any) -> None:
    try:
        await handle.signal(CLIENT_ANSWER, body)
    except ApplicationError as exc:  # the child ended meanwhile: nothing waits any more
        workflow.logger.warning("agent.subagent.forward_failed", extra={"why": exc.message})
