"""A store that cannot be reached is waited for, never the end of a run or a thread: moto's S3
server stopped and started again under a real worker process and the CLI, a store directory that
goes away and comes back, and the store's own errors as one ``StoreUnavailable``."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.support.harness import keep_history, replayer, scripted_worker, start_agent
from tests.support.processes import clean_env, free_port, run_cli, server_address, start_worker
from tests.support.stream import events
from treadle.activities.content.door import STORE_OVER_CHARS, tool_output
from treadle.activities.errors import StoreUnavailable
from treadle.activities.model.activity import http_client
from treadle.activities.store.blobs import FileBlobStore, key_of
from treadle.activities.store.conversation import ConversationStore
from treadle.activities.store.s3 import S3BlobStore, S3Objects, S3Settings
from treadle.activities.tools.builtin import ToolActivities
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.content_refs import marker
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentResult,
    AgentStatus,
    RunStatus,
    ToolCall,
    ToolRequest,
    ToolResult,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow

FIRST = "Remember the word 'marmalade'."


class S3Server:
    """moto's S3 server on one loopback port, in a thread of this process: stopped, the port
    refuses connections; started again on the same port, it holds what it held (moto keeps
    its buckets in the process)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server: ThreadedMotoServer | None = None

    def start(self) -> None:
        self._server = ThreadedMotoServer("127.0.0.1", self.port, verbose=False)
        self._server.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.stop()
        # stop() ends serving but keeps the socket listening (connections would hang, not be
        # refused): close it, as a server that went away does.
        inner = self._server._server
        if inner is not None:
            inner.server_close()
        self._server = None


@pytest.fixture
def s3() -> Iterator[S3Server]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request
    server = S3Server()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def aws_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "AKIAOUTAGETEST",
        "AWS_SECRET_ACCESS_KEY": "outage-secret-" + "0" * 24,
    }


def make_bucket(endpoint: str) -> str:
    name = f"treadle-{uuid.uuid4().hex[:12]}"
    boto3.session.Session(
        aws_access_key_id="admin", aws_secret_access_key="admin", region_name="us-east-1"
    ).client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return name


async def probe_attempts(handle: WorkflowHandle[Any, Any], at_least: int) -> None:
    """Wait until ``wait_for_store`` has asked the store ``at_least`` times (its attempts are
    retries of one activity: the run waits in it)."""
    for _ in range(1200):
        description = await handle.describe()
        attempts = [
            p.attempt
            for p in description.raw_description.pending_activities
            if p.activity_type.name == "wait_for_store"
        ]
        if attempts and max(attempts) >= at_least:
            return
        status: AgentStatus = await handle.query(AgentWorkflow.state)
        assert status.state is not State.ERROR, status.error
        await asyncio.sleep(0.1)
    raise AssertionError(f"wait_for_store never reached attempt {at_least}")


async def waiting_status(handle: WorkflowHandle[Any, Any]) -> AgentStatus:
    """The status once the run says it waits for the store; fails at once if the run ends."""
    for _ in range(1200):
        status: AgentStatus = await handle.query(AgentWorkflow.state)
        assert status.state is not State.ERROR, status.error
        if status.outage is not None:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError("the run never said it waits for the store")


async def answered(handle: WorkflowHandle[Any, Any], answer: str) -> AgentStatus:
    for _ in range(1200):
        status: AgentStatus = await handle.query(AgentWorkflow.state)
        assert status.state is not State.ERROR, status.error
        if status.final_answer == answer and status.state is State.WAITING_FOR_USER_INPUT:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"the thread never answered {answer!r}")


def waits_in(history: WorkflowHistory) -> int:
    """How many ``wait_for_store`` activities the run scheduled."""
    return sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "wait_for_store"
    )


async def current_details(handle: WorkflowHandle[Any, Any]) -> str:
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


@pytest.mark.replay_corpus
async def test_a_thread_on_s3_waits_out_the_store_going_away_and_goes_on(
    client: Client, model_server: ScriptedModelServer, s3: S3Server, tmp_path: Path
) -> None:
    """S3 stops while a thread waits for its user (a worker.py process, two attempts per model
    call): the next turn's call finds it unreachable, ``status`` says ``waiting: the S3 store
    … is unreachable since …`` and the run waits through many probes; S3 comes back on the
    same port and the turn is answered with the earlier one in context; ``send`` goes on."""
    model = f"outage-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {"content": "Noted: marmalade."},
            {"content": "You asked me to remember a word."},
            {"content": "The word was marmalade."},
        ],
    )
    bucket = make_bucket(s3.endpoint)
    url = f"s3://{bucket}/runs"
    env = clean_env(
        OPENAI_BASE_URL=model_server.base_url, TREADLE_STORE=url, **aws_env(s3.endpoint)
    )
    address = client.service_client.config.target_host
    task_queue = f"outage-{uuid.uuid4().hex[:12]}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    worker = await start_worker(address, task_queue, env, "--store", url)
    try:
        handle = await start_agent(
            client, task_queue, f"openai:{model}", workspace, FIRST, thread=True,
            config=AgentConfig(model_max_attempts=2), id_prefix="outage",
        )  # fmt: skip
        await answered(handle, "Noted: marmalade.")

        s3.stop()
        sent = await run_cli("--address", address, "send", handle.id, "What did I ask?", env=env)
        assert sent.returncode == 0, sent.stderr
        waiting = await waiting_status(handle)
        assert waiting.outage is not None
        assert waiting.outage.startswith(
            f"the S3 store {url}/ at {s3.endpoint} is unreachable since"
        )
        # Many more probes than the call had attempts: the old budget would have ended it.
        await probe_attempts(handle, 3)
        shown = await run_cli("--address", address, "status", handle.id, env=env)
        assert shown.returncode == 0, shown.stderr
        assert (
            f"waiting:  the S3 store {url}/ at {s3.endpoint} is unreachable since" in shown.stdout
        )
        assert f"**Waiting:** the S3 store {url}/" in await current_details(handle)
        [event] = [e for e in await events(handle) if e.kind == "outage"]
        assert event.ok is False and event.text.startswith(f"waiting: the S3 store {url}/")

        s3.start()
        status = await answered(handle, "You asked me to remember a word.")
        assert status.outage is None
        assert "**Waiting:**" not in await current_details(handle)
        back = [e for e in await events(handle) if e.kind == "outage" and e.ok]
        assert back and "answers again" in back[0].text

        again = await run_cli(
            "--address", address, "send", "--wait", handle.id, "Which word?", env=env
        )
        assert again.returncode == 0, again.stderr
        assert "The word was marmalade." in again.stdout
        await handle.execute_update(AgentWorkflow.close)
        result: AgentResult = await asyncio.wait_for(handle.result(), 60)
    finally:
        s3.stop()
        assert await worker.terminate() == 0

    assert (result.status, result.answer) == (RunStatus.DONE, "The word was marmalade.")
    # The turn that waited was asked with the first one in context, read back from S3.
    last = model_server.requests_for(model)[-1].body["messages"]
    assert [m["content"] for m in last if m["role"] == "user"] == [
        FIRST,
        "What did I ask?",
        "Which word?",
    ]
    history = await handle.fetch_history()
    # One wait for the whole outage, however many times it asked: its retries add no event.
    assert waits_in(history) == 1
    await replayer().replay_workflow(history)
    keep_history("test_a_thread_on_s3_waits_out_the_store_going_away_and_goes_on-0", history)


@pytest.mark.replay_corpus
async def test_a_run_whose_model_call_finds_the_store_directory_gone_waits_for_it(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """A plain run on a directory store, one attempt per model call: its directory goes away
    (an unmounted volume) between two steps; the next model call waits for it instead of
    ending the run, and the run finishes once the directory is back."""
    model = f"gone-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
            {"content": "The notes say hello."},
        ],
    )
    root = tmp_path / "store"
    away = tmp_path / "store-unmounted"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    task_queue = f"gone-{uuid.uuid4().hex[:12]}"
    async with (
        http_client() as http,
        scripted_worker(client, task_queue, model_server, http, store=FileBlobStore(root)),
    ):
        handle = await start_agent(
            client, task_queue, f"openai:{model}", workspace, "Read the notes.",
            config=AgentConfig(model_max_attempts=1, require_approval=("read_file",)),
            id_prefix="gone",
        )  # fmt: skip
        for _ in range(1200):
            status: AgentStatus = await handle.query(AgentWorkflow.state)
            if status.pending_approvals:
                break
            await asyncio.sleep(0.05)
        root.rename(away)  # the volume is unmounted while the run waits for its human
        await handle.signal(AgentWorkflow.approve, {"call_id": status.pending_approvals[0].call_id})
        waiting = await waiting_status(handle)
        assert waiting.outage is not None
        assert waiting.outage.startswith(f"the store at {root} is unreachable since")
        await probe_attempts(handle, 3)
        away.rename(root)
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
    assert (result.status, result.answer) == (RunStatus.DONE, "The notes say hello."), result
    history = await handle.fetch_history()
    assert waits_in(history) == 1
    await replayer().replay_workflow(history)
    keep_history("test_a_run_whose_model_call_finds_the_store_directory_gone-0", history)


async def test_an_s3_store_that_refuses_connections_is_store_unavailable(
    s3: S3Server,
) -> None:
    """Every S3 read or write that cannot reach the endpoint is one StoreUnavailable naming
    the store (what the activities turn into a wait); a key it does not hold is not."""
    bucket = make_bucket(s3.endpoint)
    env = aws_env(s3.endpoint)
    settings = S3Settings.from_env(bucket, "p/", env)
    store = S3BlobStore(S3Objects(settings))
    key = await store.put(b"kept")
    s3.stop()
    with pytest.raises(StoreUnavailable) as read:
        await store.get(key)
    assert read.value.where == f"the S3 store s3://{bucket}/p/ at {s3.endpoint}"
    assert "EndpointConnectionError" in str(read.value)
    with pytest.raises(StoreUnavailable):
        await store.put(b"new")
    s3.start()
    assert await store.get(key) == b"kept"


async def test_a_directory_store_whose_directory_is_gone_is_store_unavailable(
    tmp_path: Path,
) -> None:
    """A directory store whose directory is gone is StoreUnavailable, not a missing blob."""
    root = tmp_path / "store"
    store = FileBlobStore(root)
    key = await store.put(b"kept")
    root.rename(tmp_path / "away")
    with pytest.raises(StoreUnavailable) as read:
        await store.get(key)
    assert read.value.where == f"the store at {root}"
    assert "does not exist" in str(read.value)


async def test_a_long_tool_output_the_store_cannot_take_keeps_its_ends_inline(
    tmp_path: Path,
) -> None:
    """A tool has run when its output is stored: an unreachable store does not fail the call
    (it would run again) but keeps the output's start and end, saying the rest was lost."""
    root = tmp_path / "file-not-dir"
    root.write_text("a file where the store's directory should be")
    store = ConversationStore(FileBlobStore(root))
    output = "first line\n" + "x" * STORE_OVER_CHARS + "\nlast line"
    result = await tool_output(store, ToolResult(output=output, success=True))
    assert result.output_ref is None
    assert result.output.startswith("first line") and result.output.endswith("last line")
    assert f"not kept: the store at {root} was unreachable" in result.output
    assert key_of(output.encode()) not in result.output


async def test_a_write_whose_stored_content_cannot_be_read_is_waited_for_not_run(
    tmp_path: Path,
) -> None:
    """A call whose long argument is in a store that has gone away has not run: run_tool says
    StoreUnavailable at once (non-retryable, naming the store) so the workflow waits for the
    store, and writes nothing in the meantime."""
    root = tmp_path / "store"
    store = ConversationStore(FileBlobStore(root))
    content = "x" * (STORE_OVER_CHARS + 1)
    key = await store.put_text(content)
    arguments = json.dumps({"path": "out.txt", "content": marker(key, content)})
    root.rename(tmp_path / "away")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    request = ToolRequest(
        call=ToolCall(id="c1", name="write_file", arguments=arguments), workspace=str(workspace)
    )
    with pytest.raises(ApplicationError) as failed:
        await ActivityEnvironment().run(ToolActivities(store=store).run_tool, request)
    assert failed.value.type == StoreUnavailable.APPLICATION_ERROR_TYPE
    assert failed.value.non_retryable
    assert failed.value.details == (f"the store at {root}",)
    assert not (workspace / "out.txt").exists()


async def test_a_store_directory_that_goes_away_is_waited_for_never_made_again(
    client: Client, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Through ``worker.py`` and the CLI: the store's directory goes away while a run waits
    for its approval of a write; the write's snapshot and the next model call find it gone:
    no empty store is made in its place, ``status`` says the run waits for the store, and once
    it is back the run finishes and ``export`` reads every blob the run wrote."""
    model = f"unmounted-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        model,
        [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "a", "content": "A"}}]},
            {"content": "Written."},
        ],
    )
    root, away = tmp_path / "store", tmp_path / "store-unmounted"
    task_queue = f"unmounted-{uuid.uuid4().hex[:12]}"
    address = server_address(client)
    env = clean_env(OPENAI_BASE_URL=model_server.base_url)
    worker = await start_worker(address, task_queue, env, "--store", str(root))
    try:
        handle = await start_agent(
            client, task_queue, f"openai:{model}", tmp_path / "ws", "Write a.",
            config=AgentConfig(model_max_attempts=1, require_approval=("write_file",)),
            id_prefix="unmounted",
        )  # fmt: skip
        for _ in range(1200):
            status: AgentStatus = await handle.query(AgentWorkflow.state)
            if status.pending_approvals:
                break
            await asyncio.sleep(0.05)
        root.rename(away)
        await handle.signal(AgentWorkflow.approve, {"call_id": status.pending_approvals[0].call_id})
        await waiting_status(handle)
        await probe_attempts(handle, 2)
        assert not root.exists()  # never made again while it was away
        cli = ("--address", address)
        shown = await run_cli(*cli, "status", handle.id, env=clean_env())
        assert shown.returncode == 0, shown.stderr
        assert f"the store at {root} is unreachable since" in shown.stdout, shown.stdout
        away.rename(root)
        result: AgentResult = await asyncio.wait_for(handle.result(), 120)
        assert (result.status, result.answer) == (RunStatus.DONE, "Written."), result
        exported = await run_cli(*cli, "export", handle.id, env=clean_env(TREADLE_STORE=str(root)))
        assert exported.returncode == 0, exported.stderr
        assert "Written." in exported.stdout
    finally:
        assert await worker.terminate() == 0
