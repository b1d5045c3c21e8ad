"""A user's own worker: their client and ``Worker`` with a workflow and an activity of their own,
``TreadlePlugin`` beside them with their tool module, hook and model provider; an agent run
through it with an approval sent by the stock ``temporal`` CLI, and their workflow still runs."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import PayloadCodec
from temporalio.worker import Worker

from tests.support.harness import TEST_STORE, replayer, temporal_cli
from tests.support.user_app import ACME, TOOLS, StampHook, greet
from tests.support.user_workflow import Greeting
from treadle import (
    AgentConfig,
    AgentInput,
    AgentResult,
    AgentStatus,
    AgentWorkflow,
    RunStatus,
    State,
    TreadlePlugin,
)
from treadle.payloads import TolerantPayloadConverter
from treadle.scripted_model import ScriptedModelServer

ACME_KEY = "acme-test-key-7f3a9c1e"


async def test_a_users_worker_runs_an_agent_with_an_approval_from_the_stock_cli(
    temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """The plugin on the user's ``Client.connect`` (the worker inherits it): a run on the
    user's provider (``acme:``, its URL and key from the plugin's environment) calls the user's
    tool, waits for approval, is approved with ``temporal workflow signal``, runs the user's
    hook after the step, and answers; the user's own workflow answers on the same worker."""
    plugin = TreadlePlugin(
        tools=["tests.support.user_app"],
        hooks=[StampHook()],
        providers=[ACME],
        store=str(TEST_STORE),
        environ={"ACME_BASE_URL": model_server.base_url, "ACME_API_KEY": ACME_KEY},
    )
    assert plugin.tools == TOOLS
    client = await Client.connect(temporal_address, plugins=[plugin])
    name = f"acme-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        name,
        [
            {
                "tool_calls": [
                    {"name": "append_line", "arguments": {"path": "log.txt", "line": "first"}}
                ]
            },
            {"content": "appended"},
        ],
    )
    queue, workspace = f"user-{uuid.uuid4().hex[:8]}", tmp_path / "ws"
    workspace.mkdir()
    async with Worker(client, task_queue=queue, workflows=[Greeting], activities=[greet]):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentInput(
                task="Log a line.",
                model=f"acme:{name}",
                workspace=str(workspace),
                config=AgentConfig(require_approval=("append_line",), hooks=("stamp",)),
            ),
            id=f"user-run-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        status = await _waiting(handle)
        [pending] = status.pending_approvals
        signalled = await temporal_cli(
            client,
            "workflow", "signal", "--workflow-id", handle.id, "--name", "approve",
            "--input", json.dumps({"call_id": pending.call_id}),
        )  # fmt: skip
        assert signalled.returncode == 0, signalled.stderr
        result: AgentResult = await handle.result()
        greeting = await client.execute_workflow(
            Greeting.run, "Ada", id=f"greeting-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        trace = await handle.query(AgentWorkflow.trace)
    assert (result.status, result.answer) == (RunStatus.DONE, "appended")
    assert (workspace / "log.txt").read_text() == "first\n"
    assert greeting == "Hello, Ada"
    hooks = [e.data for e in trace.entries if e.event == "HookRun"]
    assert hooks and hooks[0].startswith("stamp: done — step 1"), hooks
    requests = model_server.requests_for(name)
    assert {r.headers.get("authorization") for r in requests} == {f"Bearer {ACME_KEY}"}
    tool_reply = [m for m in requests[-1].body["messages"] if m["role"] == "tool"]
    assert "log.txt has 1 line(s)" in tool_reply[0]["content"]
    await replayer().replay_workflow(await handle.fetch_history())


async def _waiting(handle: WorkflowHandle[Any, Any]) -> AgentStatus:
    """The run's status once it waits for a human."""
    for _ in range(600):  # a hang guard sized for a busy machine, not a target
        status: AgentStatus = await handle.query(AgentWorkflow.state)
        if status.state is State.WAITING_FOR_HUMAN:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"the run never waited for a human: {status}")


async def test_a_worker_whose_client_lacks_the_plugin_is_refused(temporal_address: str) -> None:
    """The data converter is the client's: a plugin given only to the worker of a plain client
    would leave Treadle's payloads unreadable, so the worker is refused at once, saying how."""
    client = await Client.connect(temporal_address)
    with pytest.raises(ValueError, match=r"give the plugin to Client.connect"):
        Worker(client, task_queue="never-polled", plugins=[TreadlePlugin(store="none")])


async def test_a_client_with_a_converter_of_its_own_is_refused(temporal_address: str) -> None:
    """Pydantic's converter (or the SDK's default) is replaced by Treadle's; any other
    converter is the user's, and Treadle's runs cannot be read through it: refused."""
    plain = await Client.connect(
        temporal_address, data_converter=pydantic_data_converter, plugins=[TreadlePlugin()]
    )
    assert plain.data_converter.payload_converter_class is TolerantPayloadConverter
    custom = dataclasses.replace(pydantic_data_converter, payload_codec=_Gzip())
    with pytest.raises(ValueError, match="a data converter of its own"):
        await Client.connect(temporal_address, data_converter=custom, plugins=[TreadlePlugin()])


class _Gzip(PayloadCodec):
    """A codec of the user's own."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(metadata={"encoding": b"gzip"}, data=gzip.compress(p.SerializeToString()))
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload.FromString(gzip.decompress(p.data)) for p in payloads]
