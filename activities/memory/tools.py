"""The memory tools a run with ``config.memory`` offers: ``remember``, ``recall``, ``forget``.

Each runs in the ``run_tool`` activity like any tool (validation, approval, blacklist, the
trace), on its run's namespace only (``ToolPolicy.memory_namespace``: the model never names
one). What is remembered passes the content door first: the worker's secrets are redacted
before it reaches the namespace. A ``remember`` retried after a lost attempt is one item (the
update's id is the call's).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from temporalio import activity

from treadle.activities.content.redaction import current
from treadle.activities.memory import store
from treadle.activities.tools.custom import Tool, ToolContext, ToolError, ToolOutput
from treadle.workflows.agent.messages.catalogue import FORGET, RECALL, REMEMBER
from treadle.workflows.agent.messages.tool_args import ToolArgs
from treadle.workflows.memory.models import MAX_ITEM_CHARS, MAX_RECALL, MemoryItem, Recall, Remember

__all__ = ["FORGET_TOOL", "RECALL_TOOL", "REMEMBER_TOOL", "TOOLS"]


class RememberArgs(ToolArgs):
    text: str = Field(
        min_length=1,
        max_length=MAX_ITEM_CHARS,
        description="One fact or preference to keep for later conversations, in a sentence.",
    )
    ttl_days: float | None = Field(
        None, gt=0, le=3650, description="Forget it after this many days (default: never)."
    )


class RecallArgs(ToolArgs):
    query: str = Field(
        "", max_length=1000, description="Keywords to look for (empty: the newest memories)."
    )
    limit: int = Field(5, ge=1, le=MAX_RECALL, description="How many memories at most.")


class ForgetArgs(ToolArgs):
    id: str = Field(min_length=1, max_length=20, description="The memory's id, e.g. m3.")


def _namespace(context: ToolContext) -> str:
    namespace = context.policy.memory_namespace
    if namespace is None:
        raise ToolError("this run has no long-term memory (config.memory)")
    return namespace


def _line(item: MemoryItem) -> str:
    until = f" (until {item.expires_at:%Y-%m-%d})" if item.expires_at else ""
    return f"{item.id}: {item.text}{until}"


async def remember(args: RememberArgs, context: ToolContext) -> ToolOutput:
    info = activity.info()
    ttl = args.ttl_days * 86400 if args.ttl_days else context.policy.memory_ttl_seconds
    asked = Remember(text=current()(args.text), ttl_seconds=ttl, by=info.workflow_id)
    try:
        item = await store.remember(
            activity.client(),
            info.task_queue,
            _namespace(context),
            asked,
            update_id=f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}",
        )
    except store.MemoryRefused as exc:
        raise ToolError(str(exc)) from exc
    return ToolOutput(text=f"remembered {_line(item)}")


async def recall(args: RecallArgs, context: ToolContext) -> ToolOutput:
    found = await store.recall(
        activity.client(), _namespace(context), Recall(query=args.query, limit=args.limit)
    )
    if not found.items:
        return ToolOutput(text="no memories match")
    return ToolOutput(text="\n".join(_line(i) for i in found.items))


async def forget(args: ForgetArgs, context: ToolContext) -> ToolOutput:
    try:
        item = await store.forget(activity.client(), _namespace(context), args.id)
    except store.MemoryRefused as exc:
        raise ToolError(str(exc)) from exc
    return ToolOutput(text=f"forgot {_line(item)}")


REMEMBER_TOOL = Tool(
    name=REMEMBER,
    description="Keep a fact or preference in long-term memory, for later conversations.",
    args=RememberArgs,
    run=remember,
    target=lambda args: args.text[:60],
)
RECALL_TOOL = Tool(
    name=RECALL,
    description="Search long-term memory by keywords; answers each memory with its id.",
    args=RecallArgs,
    run=recall,
    target=lambda args: args.query[:60],
)
FORGET_TOOL = Tool(
    name=FORGET,
    description="Remove one memory from long-term memory, by its id.",
    args=ForgetArgs,
    run=forget,
    target=lambda args: args.id,
)
TOOLS: tuple[Tool[Any], ...] = (REMEMBER_TOOL, RECALL_TOOL, FORGET_TOOL)
