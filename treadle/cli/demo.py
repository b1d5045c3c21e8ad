"""``treadle demo``: the dev server, a scripted model and a worker in one process, no API key.

    treadle demo            # one run: writes a file, waits for approval, answers
    treadle demo --manual   # the same, but you approve, reject or modify
    treadle demo --keep     # then stays up, so you can start your own runs
                                      # (model openai:demo, task queue treadle-demo) from
                                      # another terminal, or the browser page (treadle
                                      # ui); Ctrl-C ends it

The scripted model (``treadle/demo_script.json``) takes the same steps whatever the task: list
the workspace, write ``notes.md``, read it back, answer. A rejected write is answered instead,
with the reviewer's reason. Every command printed for another terminal is spelled by
``treadle.cli.shell``, so it runs as printed in a fresh shell (no virtualenv activated).

``--keep`` serves a task queue of its own, ``treadle-demo`` (``--task-queue`` names another),
never the shared ``treadle-agent``: a real worker there would take the ``openai:demo`` runs, and
the demo's worker would answer real ``openai:*`` runs with the scripted model. So the commands
it prints that start runs carry ``--task-queue``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shlex
import socket
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from treadle import home
from treadle.cli import shell
from treadle.cli import ui as cli_ui
from treadle.cli.defaults import DEMO_MODEL, DEMO_TASK_QUEUE
from treadle.cli.exits import UsageError
from treadle.cli.live import outcome
from treadle.cli.serving import interrupted
from treadle.connection import connect
from treadle.workflows.agent.messages import search_attributes
from treadle.workflows.agent.messages.models import (
    TASK_QUEUE,
    AgentConfig,
    AgentInput,
    AgentResult,
    AgentStatus,
    ApproveSignal,
    RunStatus,
    Trace,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow

__all__ = ["DEMO_MODEL", "DEMO_TASK", "DEMO_TASK_QUEUE", "cmd_demo", "kept_queue", "register"]

DEMO_TASK = (
    "Look at the workspace, write a short project note to notes.md, then check it and "
    "summarise what you did."
)
TRY_TASK = "Describe this workspace in notes.md"
"""The example task printed for ``--keep``; any task gets the same scripted steps."""
STATE_TIMEOUT = 60.0
"""Seconds the demo waits for its run to reach the approval (or to end)."""


def register(subparsers: Any) -> None:
    """Add ``demo``; ``treadle`` runs it without connecting first (it may start the server)."""
    demo = subparsers.add_parser(
        "demo", help="dev server + worker + scripted model + one run, no API key"
    )
    demo.add_argument("--manual", action="store_true", help="wait for you to approve")
    demo.add_argument(
        "--keep",
        action="store_true",
        help="after the run, keep the dev server, scripted model and worker up (on task queue "
        f"{DEMO_TASK_QUEUE}, or --task-queue if not {TASK_QUEUE}) for your own runs with "
        f"--model {DEMO_MODEL}, until Ctrl-C",
    )
    demo.add_argument(
        "--dev-config",
        metavar="FILE",
        help="the dev server's settings (default: the temporal-dev.yaml Treadle ships)",
    )


async def cmd_demo(
    args: argparse.Namespace,
    *,
    format_trace: Callable[[Trace], str],
    format_result: Callable[[AgentResult], str],
) -> int:
    """Dev server, worker, scripted model and one run with an approval, in one process.

    The worker is a ``TreadlePlugin``'s, as yours would be, with the store every other command
    of this directory reads (``TREADLE_STORE``, else ``.treadle/store``): ``treadle workspace``
    shows the demo run's snapshots. ``treadle`` passes its own trace and result formats.
    """
    # Imported here: only the demo needs the server and model machinery.
    from treadle.activities.model.activity import ProviderSettings
    from treadle.connection import ensure_search_attributes
    from treadle.devserver import DevServer, load_config
    from treadle.plugin import TreadlePlugin
    from treadle.scripted_model import DEMO_SCRIPT, ScriptedModelServer, load_script
    from treadle.workflows.agent.messages import search_attributes

    config = load_config(Path(args.dev_config) if args.dev_config else home.default_dev_config())
    script = load_script(DEMO_SCRIPT)
    async with DevServer.ensure(config) as server:
        how = "started" if server.started else "found running"
        print(f"1. Temporal dev server {how} at {server.address}; Web UI {server.ui_url}")
        client = await connect(address=server.address, namespace=server.namespace, local_dev=True)
        await ensure_search_attributes(client, server.namespace, search_attributes.REQUIRED)
        with ScriptedModelServer(script) as model_server:
            print(f"2. Scripted model server (OpenAI protocol) at {model_server.base_url}")
            suffix = uuid.uuid4().hex[:8]
            # A queue of the demo's own, never the shared one: a real worker there would take
            # the scripted runs, and this worker would answer real runs with the script.
            task_queue = kept_queue(args.task_queue) if args.keep else f"treadle-demo-{suffix}"
            # The scripted model answers openai:*; a real key in this environment reaches nothing.
            settings = ProviderSettings.from_env({"OPENAI_BASE_URL": model_server.base_url})
            plugin = TreadlePlugin(model_settings=settings)
            async with Worker(client, task_queue=task_queue, plugins=[plugin]):
                print(f"3. Worker polling task queue {task_queue}")
                demo = _Demo(client, server.address, server.namespace, server.ui_url, task_queue)
                result = await demo.run(f"demo-{suffix}", args.manual, format_trace, format_result)
                if args.keep:
                    # The run's snapshots are in the worker's store; the run answers while the
                    # worker is up.
                    snapshots = demo.starter("workspace", f"demo-{suffix}")
                    print(f"   Its workspace after each step that changed it: {snapshots}")
                    print(demo.try_it_yourself(f"try-{suffix}", f"demo-{suffix}"), flush=True)
                    with interrupted() as stopping:
                        await stopping.wait()
                    what = "the worker, the scripted model" + (
                        " and the dev server" if server.started else ""
                    )
                    print(f"Stopping {what}...", flush=True)
        if args.keep:
            if server.started:
                again = ["demo", "--keep"]
                if args.dev_config:
                    again += ["--dev-config", args.dev_config]
                queue = task_queue if task_queue != DEMO_TASK_QUEUE else None
                print(
                    f"Runs are kept in {_shown(server.config.db_filename)}; "
                    f"`{shell.starter(*again, task_queue=queue)}` brings them back."
                )
        elif server.started and sys.stdin.isatty():
            await asyncio.to_thread(input, "Press Enter to stop the dev server... ")
        elif server.started:
            print(
                f"   (the dev server stops now; `{shell.worker('--dev-server')}` brings it back "
                "with this run, kept in its SQLite file)"
            )
    return 0 if result.status is RunStatus.DONE else 1


def kept_queue(task_queue: str) -> str:
    """The queue ``--keep`` serves: ``--task-queue``, unless that is the shared default."""
    return DEMO_TASK_QUEUE if task_queue == TASK_QUEUE else task_queue


class _Demo:
    """The demo's run, and the commands it prints for another terminal."""

    def __init__(
        self, client: Client, address: str, namespace: str, ui_url: str, task_queue: str
    ) -> None:
        self.client = client
        self.address = address
        self.namespace = namespace
        self.ui_url = ui_url
        self.task_queue = task_queue
        self.ui_port = _free_or_other(cli_ui.DEFAULT_PORT)
        """Where the printed ``treadle ui`` serves the browser page."""

    def starter(self, *arguments: str, task_queue: bool = False) -> str:
        """A ``treadle`` command reaching this server (and, with ``task_queue``, for new
        runs: this worker's queue)."""
        queue = self.task_queue if task_queue else None
        return shell.starter(
            *arguments, address=self.address, namespace=self.namespace, task_queue=queue
        )

    def ui_command(self) -> str:
        """``treadle ui`` for this server and queue (runs started in the page go to the
        demo's worker, its Start form offering the scripted model), linking the run pages to
        this Web UI; on its default port when that is free, else on one that is (so it runs as
        printed)."""
        arguments = ["ui"]
        if self.ui_port != cli_ui.DEFAULT_PORT:
            arguments += ["--port", str(self.ui_port)]
        if self.ui_url.rstrip("/") != cli_ui.DEFAULT_WEB_UI:
            arguments += ["--web-ui", self.ui_url]
        if self.task_queue != DEMO_TASK_QUEUE:
            # On treadle-demo the page offers the scripted model by itself; elsewhere, say so.
            arguments += ["--model", DEMO_MODEL]
        return self.starter(*arguments, task_queue=True)

    @property
    def ui_url_page(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}/"

    def run_url(self, workflow_id: str) -> str:
        return f"{self.ui_url}/namespaces/{self.namespace}/workflows/{workflow_id}"

    async def run(
        self,
        workflow_id: str,
        manual: bool,
        format_trace: Callable[[Trace], str],
        format_result: Callable[[AgentResult], str],
    ) -> AgentResult:
        """Steps 4 to 7: start the run, stop at its approval, approve (or wait), show the end."""
        workspace = home.workspaces() / workflow_id
        workspace.mkdir(parents=True, exist_ok=True)
        agent_input = AgentInput(
            task=DEMO_TASK,
            model=DEMO_MODEL,
            workspace=str(workspace),
            config=AgentConfig(require_approval=("write_file",)),
        )
        handle = await self.client.start_workflow(
            AgentWorkflow.run,
            agent_input,
            id=workflow_id,
            search_attributes=search_attributes.start_attributes(agent_input),
            task_queue=self.task_queue,
            static_summary=DEMO_TASK,
            static_details=f"model {DEMO_MODEL} · workspace {workspace}",
        )
        link = self.run_url(workflow_id)
        print(f"4. Agent run {workflow_id} started\n   {link}")
        status = await _wait_for_state(handle, {State.WAITING_FOR_HUMAN, State.DONE, State.ERROR})
        if status.pending_approvals:
            pending = status.pending_approvals[0]
            print(
                f"5. Paused for approval: {pending.tool} {json.dumps(pending.arguments)[:100]}\n"
                f"   From another terminal, in {shell.here()}, any of:\n"
                f"   {self.starter('approve', workflow_id)}\n"
                f"   {self.starter('reject', workflow_id, '--reason', 'not now')}\n"
                f"   {self._signal(workflow_id, pending.call_id)}\n"
                f"   or in a browser: {self.ui_command()}\n"
                f"     then open {self.ui_url_page}",
                flush=True,
            )
            if manual:
                print("   waiting for you to approve, reject or modify...", flush=True)
                decided = {State.ACTING, State.OBSERVING, State.PLANNING, State.DONE, State.ERROR}
                await _wait_for_state(handle, decided, 86_400)
            else:
                await asyncio.sleep(1)
                await handle.signal(AgentWorkflow.approve, ApproveSignal(call_id=pending.call_id))
                print("   approved by the demo (with --manual it waits for you)")
        result = await outcome(handle)
        trace = await handle.query(AgentWorkflow.trace)
        print("6. Trace:")
        print(format_trace(trace))
        print(f"7. Result: {format_result(result)}")
        notes = workspace / "notes.md"
        if notes.exists():
            print(f"   {_shown(notes)}:\n" + notes.read_text().rstrip())
        print(
            f"   Web UI: {link}\n"
            "   (state, step and the calls waiting for approval: its User Metadata tab, "
            "under Current Details)",
            flush=True,
        )
        return result

    def _signal(self, workflow_id: str, call_id: str) -> str:
        body = json.dumps({"call_id": call_id})
        return shell.temporal(
            "workflow",
            "signal",
            "--workflow-id",
            workflow_id,
            "--name",
            "approve",
            "--input",
            body,
            address=self.address,
            namespace=self.namespace,
        )

    def try_it_yourself(self, workflow_id: str, demo_id: str) -> str:
        """Step 8: what to type in another terminal while ``--keep`` holds everything up
        (``demo_id``: the demo's own run, over by now, exported and continued as a thread)."""
        export = f"{demo_id}.json"
        commands = [
            (f"cd {shlex.quote(shell.here())}", ""),
            (
                self.starter(
                    "run",
                    TRY_TASK,
                    "--model",
                    DEMO_MODEL,
                    "--require-approval",
                    "write_file",
                    "--id",
                    workflow_id,
                    task_queue=True,
                ),
                "any task; prints the run's id",
            ),
            (self.starter("watch", workflow_id), "live: tool calls, the approval, the answer"),
            (self.starter("status", workflow_id), "state, step, the call waiting for you"),
            (self.starter("approve", workflow_id), "run the write"),
            (self.starter("reject", workflow_id, "--reason", "not now"), "or refuse it"),
            (
                self.starter("chat", "--model", DEMO_MODEL, task_queue=True),
                "a conversation; /exit to leave",
            ),
            (
                f"{self.starter('export', demo_id)} > {shlex.quote(export)}",
                "the demo's run as a thread file (Loom's JSON)",
            ),
            (
                self.starter("import", export, task_queue=True),
                "a new thread that continues it, here; prints its id for chat --id",
            ),
            (
                self.ui_command(),
                f"the browser page at {self.ui_url_page}: runs, threads, approvals",
            ),
        ]
        lines = [
            f"8. Still up until Ctrl-C: the dev server, the scripted model ({DEMO_MODEL}, no API "
            f"key) and a worker on task queue {self.task_queue}.",
            "   Try your own task from another terminal:",
            *(
                f"     {command}  # {why}" if why else f"     {command}"
                for command, why in commands
            ),
            f"   Web UI: {self.ui_url}/namespaces/{self.namespace}/workflows "
            "(a run's User Metadata tab shows its Current Details)",
        ]
        return "\n".join(lines)


def _free_or_other(port: int) -> int:
    """``port`` if nothing listens on it on loopback, else a port that is free now."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            probe.bind(("127.0.0.1", 0))
        bound: int = probe.getsockname()[1]
        return bound


def _shown(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)


async def _wait_for_state(
    handle: WorkflowHandle[Any, Any], wanted: set[State], timeout: float = STATE_TIMEOUT
) -> AgentStatus:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status: AgentStatus = await handle.query(AgentWorkflow.state)
        if status.state in wanted:
            return status
        if asyncio.get_running_loop().time() > deadline:
            reached = sorted(state.value for state in wanted)
            raise UsageError(f"run {handle.id} did not reach {reached} within {timeout}s")
        await asyncio.sleep(0.25)
