"""`treadle chat | send | close | export | import`: threads, Loom's conversation that waits
for its user between turns.

    treadle chat [--id ID] [--model P:M] [--workspace DIR] [FIRST MESSAGE]
                           [--allow-reads] [--env NAME]... [--no-answer | --decline-queries]
    treadle send ID "next message" [--wait] [--json]
    treadle close ID
    treadle export ID > thread.json
    treadle import thread.json [--id ID] [--workspace DIR] [--model P:M]
                             [--config FILE] [--require-approval TOOL,...] [--trust-file-config]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from treadle.activities import thread_turns as threads
from treadle.activities.errors import ThreadUnavailable, TreadleError
from treadle.activities.store.conversation import ConversationStore, whole_thread
from treadle.cli import live, shell, snapshots
from treadle.cli.exits import UsageError
from treadle.cli.thread_import import ImportPlan, plan_import
from treadle.cli.workspaces import make_workspace, resolve_workspace
from treadle.connection import store_location
from treadle.stores import open_blob_store
from treadle.stream import StreamUnavailable
from treadle.workflows.agent.messages.content_refs import holds_refs
from treadle.workflows.agent.messages.events import AgentEvent, approval_commands
from treadle.workflows.agent.messages.models import (
    TASK_QUEUE,
    AgentConfig,
    AgentInput,
    AgentStatus,
    SendReceipt,
    ThreadExport,
    ThreadSettings,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.parts.threads import ImportRefused
from treadle.workflows.agent.workflow import AgentWorkflow
from treadle.workflows.base import describe_errors

QUERY_TIMEOUT = threads.QUERY_TIMEOUT
EXIT_WORDS = {"/exit", "/quit"}
HANDOVER_ATTEMPTS = 40
HANDOVER_PAUSE_SECONDS = 0.25
"""A thread continues as new in milliseconds: a request that met it between two runs is made
again, every quarter second for ten seconds (``_across_handover``)."""
T = TypeVar("T")


def register(subparsers: Any) -> None:
    """Add the thread commands; each sets ``handler`` (async (client, args) -> exit code)."""
    chat = subparsers.add_parser("chat", help="talk with a thread: type, see the answer, again")
    chat.add_argument("message", nargs="?", help="the first message (default: asked for)")
    chat.add_argument("--id", help="thread id: continue it if it exists (default: new)")
    chat.add_argument("--model", default="openai:gpt-4o", help="provider:model")
    chat.add_argument("--workspace", help="directory the tools work in (default: workspaces/ID)")
    chat.add_argument("--create-workspace", action="store_true", help="create --workspace")
    chat.add_argument("--require-approval", metavar="TOOL,...", help="tools that need approval")
    chat.add_argument("--config", metavar="FILE", help="AgentConfig fields as JSON")
    # On a terminal chat asks about approvals itself; piped, it prints the commands.
    live.add_client_options(chat, interactive=False)
    chat.set_defaults(handler=cmd_chat)

    send = subparsers.add_parser("send", help="send a thread its next message")
    send.add_argument("workflow_id")
    send.add_argument("text")
    send.add_argument("--wait", action="store_true", help="wait for the answer and print it")
    send.add_argument("--json", action="store_true")
    send.set_defaults(handler=cmd_send)

    close = subparsers.add_parser("close", help="end a thread once its messages are answered")
    close.add_argument("workflow_id")
    close.set_defaults(handler=cmd_close)

    export = subparsers.add_parser("export", help="write a thread as Loom's JSON to stdout")
    export.add_argument("workflow_id")
    export.set_defaults(handler=cmd_export)

    load = subparsers.add_parser("import", help="start a new thread that continues a file")
    load.add_argument("file", help="a thread in Loom's JSON shape (from export)")
    load.add_argument("--id", help="the new thread's id (default: thread-<random>)")
    load.add_argument("--workspace", help="directory the tools work in (default: workspaces/ID)")
    load.add_argument("--create-workspace", action="store_true", help="create --workspace")
    load.add_argument("--model", default="openai:gpt-4o", help="provider:model")
    load.add_argument("--require-approval", metavar="TOOL,...", help="tools that need approval")
    load.add_argument("--config", metavar="FILE", help="AgentConfig fields as JSON")
    load.add_argument(
        "--trust-file-config",
        action="store_true",
        help="apply the file's own settings (model, config, system prompt) instead of these",
    )
    # The file is read and checked before connecting: a file that cannot continue starts nothing.
    load.set_defaults(handler=cmd_import, check=check_import)


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


async def cmd_chat(client: Client, args: argparse.Namespace) -> int:
    thread_id = args.id or f"thread-{uuid.uuid4().hex[:12]}"
    handle = client.get_workflow_handle(thread_id)
    existing = await _status_or_none(handle)
    offset: int | None = 0
    if existing is None:
        first = args.message or _ask()
        if first is None:
            return 0
        handle = await _start(client, args, thread_id, first)
        print(f"thread {thread_id} (continue with: {shell.starter('chat', '--id', thread_id)})")
    else:
        if not existing.thread:
            raise UsageError(f"{thread_id!r} is a single-task run, not a thread")
        offset = existing.stream_offset
        if args.message:
            await _send(handle, args.message)
        # Else a waiting thread's turn is over already: its last answer is shown, then asked.
    # Each turn waits until the thread waits again with nothing queued (``threads.turn_over``).
    view = live.TerminalView(speaker="agent> ", show_messages=False, show_started=False)
    live.warn_secret_env(args, view)
    # On a terminal the user is there to ask (approvals, consent, questions); piped lines are
    # the conversation's messages, never answers to a prompt.
    responder = live.responder_for(handle, view, args, can_ask=sys.stdin.isatty())
    responder.interactive = sys.stdin.isatty()
    while True:
        status, offset, shown = await _follow_turn(client, handle, offset, view, responder)
        if status.state is not State.WAITING_FOR_USER_INPUT:
            print(f"[{status.state.value}] {status.error or status.final_answer or ''}".rstrip())
            return 0 if status.state is State.DONE else 1
        if not shown:
            print(f"agent> {status.final_answer}")
        text = _ask()
        if text is None or text in EXIT_WORDS:
            print(f"(the thread waits; continue with: {shell.starter('chat', '--id', thread_id)})")
            return 0
        if text == "/close":
            await _close(handle)
            print("closed")
            return 0
        await _send(handle, text)


async def cmd_send(client: Client, args: argparse.Namespace) -> int:
    handle = client.get_workflow_handle(args.workflow_id)
    receipt = await _send(handle, args.text)
    if not args.wait:
        print(receipt.model_dump_json() if args.json else _describe(receipt))
        return 0
    # The thread took the message: once it waits with nothing queued, it has answered it.
    status = await _wait_for_answer(handle)
    if args.json:
        print(status.model_dump_json(indent=2))
    else:
        print(status.final_answer if status.state is State.WAITING_FOR_USER_INPUT else status.error)
    return 0 if status.state is State.WAITING_FOR_USER_INPUT else 1


async def cmd_close(client: Client, args: argparse.Namespace) -> int:
    status = await _close(client.get_workflow_handle(args.workflow_id))
    print(f"closing {args.workflow_id}: {status.queued_messages} message(s) to answer first")
    return 0


async def cmd_export(client: Client, args: argparse.Namespace) -> int:
    handle = client.get_workflow_handle(args.workflow_id)
    try:
        exported: ThreadExport = await handle.query(AgentWorkflow.export, rpc_timeout=QUERY_TIMEOUT)
    except RPCError as exc:
        raise UsageError(threads.missing(args.workflow_id, exc)) from exc
    exported = await _filled_in(exported)
    print(exported.model_dump_json(indent=2, exclude_defaults=True))
    return 0


async def _filled_in(exported: ThreadExport) -> ThreadExport:
    """The export with every stored content read back from the conversation store (the run
    itself holds previews), so the file is the whole conversation on its own."""
    stored = [
        m
        for m in exported.conversation.messages
        if m.content_ref is not None or any(holds_refs(c.arguments) for c in m.tool_calls)
    ]
    if not stored and exported.record is None:
        return exported
    blobs = open_blob_store(store_location(os.environ), os.environ)
    if blobs is None:
        raise UsageError("the thread's conversation is in the store, but TREADLE_STORE is 'none'")
    try:
        return await whole_thread(ConversationStore(blobs), exported)
    except TreadleError as exc:
        raise UsageError(f"cannot read the thread's stored contents: {exc}") from exc


def check_import(args: argparse.Namespace) -> None:
    """Read the file and plan the thread under the importer's settings (``args.plan``), or
    refuse it with one line, before anything connects or starts."""
    path = Path(args.file)
    try:
        thread = ThreadExport.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
    except ValidationError as exc:
        raise UsageError(f"{path} is not a thread: {describe_errors(exc, limit=3)}") from exc
    args.id = args.id or f"thread-{uuid.uuid4().hex[:12]}"
    workspace, args.create_workspace = resolve_workspace(
        args.workspace, args.id, create=args.create_workspace
    )
    try:
        importer = ThreadSettings(model=args.model, config=_config(args))
    except ValidationError as exc:
        raise UsageError(f"invalid settings: {describe_errors(exc)}") from exc
    try:
        args.plan = plan_import(
            thread,
            importer=importer,
            workspace=str(workspace),
            now=datetime.now(UTC),
            trust=args.trust_file_config,
        )
    except ImportRefused as exc:
        raise UsageError(f"{path} cannot be continued: {exc}") from exc
    except ValidationError as exc:
        raise UsageError(f"{path} cannot be continued: {describe_errors(exc)}") from exc


async def cmd_import(client: Client, args: argparse.Namespace) -> int:
    plan: ImportPlan = args.plan
    if plan.trusted:
        widens = "; ".join(plan.widened) or "nothing beyond the importer's"
        print(f"applied the file's config, which widens: {widens}", file=sys.stderr)
    elif plan.ignored:
        print(
            f"ignored the file's config: {', '.join(plan.ignored)} "
            "(--trust-file-config applies it)",
            file=sys.stderr,
        )
    if args.create_workspace:
        make_workspace(Path(plan.input.workspace))
    snapshot = (plan.input.resume or {}).get("workspace_snapshot")
    if snapshot:  # the thread's files, from the store, unless the directory has its own
        note = await snapshots.check_out_imported(args.id, snapshot, Path(plan.input.workspace))
        print(note, file=sys.stderr)
    await client.start_workflow(
        AgentWorkflow.run,
        plan.input,
        id=args.id,
        task_queue=args.task_queue,
        static_summary=f"thread (imported): {plan.input.task[:180]}",
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
    )
    print(args.id)
    return 0


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _workspace(args: argparse.Namespace, thread_id: str) -> Path:
    workspace, create = resolve_workspace(
        args.workspace, thread_id, create=getattr(args, "create_workspace", False)
    )
    if create:
        make_workspace(workspace)
    return workspace


def _config(args: argparse.Namespace) -> AgentConfig:
    """The thread's config: ``--config`` (JSON), then the flags over it, then the defaults.
    ``ValidationError`` for fields that do not validate."""
    config: dict[str, Any] = {}
    if args.config:
        try:
            config = json.loads(Path(args.config).read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read the config {args.config}: {exc}") from exc
        if not isinstance(config, dict):
            raise UsageError(f"the config {args.config} must be a JSON object of AgentConfig")
    if args.require_approval:
        config["require_approval"] = args.require_approval
    return AgentConfig.model_validate(config)


async def _start(
    client: Client, args: argparse.Namespace, thread_id: str, first: str
) -> WorkflowHandle[Any, Any]:
    try:
        agent_input = AgentInput(
            task=first,
            model=args.model,
            workspace=str(_workspace(args, thread_id)),
            thread=True,
            config=_config(args),
        )
    except ValidationError as exc:
        raise UsageError(f"invalid thread: {describe_errors(exc)}") from exc
    return await client.start_workflow(
        AgentWorkflow.run,
        agent_input,
        id=thread_id,
        task_queue=getattr(args, "task_queue", TASK_QUEUE),
        static_summary=f"thread: {first[:190]}",
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
    )


async def _send(handle: WorkflowHandle[Any, Any], text: str) -> SendReceipt:
    # One update id for every attempt: a message sent again across a handover is one message.
    update_id = f"send-{uuid.uuid4().hex}"
    try:
        return await _across_handover(
            handle, lambda: threads.send_message(handle, text, update_id=update_id)
        )
    except ValidationError as exc:
        raise UsageError(f"invalid message: {describe_errors(exc)}") from exc


async def _close(handle: WorkflowHandle[Any, Any]) -> AgentStatus:
    async def close() -> AgentStatus:
        status: AgentStatus = await handle.execute_update(AgentWorkflow.close)
        return status

    return await _across_handover(handle, close)


async def _across_handover(
    handle: WorkflowHandle[Any, Any], request: Callable[[], Awaitable[T]]
) -> T:
    """``request`` (an update of the thread), made again while the thread is between two runs
    of its chain: an update that reaches a run as it continues as new is answered NOT_FOUND,
    and ``threads.why_not`` tells that race (the thread still runs: it raises the error again)
    from a thread that is gone (its reason). Any refusal is a ``UsageError``."""
    for attempt in range(1, HANDOVER_ATTEMPTS + 1):
        try:
            return await request()
        except WorkflowUpdateFailedError as exc:
            raise UsageError(threads.refusal(exc)) from exc
        except ThreadUnavailable as exc:
            raise UsageError(str(exc)) from exc
        except RPCError as exc:
            try:
                reason = await threads.why_not(handle, exc)
            except RPCError as again:
                if again is not exc or attempt == HANDOVER_ATTEMPTS:
                    raise
                await asyncio.sleep(HANDOVER_PAUSE_SECONDS)
                continue
            raise UsageError(reason) from exc
    raise AssertionError("unreachable: the last attempt returns or raises")


async def _status_or_none(handle: WorkflowHandle[Any, Any]) -> AgentStatus | None:
    try:
        status: AgentStatus = await handle.query(AgentWorkflow.state, rpc_timeout=QUERY_TIMEOUT)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return None
        raise
    return status


async def _follow_turn(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    offset: int | None,
    view: live.TerminalView,
    responder: live.Responder,
) -> tuple[AgentStatus, int | None, bool]:
    """Show the turn live until the thread waits for its user again (or ended); returns its
    status, the stream offset to go on from, and whether the answer was shown."""
    status = await threads.turn_over(handle)
    if status is not None:
        return status, offset, False

    async def over(event: AgentEvent) -> bool:
        nonlocal status
        if event.kind in ("answer", "ended"):
            status = await threads.turn_over(handle)
        return status is not None

    view.answer_shown = False
    try:
        offset = await live.follow(
            client, handle.id, view, responder, from_offset=offset, until=over
        )
    except StreamUnavailable:
        return await _wait_for_answer(handle), None, False
    if status is None:  # the stream ended without the answer in sight
        status = await _wait_for_answer(handle)
    return status, offset, view.answer_shown


async def _wait_for_answer(handle: WorkflowHandle[Any, Any]) -> AgentStatus:
    """Wait for the turn (see ``threads.turn_over``), showing approvals on stderr (for a
    thread whose worker publishes no live stream)."""
    shown: set[str] = set()

    def show_approvals(status: AgentStatus) -> None:
        for pending in status.pending_approvals:
            if pending.call_id not in shown:
                shown.add(pending.call_id)
                commands = approval_commands(handle.id, pending.call_id)
                print(
                    f"waiting for approval: {pending.tool} {json.dumps(pending.arguments)[:200]}",
                    *(f"  {shell.runnable(command)}" for command in commands),
                    sep="\n",
                    file=sys.stderr,
                )

    try:
        return await threads.wait_for_answer(handle, seen=show_approvals)
    except ThreadUnavailable as exc:
        raise UsageError(str(exc)) from exc


def _ask() -> str | None:
    """The user's next line (``None`` at end of input)."""
    try:
        line = input("you> ") if sys.stdin.isatty() else sys.stdin.readline()
    except EOFError:
        return None
    if not line and not sys.stdin.isatty():
        return None
    return line.strip() or _ask()


def _describe(receipt: SendReceipt) -> str:
    if receipt.queued:
        return f"queued at position {receipt.position} (a turn is running)"
    return "sent"
