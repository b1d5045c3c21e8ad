"""Treadle's command line, the ``treadle`` command (``starter.py`` and ``python -m treadle``
run the same): start agent runs and threads, decide what they ask, watch and inspect them;
schedules, jobs and monitors; the servers; a worker; the demo.

    treadle run "Summarise README.md" --model openai:gpt-4o --wait [--interactive]
    treadle run TASK --model openai:gpt-4o,anthropic --output-schema answer.json --wait
    treadle run TASK --workspace DIR [--create-workspace]   # DIR must exist unless asked
    treadle run TASK --mcp-servers files,search   # offer the worker's MCP servers' tools
    treadle status ID [--json]        treadle trace ID [--json]
    treadle approve ID [--call CALL_ID] [--as NAME]   # NAME: who decides (USER@HOST)
    treadle reject ID [--call CALL_ID] --reason TEXT [--as NAME]
    treadle modify ID [--call CALL_ID] --args JSON [--as NAME]
    treadle guide ID (--guidance TEXT | --halt [--reason TEXT]) [--child CALL] [--as NAME]
    treadle wake ID [--reason TEXT]   # end a wait (the wait tool) now
    treadle watch ID [--from-start | --from N] [--json] [--interactive]  # live
    treadle answer ID QUERY_ID TEXT | --decline REASON [--as NAME]  # a client query
    treadle workspace ID [--step N] [--into DIR] [--diff N M]  # snapshots, check-outs
    treadle chat [--id ID] [FIRST MESSAGE]     # a thread: type, see the answer, again
    treadle send ID TEXT [--wait] [--mode steer]     treadle close ID
    treadle fork ID --step N [--message TEXT] [--id NEW]   # a new run from step N of ID
    treadle memory list|recall|add|edit|forget NAMESPACE ...  # long-term memory
    treadle export ID > thread.json   treadle import thread.json
    treadle jobs list|history ID|trigger ID|pause ID|unpause ID|sync
    treadle monitors create SLUG --cron EXPR|--interval MIN, list, show, checkin ...
    treadle schedule create NAME TASK --cron EXPR|--every 15m, list, show, trigger ...
    treadle serve [--host 127.0.0.1] [--port PORT]   # HTTP pings + event stream
    treadle codec-server [--port 8888] [--origin URL]  # decrypts for the Web UI
    treadle ui [--host 127.0.0.1] [--port 8765]   # the browser page: runs, approvals
    treadle scripted-model --script FILE [--port 8765]   # a model server that follows a script
    treadle worker [--dev-server] [--tools MODULE] ...  # a worker (treadle worker --help)
    treadle demo [--manual] [--keep]  # everything, end to end, no API key

Connection: TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE / temporal.toml profiles, or --address.
Encryption: TREADLE_ENCRYPTION_KEYS="keyid:base64key[,oldid:base64key]" (the same as the workers').
State: TREADLE_HOME (default ./.treadle): the dev server's data, the store, default workspaces.
Exit codes: 0 success, 1 the run did not finish with an answer, 2 bad input or no server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.exceptions import TemporalError, WorkflowAlreadyStartedError
from temporalio.service import RPCError

from treadle.cli import chat as cli_chat
from treadle.cli import codec_server as cli_codec_server
from treadle.cli import demo as cli_demo
from treadle.cli import fork as cli_fork
from treadle.cli import identity, output_schema
from treadle.cli import jobs as cli_jobs
from treadle.cli import live as cli_live
from treadle.cli import memory as cli_memory
from treadle.cli import monitors as cli_monitors
from treadle.cli import scheduled_agents as cli_scheduled_agents
from treadle.cli import schemas as cli_schemas
from treadle.cli import snapshots as cli_snapshots
from treadle.cli import ui as cli_ui
from treadle.cli import wake as cli_wake
from treadle.cli.defaults import DEFAULT_MODEL, DEMO_MODEL, DEMO_TASK_QUEUE, model_for
from treadle.cli.exits import UsageError, imported, run_and_exit
from treadle.cli.tables import table
from treadle.client import AgentClient, AgentClientError
from treadle.client.workdirs import resolve_workspace
from treadle.codec import EncryptionError
from treadle.connection import TemporalConnectionError, check_settings, connect
from treadle.devserver import DevServerError
from treadle.scripted_model import ScriptError
from treadle.workflows.agent.messages.models import (
    TASK_QUEUE,
    AgentConfig,
    AgentInput,
    AgentResult,
    AgentStatus,
    Decision,
    RunStatus,
    Trace,
)
from treadle.workflows.base import describe_errors

M = TypeVar("M")


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _print_json(model: Any) -> None:
    print(model.model_dump_json(indent=2) if hasattr(model, "model_dump_json") else model)


def _show(args: argparse.Namespace, model: M, formatted: Callable[[M], str]) -> int:
    """``model`` as JSON with --json, else as text for people."""
    if args.json:
        _print_json(model)
    else:
        print(formatted(model))
    return 0


def _format_status(status: AgentStatus) -> str:
    u = status.usage
    lines = [
        f"state:    {status.state}",
        f"step:     {status.step} / {status.max_steps}",
        f"model:    {status.model}"
        + (
            f" (the last call served by {status.served_by})"
            if status.served_by and status.served_by != status.model
            else ""
        ),
        f"tokens:   {u.total_tokens} (prompt {u.prompt_tokens}, completion {u.completion_tokens}"
        f", cached {u.cached_tokens})"
        + (f" of a {status.token_budget} budget" if status.token_budget else ""),
        f"last:     {status.last_event or '-'}",
    ]
    if status.forked_from is not None:
        origin = status.forked_from
        lines.insert(3, f"forked:   from {origin.workflow_id} at step {origin.step}")
    if status.cost_usd is not None:
        lines.insert(
            4,
            f"cost:     ${status.cost_usd:.4f}"
            + (f" of a ${status.max_cost_usd:.4f} cap" if status.max_cost_usd else ""),
        )
    if len(status.usage_by_model) > 1:
        by = ", ".join(f"{m} {u.total_tokens}" for m, u in status.usage_by_model.items())
        lines.insert(4, f"by model: {by}")
    if status.progress is not None:
        p = status.progress
        lines.append(f"progress: {p.describe()}, {p.elapsed_seconds:.0f}s")
    if status.last_decision:
        lines.append(f"decided:  {status.last_decision}")
    if status.stuck:
        lines.append(f"stuck:    {status.stuck}")
    if status.outage:
        lines.append(f"waiting:  {status.outage}")
    for pending in status.pending_approvals:
        args_text = json.dumps(pending.arguments)[:200]
        lines.append(f"waiting:  {pending.call_id}  {pending.tool}  {args_text}")
    if status.client_query is not None:
        q = status.client_query
        lines.append(f"client:   {q.id}  {q.kind}  {q.what[:200]}  (answer_query)")
    for q in status.child_queries:  # a sub-agent's, answered through this run
        lines.append(f"client:   {q.id}  {q.kind}  {q.what[:200]}  (answer_query)")
    running = [c for c in status.children if c.status == "running"]
    if running:  # what running sub-agents reported is not yet in the run's usage
        spent = u.total_tokens + sum(c.tokens for c in running)
        dollars = (status.cost_usd or 0) + sum(c.cost_usd or 0 for c in running)
        lines.append(
            f"family:   {spent} tokens"
            + (f", ${dollars:.4f}" if status.cost_usd is not None else "")
            + f" (this run and its ended sub-agents, and {len(running)} running)"
        )
    for child in status.children:  # sub-agents: an ended one's spend is counted in the run's
        lines.append(
            f"child:    {child.workflow_id}  {child.status}"
            + (f" ({child.state}, step {child.steps})" if child in running and child.state else "")
            + f"  {child.tokens} tokens"
            + (f" of {child.token_budget}" if child.token_budget else "")
            + (f"  ${child.cost_usd:.4f}" if child.cost_usd is not None else "")
            + (f" of ${child.cost_budget_usd:.4f}" if child.cost_budget_usd else "")
            + f"  {child.task}"
            + (
                f"  (stuck{f' at {child.stuck_at}' if child.stuck_at else ''}: "
                f"{child.stuck[:200]}; guide --child {child.call_id}"
                f"{f'/{child.stuck_at}' if child.stuck_at else ''})"
                if child in running and child.stuck
                else ""
            )
        )
    if status.final_answer:
        lines.append(f"answer:   {status.final_answer}")
    if status.error:
        lines.append(f"error:    {status.error}")
    return "\n".join(lines)


def _format_trace(trace: Trace) -> str:
    rows = [("STEP", "TIME", "STATE", "EVENT", "DATA")]
    for e in trace.entries:
        data = e.data.replace("\n", " ")
        rows.append(
            (
                str(e.step),
                e.timestamp.strftime("%H:%M:%S.%f")[:-3],
                e.state,
                e.event,
                data if len(data) <= 90 else data[:89] + "…",
            )
        )
    return table(rows, strip="none")


def _format_result(result: AgentResult) -> str:
    u = result.usage
    head = f"{result.status.value} after {result.steps} step(s), {u.total_tokens} tokens"
    if result.output is not None:  # a typed answer: its JSON, readable
        return f"{head}\n{json.dumps(result.output, indent=2, ensure_ascii=False)}"
    return (
        f"{head}\n{result.answer if result.answer is not None else 'error: ' + str(result.error)}"
    )


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


def _config_file(path: str | None) -> dict[str, Any]:
    """An AgentConfig as JSON or YAML (prices, per-task-type models, limits...)."""
    if path is None:
        return {}
    loaded = output_schema.read_document(Path(path), "--config")
    if not isinstance(loaded, dict):
        raise UsageError(f"--config {path} must hold a mapping of AgentConfig fields")
    return loaded


@dataclass(frozen=True)
class PlannedRun:
    """A run checked before anything connects: its input, and whether to make its workspace."""

    input: AgentInput
    create_workspace: bool


def build_input(args: argparse.Namespace, workspace_id: str) -> PlannedRun:
    """The run the run options describe; its default workspace is ``workspaces/<workspace_id>``."""
    config = _config_file(args.config)
    if args.require_approval:
        config["require_approval"] = args.require_approval
    if args.max_steps is not None:
        config["max_steps"] = args.max_steps
    if args.token_budget is not None:
        config["token_budget"] = args.token_budget
    if args.max_cost_usd is not None:
        config["max_cost_usd"] = args.max_cost_usd  # needs prices (--config) for its models
    if args.allow_commands:
        config["allow_run_command"] = True
    if args.mcp_servers:
        config["mcp_servers"] = args.mcp_servers
    if args.subagents and config.get("subagents") is None:
        config["subagents"] = {}  # the defaults: max_depth 2, max_children 8
    if args.output_schema:
        config["output_schema"] = args.output_schema
    if isinstance(config.get("output_schema"), str):  # a schema file or a type's import path
        config["output_schema"] = output_schema.resolve(config["output_schema"])
    # --model a,b: the run's model, then its fallbacks in order.
    named = model_for(args.task_queue, args.model)
    model, *fallbacks = [part.strip() for part in named.split(",") if part.strip()] or [""]
    if fallbacks:
        config["fallback_models"] = fallbacks
    workspace, create = resolve_workspace(
        args.workspace, workspace_id, create=args.create_workspace
    )
    try:
        agent_input = AgentInput(
            task=args.task,
            model=model,
            workspace=str(workspace),
            task_type=args.task_type,
            config=AgentConfig.model_validate(config),
        )
    except ValidationError as exc:
        raise UsageError(f"invalid run: {describe_errors(exc)}") from exc
    return PlannedRun(agent_input, create)


async def cmd_run(client: Client, args: argparse.Namespace, planned: PlannedRun) -> int:
    agents = AgentClient(client, task_queue=args.task_queue)
    started = await agents.start(
        planned.input, id=args.id, create_workspace=planned.create_workspace
    )
    if not args.wait:
        print(json.dumps({"workflow_id": started.id}) if args.json else started.id)
        return 0
    # The live view (nothing but the answers it sends with --json), then the result.
    shown = await cli_live.show_run(agents, started.id, args)
    result = await agents.result(started.id)
    if args.json:
        _print_json(result)
    elif shown:  # the answer or the error is on screen already
        print(f"{started.id}: {_format_result(result).splitlines()[0]}")
    else:
        print(f"{started.id}: {_format_result(result)}")
    return 0 if result.status is RunStatus.DONE else 1


async def cmd_status(client: Client, args: argparse.Namespace) -> int:
    status = await AgentClient(client).status(args.workflow_id)
    return _show(args, status, _format_status)


async def cmd_trace(client: Client, args: argparse.Namespace) -> int:
    return _show(args, await AgentClient(client).trace(args.workflow_id), _format_trace)


async def cmd_decide(client: Client, args: argparse.Namespace) -> int:
    """approve / reject / modify / guide through the `decide` update, so a refusal comes back
    here (``error: run 'ID' refused to approve: ...``)."""
    arguments = None
    if args.command == "modify":
        try:
            arguments = json.loads(args.args)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--args is not valid JSON: {exc.msg} at position {exc.pos}") from exc
        if not isinstance(arguments, dict):
            raise UsageError("--args must be a JSON object")
    if args.command == "guide":
        if bool(args.halt) == bool(args.guidance):
            raise UsageError("give either --guidance TEXT (to continue) or --halt")
        fields: dict[str, Any] = {
            "guidance": args.guidance,
            "halt": bool(args.halt),
            "reason": args.reason,
            "call_id": args.child,
        }
    else:
        fields = {
            "call_id": args.call,
            "reason": getattr(args, "reason", None),
            "arguments": arguments,
        }
    try:
        decision = Decision(action=args.command, decided_by=identity.decided_by(args), **fields)
    except ValidationError as exc:
        raise UsageError(f"invalid decision: {describe_errors(exc)}") from exc
    decided = await AgentClient(client).decide(args.workflow_id, decision)
    if decided.action == "guide":
        what = "told to halt" if decided.halted else "sent guidance to"
        child = f"sub-agent {args.child} of " if args.child else ""
        print(f"{what} {child}run {args.workflow_id}")
        return 0
    print(f"{decided.done} {decided.call_id} ({decided.tool}) in run {args.workflow_id}")
    return 0


async def cmd_demo(args: argparse.Namespace) -> int:
    """The demo lives in treadle/cli/demo.py; it prints runs as the other commands do."""
    return await cli_demo.cmd_demo(args, format_trace=_format_trace, format_result=_format_result)


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def add_run_options(run: argparse.ArgumentParser) -> None:
    """TASK and the options that shape a run; `run` and `schedule create` both take them."""
    run.add_argument("task")
    run.add_argument(
        "--model",
        help=f"provider:model; a,b,...: fallbacks in order when one is down (default "
        f"{DEFAULT_MODEL}; on the demo's task queue {DEMO_TASK_QUEUE}, its scripted {DEMO_MODEL})",
    )
    run.add_argument(
        "--output-schema",
        metavar="FILE|module:Model",
        help="the answer must be JSON for this JSON Schema (a file, or a pydantic model)",
    )
    run.add_argument(
        "--workspace",
        help="existing directory the tools work in (default: workspaces/ID, created)",
    )
    run.add_argument(
        "--create-workspace", action="store_true", help="create --workspace if it does not exist"
    )
    run.add_argument("--require-approval", metavar="TOOL,...", help="tools that need approval")
    run.add_argument("--max-steps", type=int)
    run.add_argument("--token-budget", type=int, metavar="N", help="total tokens the run may use")
    run.add_argument(
        "--max-cost-usd",
        type=float,
        metavar="USD",
        help="total US dollars the run (and its sub-agents) may spend, priced by prices",
    )
    run.add_argument(
        "--config", metavar="FILE", help="AgentConfig fields as JSON or YAML (flags override)"
    )
    run.add_argument("--allow-commands", action="store_true", help="enable run_command")
    run.add_argument(
        "--subagents", action="store_true", help="offer delegate: sub-agents (docs/subagents.md)"
    )
    run.add_argument(
        "--mcp-servers",
        metavar="NAME,...",
        help="offer the tools of these MCP servers of the worker ('*': all it has)",
    )
    run.add_argument("--task-type", default="default")


FAMILIES: dict[str, tuple[str, ...]] = {
    "a run": (
        "run", "status", "trace", "watch", "approve", "reject", "modify", "guide", "answer",
        "wake", "workspace", "fork",
    ),
    "threads": ("chat", "send", "close", "export", "import", "memory"),
    "jobs, monitors and schedules": ("jobs", "monitors", "schedule"),
    "servers": ("serve", "ui", "api", "codec-server", "scripted-model"),
    "other languages": ("schemas",),
    "worker": ("worker",),
    "demo": ("demo",),
}  # fmt: skip
"""The commands ``--help`` lists, by family (a test holds it to the parser's commands)."""

DELEGATED: dict[str, tuple[str, str]] = {
    "worker": ("treadle.cli.worker", "run a worker: the agent's workflows and activities"),
    "scripted-model": ("treadle.scripted_model.cli", "serve a scripted model (no API key)"),
}
"""Commands with a parser of their own: ``treadle worker ARGS`` is that module's ``main(ARGS)``."""


def families_help(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> str:
    """The commands by family, each with its one-line help (argparse keeps those on the
    subparsers action's private choices: it has no public way to list them)."""
    helps = {choice.dest: choice.help or "" for choice in commands._choices_actions}
    width = max(len(name) for names in FAMILIES.values() for name in names) + 2
    lines = []
    for family, names in FAMILIES.items():
        lines.append(f"{family}:")
        lines += [f"  {name:<{width}}{helps.get(name, '')}" for name in names]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="treadle",
        usage="treadle [--address ADDRESS] [--namespace NS] [--profile P] [--task-queue Q] "
        "COMMAND ...",
        description="Treadle: durable AI agents on Temporal.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--address", help="Temporal address (default: TEMPORAL_ADDRESS / profile)")
    parser.add_argument("--namespace", help="namespace (default: TEMPORAL_NAMESPACE / profile)")
    parser.add_argument("--profile", help="temporal.toml profile (default: TEMPORAL_PROFILE)")
    parser.add_argument("--task-queue", default=TASK_QUEUE, help=f"default: {TASK_QUEUE}")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS
    )

    run = sub.add_parser("run", help="start an agent run")
    add_run_options(run)
    run.add_argument("--id", help="workflow id (default: agent-<random>)")
    run.add_argument("--wait", action="store_true", help="show the run live until its result")
    run.add_argument("--json", action="store_true", help="print JSON (only the result)")
    cli_live.add_client_options(run)

    for name in ("approve", "reject", "modify"):
        p = sub.add_parser(name, help=f"{name} a pending tool call")
        p.add_argument("workflow_id")
        p.add_argument("--call", help="call id (needed when several calls wait)")
        if name == "reject":
            p.add_argument("--reason", required=True)
        if name == "modify":
            p.add_argument("--args", required=True, help="new arguments as a JSON object")
        identity.add_as_option(p)

    guide = sub.add_parser("guide", help="continue a stuck run with guidance, or halt it")
    guide.add_argument("workflow_id")
    guide.add_argument("--guidance", help="advice for the model; the run continues")
    guide.add_argument("--halt", action="store_true", help="stop the run (status halted)")
    guide.add_argument("--reason", help="why, with --halt")
    guide.add_argument(
        "--child",
        metavar="CALL",
        help="a stuck sub-agent of the run: the call that started it (call_1; a grandchild "
        "call_1/call_2); the run sends the guidance on",
    )
    identity.add_as_option(guide)

    for name in ("status", "trace"):
        p = sub.add_parser(name, help=f"show a run's {name}")
        p.add_argument("workflow_id")
        p.add_argument("--json", action="store_true")

    cli_jobs.register(sub)
    cli_monitors.register(sub)
    cli_scheduled_agents.register(sub, add_run_options=add_run_options, build_input=build_input)
    cli_chat.register(sub)
    cli_live.register(sub)
    cli_codec_server.register(sub)
    cli_ui.register(sub)
    cli_schemas.register(sub)
    cli_wake.register(sub)
    cli_fork.register(sub)
    cli_memory.register(sub)
    cli_snapshots.register(sub)

    cli_demo.register(sub)
    for name, (_, text) in DELEGATED.items():
        sub.add_parser(name, help=text, add_help=False)
    parser.epilog = families_help(sub) + "\n\n" + __doc__.split("\n\n", 2)[2]
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    if args.command == "demo":
        return await cmd_demo(args)
    standalone = getattr(args, "standalone", None)
    if standalone is not None:  # codec-server: no Temporal connection
        code: int = await standalone(args)
        return code
    check = getattr(args, "check", None)
    if check is not None:  # schedule create: bad input is refused before connecting
        check(args)
    planned = None
    if args.command == "run":
        # Checked before connecting: a bad workspace or input starts nothing, server or not.
        args.id = args.id or f"agent-{uuid.uuid4().hex[:12]}"
        planned = build_input(args, args.id)
    client = await connect(address=args.address, namespace=args.namespace, profile=args.profile)
    return await _dispatch(client, args, planned)


async def _dispatch(client: Client, args: argparse.Namespace, planned: PlannedRun | None) -> int:
    if planned is not None:
        return await cmd_run(client, args, planned)
    handler = getattr(args, "handler", None)
    if handler is not None:  # jobs / monitors / serve register their own handlers
        code: int = await handler(client, args)
        return code
    commands = {
        "status": cmd_status,
        "trace": cmd_trace,
        "approve": cmd_decide,
        "reject": cmd_decide,
        "modify": cmd_decide,
        "guide": cmd_decide,
    }
    return await commands[args.command](client, args)


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given and given[0] in DELEGATED:
        module = imported(DELEGATED[given[0]][0])  # the worker's modules: frozen once loaded
        code: int = module.main(given[1:], prog=f"treadle {given[0]}")
        return code
    args = parse_args(given)
    try:
        check_settings(address=args.address, environ=os.environ)
        return asyncio.run(run(args))
    except (
        UsageError,
        AgentClientError,
        TemporalConnectionError,
        DevServerError,
        ScriptError,
        EncryptionError,
    ) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except WorkflowAlreadyStartedError as exc:
        print(f"error: a run with id {exc.workflow_id!r} already exists", file=sys.stderr)
        return 2
    except RPCError as exc:
        print(f"error: Temporal refused the request: {exc.message}", file=sys.stderr)
        return 2
    except (TemporalError, ValidationError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"error: {type(exc).__name__}: {first}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    run_and_exit(main)
