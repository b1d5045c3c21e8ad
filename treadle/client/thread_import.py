"""Importing a thread (``AgentClient.import_thread``, ``treadle import``): a thread file is a
conversation, not a config.

The file brings its messages; the settings (model, task type, ``AgentConfig``, system prompt)
come from the importer (its command line, or its arguments) and the defaults, as for ``chat``.
A file that asks for other settings is imported without them, with one line naming what was
ignored; the file's own settings (over the importer's, for what it leaves out) apply only when
trusted (``--trust-file-config``, ``trust=True``), which lists what they grant beyond the
importer's (``run_command``, allowlist additions,
approvals removed, MCP servers, hooks, another tools queue, another model, a system prompt of
its own...).

An import that could not take a single turn (its conversation is over the model input limit the
workflow enforces, say) is refused here, before anything starts: the check is the workflow's own
``model_request``, run on the thread as it would start.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import ValidationError

from treadle.client.errors import InvalidRequest
from treadle.client.workdirs import resolve_workspace
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentInput,
    ExportedMemory,
    ThreadExport,
    ThreadSettings,
)
from treadle.workflows.agent.parts.planning import CannotCall, model_request
from treadle.workflows.agent.parts.state import AgentRun
from treadle.workflows.agent.parts.threads import ImportRefused, rebuild
from treadle.workflows.base import describe_errors

__all__ = ["ImportPlan", "plan_import", "plan_thread"]

MCP_APPROVAL_STRICTNESS = {"listed": 0, "hints": 1, "all": 2}
"""Which ``mcp_approval`` asks for more approvals than which."""


@dataclass(frozen=True)
class ImportPlan:
    """The thread to start, and what the user must be told about its settings."""

    input: AgentInput
    """The new thread's input, carrying the rebuilt run as ``resume``."""
    ignored: tuple[str, ...]
    """Settings the file asked for that differ from the importer's (not applied unless
    trusted): ``model``, ``task_type`` and ``AgentConfig`` field names."""
    widened: tuple[str, ...]
    """With ``trust``: what the file's settings grant beyond the importer's, one phrase each."""
    trusted: bool
    make_workspace: bool = False
    """The workspace directory is Treadle's own to create (``workspaces/ID``), or was asked to
    be created, and does not exist yet."""
    memory: ExportedMemory | None = None
    """The file's long-term memory items, to restore into the new thread's namespace."""


@dataclass(frozen=True)
class _Rebuilt:
    input: AgentInput
    run: AgentRun


def plan_thread(
    thread: ThreadExport,
    *,
    settings: ThreadSettings,
    thread_id: str,
    workspace: str | None,
    create_workspace: bool,
    trust: bool,
) -> ImportPlan:
    """The thread an import of ``thread`` as ``thread_id`` would start, checked without starting
    anything: its workspace resolved (``workdirs``), then ``plan_import``. ``InvalidRequest``
    (``cannot be continued: ...``) for a conversation that cannot continue."""
    directory, create = resolve_workspace(workspace, thread_id, create=create_workspace)
    try:
        plan = plan_import(
            thread, importer=settings, workspace=str(directory), now=datetime.now(UTC), trust=trust
        )
    except ImportRefused as exc:
        raise InvalidRequest(f"cannot be continued: {exc}") from exc
    except ValidationError as exc:
        raise InvalidRequest(f"cannot be continued: {describe_errors(exc)}") from exc
    return dataclasses.replace(plan, make_workspace=create)


def plan_import(
    thread: ThreadExport,
    *,
    importer: ThreadSettings,
    workspace: str,
    now: datetime,
    trust: bool,
) -> ImportPlan:
    """The thread ``thread`` continues, under the importer's settings (or, with ``trust``, the
    file's). ``ImportRefused`` for a conversation that cannot be continued or could not take a
    turn."""
    messages = thread.conversation.messages
    own_conversation = thread.conversation.model_copy(
        update={"messages": tuple(m for m in messages[:1] if m.role != "system") + messages[1:]}
    )
    # model_copy, not validation: a conversation of one user message is fine without its system one.
    own = _rebuild(
        thread.model_copy(update={"conversation": own_conversation, "treadle": importer}),
        workspace,
        now,
    )
    theirs = _rebuild(
        thread.model_copy(update={"treadle": _overlaid(importer, thread)}), workspace, now
    )
    chosen = theirs if trust else own
    request = model_request(chosen.run)
    if isinstance(request, CannotCall):
        raise ImportRefused(request.reason)
    return ImportPlan(
        input=chosen.input.model_copy(update={"resume": chosen.run.model_dump(mode="json")}),
        ignored=_ignored(thread, own, theirs),
        widened=_widened(own, theirs) if trust else (),
        trusted=trust,
        memory=thread.memory,
    )


def _overlaid(importer: ThreadSettings, thread: ThreadExport) -> ThreadSettings:
    """The importer's settings with what the file sets over them (a field the file leaves out,
    as an export leaves out defaults, stays the importer's)."""
    if "treadle" not in thread.model_fields_set:
        return importer
    said = thread.treadle
    config = importer.config
    if "config" in said.model_fields_set:
        fields = said.config.model_fields_set
        config = AgentConfig.model_validate(
            {**config.model_dump(), **said.config.model_dump(include=fields)}
        )
    return ThreadSettings(
        model=said.model if "model" in said.model_fields_set else importer.model,
        task_type=said.task_type if "task_type" in said.model_fields_set else importer.task_type,
        config=config,
    )


def _rebuild(thread: ThreadExport, workspace: str, now: datetime) -> _Rebuilt:
    agent_input, run = rebuild(thread, workspace, now)
    return _Rebuilt(agent_input, run)


def _ignored(thread: ThreadExport, own: _Rebuilt, theirs: _Rebuilt) -> tuple[str, ...]:
    """What the file sets that differs from the importer's settings, in the order the
    settings are declared (the system prompt counts whether it came as the conversation's
    system message or as ``system_prompt``)."""
    said = thread.treadle.model_fields_set if "treadle" in thread.model_fields_set else set()
    names: list[str] = [
        name
        for name in ("model", "task_type")
        if name in said and getattr(own.input, name) != getattr(theirs.input, name)
    ]
    config_said = thread.treadle.config.model_fields_set if "config" in said else set()
    for name in AgentConfig.model_fields:
        if name == "system_prompt":
            if own.run.memory.system_prompt != theirs.run.memory.system_prompt:
                names.append(name)
        elif name in config_said and (
            getattr(own.input.config, name) != getattr(theirs.input.config, name)
        ):
            names.append(name)
    return tuple(names)


def _added(theirs: tuple[str, ...], ours: tuple[str, ...]) -> str:
    return ", ".join(item for item in theirs if item not in ours)


def _widened(own: _Rebuilt, theirs: _Rebuilt) -> tuple[str, ...]:
    """What the file's settings allow that the importer's do not, one phrase each."""
    ours, file = own.input.config, theirs.input.config
    phrases: list[str] = []
    if file.allow_run_command and not ours.allow_run_command:
        phrases.append("run_command allowed")
    if added := _added(file.command_allowlist, ours.command_allowlist):
        phrases.append(f"command_allowlist adds {added}")
    if removed := _added(ours.require_approval, file.require_approval):
        phrases.append(f"approvals removed for {removed}")
    if MCP_APPROVAL_STRICTNESS[file.mcp_approval] < MCP_APPROVAL_STRICTNESS[ours.mcp_approval]:
        phrases.append(f"mcp_approval {file.mcp_approval} (not {ours.mcp_approval})")
    if added := _added(file.mcp_servers, ours.mcp_servers):
        phrases.append(f"MCP servers {added}")
    if added := _added(file.hooks, ours.hooks):
        phrases.append(f"hooks {added}")
    if ours.tools is not None and (file.tools is None or _added(file.tools, ours.tools)):
        more = "every tool" if file.tools is None else _added(file.tools, ours.tools)
        phrases.append(f"tools adds {more}")
    if unblocked := _added(ours.blacklisted_tools, file.blacklisted_tools):
        phrases.append(f"no longer blacklisted: {unblocked}")
    if file.tool_task_queue != ours.tool_task_queue:
        phrases.append(f"tools run on task queue {file.tool_task_queue or 'of the run'}")
    if theirs.run.model != own.run.model:
        phrases.append(f"model {theirs.run.model} (not {own.run.model})")
    if file.reflection_model != ours.reflection_model and file.reflection_model:
        phrases.append(f"reflection_model {file.reflection_model}")
    if theirs.run.memory.system_prompt != own.run.memory.system_prompt:
        phrases.append("its own system prompt")
    if file.max_steps > ours.max_steps:
        phrases.append(f"max_steps {file.max_steps} (not {ours.max_steps})")
    if ours.token_budget is not None and (
        file.token_budget is None or file.token_budget > ours.token_budget
    ):
        phrases.append(f"token_budget {file.token_budget or 'unlimited'} (not {ours.token_budget})")
    return tuple(phrases)
