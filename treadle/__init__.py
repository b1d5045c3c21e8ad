"""Treadle: durable AI agents on Temporal. What a library user needs is here, by name::

    from treadle import TreadlePlugin, AgentInput, AgentWorkflow, Tool, ToolArgs

(docs/embedding.md). Every name is imported when first used (PEP 562): importing a module of
Treadle imports this package first, inside the workflow sandbox too, so it imports nothing
itself. ``treadle.workflows``, ``treadle.activities`` and the rest are how Treadle is built,
not where a user imports from.
"""

import importlib as _importlib
import typing as _typing

__all__ = [
    "TASK_QUEUE",
    "AgentClient",
    "AgentConfig",
    "AgentInput",
    "AgentResult",
    "AgentStatus",
    "AgentWorkflow",
    "ApproveSignal",
    "Decision",
    "GuideSignal",
    "Hook",
    "HookBusy",
    "HookFailed",
    "HookRequest",
    "HookResult",
    "ModifySignal",
    "PendingApproval",
    "ProviderSpec",
    "RejectSignal",
    "RunStatus",
    "SendReceipt",
    "State",
    "TokenUsage",
    "Tool",
    "ToolArgs",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "Trace",
    "TraceEntry",
    "TreadlePlugin",
    "UserMessage",
    "start_attributes",
]

_MODELS = "treadle.workflows.agent.messages.models"
_TOOLS = "treadle.activities.tools.custom"
_HOOKS = "treadle.activities.hooks.base"
_HOME: dict[str, str] = {
    "TreadlePlugin": "treadle.plugin",
    "AgentClient": "treadle.client",
    "AgentWorkflow": "treadle.workflows.agent.workflow",
    "State": "treadle.workflows.agent.messages.state_machine",
    "ProviderSpec": "treadle.workflows.agent.messages.providers",
    "HookRequest": "treadle.workflows.agent.messages.hooks",
    "HookResult": "treadle.workflows.agent.messages.hooks",
    "Hook": _HOOKS,
    "HookBusy": _HOOKS,
    "HookFailed": _HOOKS,
    "Tool": _TOOLS,
    "ToolArgs": _TOOLS,
    "ToolContext": _TOOLS,
    "ToolError": _TOOLS,
    "ToolOutput": _TOOLS,
    "start_attributes": "treadle.workflows.agent.messages.search_attributes",
}
"""Where each public name lives; the others are the run's messages (``_MODELS``)."""


def __getattr__(name: str) -> _typing.Any:
    if name not in __all__:
        raise AttributeError(f"module 'treadle' has no attribute {name!r}")
    value = getattr(_importlib.import_module(_HOME.get(name, _MODELS)), name)
    globals()[name] = value  # the next use is a plain look-up
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if (
    _typing.TYPE_CHECKING
):  # what type checkers and editors see; nothing of it is imported at run time
    from treadle.activities.hooks.base import Hook, HookBusy, HookFailed
    from treadle.activities.tools.custom import Tool, ToolArgs, ToolContext, ToolError, ToolOutput
    from treadle.plugin import TreadlePlugin
    from treadle.workflows.agent.messages.hooks import HookRequest, HookResult
    from treadle.workflows.agent.messages.models import (
        TASK_QUEUE,
        AgentConfig,
        AgentInput,
        AgentResult,
        AgentStatus,
        ApproveSignal,
        Decision,
        GuideSignal,
        ModifySignal,
        PendingApproval,
        RejectSignal,
        RunStatus,
        SendReceipt,
        TokenUsage,
        Trace,
        TraceEntry,
        UserMessage,
    )
    from treadle.workflows.agent.messages.providers import ProviderSpec
    from treadle.workflows.agent.messages.state_machine import State
    from treadle.workflows.agent.workflow import AgentWorkflow
