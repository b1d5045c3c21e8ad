"""External Storage: a payload over the threshold is written to the blob store and the history
holds a reference, so no payload meets Temporal's 2 MB limit (``treadle.connection``)."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.service import RPCError
from temporalio.worker import Replayer

from tests.support.harness import scripted_worker
from tests.support.threads import imported_thread
from treadle.activities.model.activity import http_client
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.store.external import DRIVER_NAME, StoredPayloadMissing
from treadle.codec import ENV_VAR as KEYS_ENV
from treadle.connection import PAYLOAD_SIZE_THRESHOLD, STORE_ENV, connect, data_converter
from treadle.plugin.parts import WORKFLOWS
from treadle.sandbox import workflow_runner
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import AgentInput, AgentResult, AgentStatus, RunStatus
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow

TWO_MB = 2 * 1024 * 1024
REFERENCE_TYPE = b"temporal.api.sdk.v1.ExternalStorageReference"


def big_thread(model: str, workspace: Path) -> AgentInput:
    """A thread import whose conversation (a 90,000-character task, then 19 messages of 130,000
    characters) is over 2.5 MB."""
    return imported_thread(model, workspace, [90_000] + [130_000] * 19)


def blob_path(store: Path, reference: Payload) -> Path:
    key: str = json.loads(reference.data)["claimData"]["key"]
    return store / key[:2] / key[2:]


async def test_a_thread_over_2_mb_runs_and_its_history_holds_a_reference(
    temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """A 2.5 MB imported conversation starts, waits for its user and closes; its history is a
    few KB, holds a reference to the blob in the store, and replays with the same converter."""
    store = tmp_path / "store"
    client = await connect(address=temporal_address, namespace="default", store=store)
    agent_input = big_thread("openai:unused", tmp_path)
    assert len(agent_input.model_dump_json()) > TWO_MB
    task_queue = f"test-{uuid.uuid4().hex[:12]}"
    worker_store = FileBlobStore(store)
    async with (
        http_client() as http,
        scripted_worker(client, task_queue, model_server, http, store=worker_store),
    ):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            agent_input,
            id=f"big-{uuid.uuid4().hex[:12]}",
            task_queue=task_queue,
            execution_timeout=timedelta(minutes=5),
        )
        status: AgentStatus = await handle.query(AgentWorkflow.state)
        assert status.state is State.WAITING_FOR_USER_INPUT
        assert status.final_answer == "19 " + "x" * 130_000
        await handle.execute_update(AgentWorkflow.close)
        result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE

    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [reference] = started.input.payloads
    # What stays inline (the 130,000-character last answer in the result, status details) is
    # under the threshold each; the whole history is a fraction of the one stored payload.
    assert sum(event.ByteSize() for event in history.events) * 5 < TWO_MB
    assert reference.metadata["messageType"] == REFERENCE_TYPE
    assert json.loads(reference.data)["driverName"] == DRIVER_NAME
    assert reference.external_payloads[0].size_bytes > TWO_MB
    assert blob_path(store, reference).stat().st_size > TWO_MB

    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=client.data_converter,
        workflow_runner=workflow_runner(),
    )
    await replayer.replay_workflow(history)


async def test_treadle_store_names_the_directory_and_none_turns_storage_off(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TREADLE_STORE is read when connect() runs: a directory receives the large payloads;
    ``none`` keeps them inline, and Temporal then refuses a run input over 2 MB."""
    agent_input = big_thread("openai:unused", tmp_path)
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "from-env"))
    stored = await connect(address=temporal_address, namespace="default")
    [reference] = await stored.data_converter.encode([agent_input])
    assert blob_path(tmp_path / "from-env", reference).is_file()

    monkeypatch.setenv(STORE_ENV, "none")
    inline = await connect(address=temporal_address, namespace="default")
    assert inline.data_converter.external_storage is None
    with pytest.raises(RPCError, match="Blob data size exceeds limit"):
        await inline.start_workflow(
            AgentWorkflow.run,
            agent_input,
            id=f"inline-{uuid.uuid4().hex[:12]}",
            task_queue=f"nobody-{uuid.uuid4().hex[:8]}",
        )


async def test_a_payload_stored_twice_is_one_blob_and_small_ones_stay_inline(
    tmp_path: Path,
) -> None:
    """Content addressing: the same large value stored twice gives the same reference and one
    file; a value under the threshold travels inline and writes nothing."""
    converter = data_converter({}, tmp_path)
    big = "y" * PAYLOAD_SIZE_THRESHOLD
    first, second, small = await converter.encode([big, big, "small"])
    assert first == second
    assert first.metadata["messageType"] == REFERENCE_TYPE
    assert small.metadata["encoding"] == b"json/plain"
    assert len([p for p in tmp_path.rglob("*") if p.is_file()]) == 1
    assert await converter.decode([first, small]) == [big, "small"]


async def test_a_missing_stored_payload_is_an_error_naming_its_key_and_store(
    tmp_path: Path,
) -> None:
    """A reference whose blob is gone fails with the key and the store, not a decoding error."""
    converter = data_converter({}, tmp_path)
    [reference] = await converter.encode(["z" * PAYLOAD_SIZE_THRESHOLD])
    path = blob_path(tmp_path, reference)
    path.unlink()
    key = path.parent.name + path.name
    with pytest.raises(StoredPayloadMissing, match=f"payload {key} is missing from the store at"):
        await converter.decode([reference])


async def test_with_encryption_keys_the_stored_blob_is_encrypted(tmp_path: Path) -> None:
    """The codec runs before External Storage: the blob on disk is the encrypted payload."""
    keys = "k1:" + base64.b64encode(b"\x01" * 32).decode()
    converter = data_converter({KEYS_ENV: keys}, tmp_path)
    secret = "the launch code is 0000 " * (PAYLOAD_SIZE_THRESHOLD // 20)
    [reference] = await converter.encode([secret])
    raw = blob_path(tmp_path, reference).read_bytes()
    assert b"launch code" not in raw
    assert Payload.FromString(raw).metadata["encoding"] == b"binary/encrypted"
    assert await converter.decode([reference]) == [secret]
    with pytest.raises(Exception, match="k1"):
        await data_converter({}, tmp_path).decode([reference])


async def test_a_client_without_the_store_cannot_read_a_reference(tmp_path: Path) -> None:
    """A client pointed at another store reports the missing blob instead of a wrong value."""
    [reference] = await data_converter({}, tmp_path / "a").encode(["w" * PAYLOAD_SIZE_THRESHOLD])
    (tmp_path / "b").mkdir()  # a store that answers (one whose directory is gone is waited for)
    with pytest.raises(StoredPayloadMissing, match="TREADLE_STORE"):
        await data_converter({}, tmp_path / "b").decode([reference])
