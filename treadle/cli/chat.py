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
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client

from treadle.cli import live, shell
from treadle.cli.defaults import DEFAULT_MODEL, DEMO_MODEL, DEMO_TASK_QUEUE, model_for
from treadle.cli.exits import UsageError
from treadle.client import AgentClient, NoStream, RunNotFound
from treadle.client.thread_import import ImportPlan, plan_thread
from treadle.client.workdirs import resolve_workspace
from treadle.workflows.agent.messages.events import AgentEvent, approval_commands
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentInput,
    AgentStatus,
    MidTurn,
    SendReceipt,
    ThreadExport,
    ThreadSettings,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.base import describe_errors

EXIT_WORDS = {"/exit", "/quit"}
MODEL_HELP = (
    f"provider:model (default {DEFAULT_MODEL}; on the demo's task queue {DEMO_TASK_QUEUE}, "
    f"its scripted {DEMO_MODEL})"
)


def register(subparsers: Any) -> None:
    """Add the thread commands; each sets ``handler`` (async (client, args) -> exit code)."""
    chat = subparsers.add_parser("chat", help="talk with a thread: type, see the answer, again")
    chat.add_argument("message", nargs="?", help="the first message (default: asked for)")
    chat.add_argument("--id", help="thread id: continue it if it exists (default: new)")
    chat.add_argument("--model", help=MODEL_HELP)
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
    send.add_argument(
        "--mode",
        choices=[m.value for m in MidTurn],
        help="while a turn runs: queue it after the turn, steer it into the turn, interrupt "
        "the model call with it, or reject it (default: the thread's mid_turn, queue)",
    )
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
    load.add_argument("--model", help=MODEL_HELP)
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
    agents = AgentClient(client, task_queue=args.task_queue)
    thread_id = args.id or f"thread-{uuid.uuid4().hex[:12]}"
    existing = await _status_or_none(agents, thread_id)
    offset: int | None = 0
    if existing is None:
        first = args.message or _ask()
        if first is None:
            return 0
        await _start(agents, args, thread_id, first)
        print(f"thread {thread_id} (continue with: {shell.starter('chat', '--id', thread_id)})")
    else:
        if not existing.thread:
            raise UsageError(f"{thread_id!r} is a single-task run, not a thread")
        offset = existing.stream_offset
        if args.message:
            await agents.send(thread_id, args.message)
        # Else a waiting thread's turn is over already: its last answer is shown, then asked.
    # Each turn waits until the thread waits again with nothing queued (``AgentClient.turn_over``).
    view = live.TerminalView(speaker="agent> ", show_messages=False, show_started=False)
    live.warn_secret_env(args, view)
    # On a terminal the user is there to ask (approvals, consent, questions); piped lines are
    # the conversation's messages, never answers to a prompt.
    responder = live.responder_for(agents, thread_id, view, args, can_ask=sys.stdin.isatty())
    responder.interactive = sys.stdin.isatty()
    while True:
        status, offset, shown = await _follow_turn(agents, thread_id, offset, view, responder)
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
            await agents.close(thread_id)
            print("closed")
            return 0
        await agents.send(thread_id, text)


async def cmd_send(client: Client, args: argparse.Namespace) -> int:
    agents = AgentClient(client)
    receipt = await agents.send(args.workflow_id, args.text, mode=args.mode)
    if not args.wait:
        print(receipt.model_dump_json() if args.json else _describe(receipt))
        return 0
    # The thread took the message: once it waits with nothing queued, it has answered it.
    status = await _wait_for_answer(agents, args.workflow_id)
    if args.json:
        print(status.model_dump_json(indent=2))
    else:
        print(status.final_answer if status.state is State.WAITING_FOR_USER_INPUT else status.error)
    return 0 if status.state is State.WAITING_FOR_USER_INPUT else 1


async def cmd_close(client: Client, args: argparse.Namespace) -> int:
    status = await AgentClient(client).close(args.workflow_id)
    print(f"closing {args.workflow_id}: {status.queued_messages} message(s) to answer first")
    return 0


async def cmd_export(client: Client, args: argparse.Namespace) -> int:
    exported = await AgentClient(client).export(args.workflow_id)
    print(exported.model_dump_json(indent=2, exclude_defaults=True))
    return 0


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
    # A workspace that cannot be used is its own error, not the file's.
    resolve_workspace(args.workspace, args.id, create=args.create_workspace)
    try:
        model = model_for(args.task_queue, args.model)
        importer = ThreadSettings(model=model, config=_config(args))
    except ValidationError as exc:
        raise UsageError(f"invalid settings: {describe_errors(exc)}") from exc
    try:
        args.plan = plan_thread(
            thread,
            settings=importer,
            thread_id=args.id,
            workspace=args.workspace,
            create_workspace=args.create_workspace,
            trust=args.trust_file_config,
        )
    except ValueError as exc:  # InvalidRequest: "cannot be continued: ..."
        raise UsageError(f"{path} {exc}") from exc


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
    imported = await AgentClient(client, task_queue=args.task_queue).start_import(plan, args.id)
    if imported.workspace_note is not None:
        print(imported.workspace_note, file=sys.stderr)
    if imported.memory_note is not None:
        print(imported.memory_note, file=sys.stderr)
    print(imported.id)
    return 0


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


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


async def _start(agents: AgentClient, args: argparse.Namespace, thread_id: str, first: str) -> None:
    workspace, create = resolve_workspace(
        args.workspace, thread_id, create=getattr(args, "create_workspace", False)
    )
    try:
        agent_input = AgentInput(
            task=first,
            model=model_for(args.task_queue, args.model),
            workspace=str(workspace),
            thread=True,
            config=_config(args),
        )
    except ValidationError as exc:
        raise UsageError(f"invalid thread: {describe_errors(exc)}") from exc
    await agents.start(agent_input, id=thread_id, create_workspace=create)


async def _status_or_none(agents: AgentClient, thread_id: str) -> AgentStatus | None:
    try:
        return await agents.status(thread_id)
    except RunNotFound:
        return None


async def _follow_turn(
    agents: AgentClient,
    thread_id: str,
    offset: int | None,
    view: live.TerminalView,
    responder: live.Responder,
) -> tuple[AgentStatus, int | None, bool]:
    """Show the turn live until the thread waits for its user again (or ended); returns its
    status, the stream offset to go on from, and whether the answer was shown."""
    status = await agents.turn_over(thread_id)
    if status is not None:
        return status, offset, False

    async def over(event: AgentEvent) -> bool:
        nonlocal status
        if event.kind in ("answer", "ended"):
            status = await agents.turn_over(thread_id)
        return status is not None

    view.answer_shown = False
    try:
        offset = await live.follow(
            agents, thread_id, view, responder, from_offset=offset, until=over
        )
    except NoStream:
        return await _wait_for_answer(agents, thread_id), None, False
    if status is None:  # the stream ended without the answer in sight
        status = await _wait_for_answer(agents, thread_id)
    return status, offset, view.answer_shown


async def _wait_for_answer(agents: AgentClient, thread_id: str) -> AgentStatus:
    """Wait for the turn (see ``AgentClient.wait_for_answer``), showing approvals on stderr
    (for a thread whose worker publishes no live stream)."""
    shown: set[str] = set()

    def show_approvals(status: AgentStatus) -> None:
        for pending in status.pending_approvals:
            if pending.call_id not in shown:
                shown.add(pending.call_id)
                commands = approval_commands(thread_id, pending.call_id)
                print(
                    f"waiting for approval: {pending.tool} {json.dumps(pending.arguments)[:200]}",
                    *(f"  {shell.runnable(command)}" for command in commands),
                    sep="\n",
                    file=sys.stderr,
                )

    return await agents.wait_for_answer(thread_id, seen=show_approvals)


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
    if receipt.mode is MidTurn.STEER:
        return f"steered into the running turn: read before step {receipt.step + 1}"
    if receipt.mode is MidTurn.INTERRUPT:
        return f"interrupting the running turn: read before step {receipt.step + 1}"
    return "sent"
