"""The S3-compatible store: the conversation store and External Storage on a real local S3 server
(moto in server mode, a subprocess on a loopback port), chosen by the store setting alone."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from temporalio.client import Client
from temporalio.worker import Replayer

from tests.support.counting import CountingBlobs
from tests.support.harness import scripted_worker
from tests.support.long_conversation import write_conversation
from tests.support.moto import moto_server
from tests.support.processes import ROOT, clean_env, free_port
from tests.support.threads import imported_thread
from treadle.activities.model.activity import http_client
from treadle.activities.store.blobs import BlobMissing, key_of
from treadle.activities.store.conversation import ConversationStore
from treadle.activities.store.s3 import S3BlobStore, S3Objects, S3Settings, S3StoreUnavailable
from treadle.activities.store.tail import view_of
from treadle.activities.store.view import view
from treadle.codec import ENV_VAR as KEYS_ENV
from treadle.connection import (
    PAYLOAD_SIZE_THRESHOLD,
    STORE_ENV,
    ConnectionSettingsError,
    connect,
    data_converter,
)
from treadle.plugin.parts import WORKFLOWS
from treadle.sandbox import workflow_runner
from treadle.scripted_model import ScriptedModelServer
from treadle.stores import StoreSettingsError, check_store, open_blob_store, parse_store
from treadle.workflows.agent.messages.models import (
    AgentInput,
    AgentResult,
    AgentStatus,
    ChatMessage,
    RunStatus,
    UserMessage,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow

REFERENCE_TYPE = b"temporal.api.sdk.v1.ExternalStorageReference"
IMPORTED_SIZES = (90_000, 130_000, 90_000, 100)
"""A thread import (waiting for its user) of about 300 KB: over External Storage's threshold,
well under what one model call may carry."""


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server as its own process on a free loopback port, until the module ends."""
    with moto_server(tmp_path_factory.mktemp("moto")) as endpoint:
        yield endpoint


@pytest.fixture
def canary() -> str:
    """A secret key made at run time: it must show up in no message."""
    return "canary" + secrets.token_hex(16)


@pytest.fixture
def aws_env(s3_endpoint: str, canary: str) -> dict[str, str]:
    """The standard AWS environment a worker would be given (moto takes any credentials)."""
    return {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "treadle-test",
        "AWS_SECRET_ACCESS_KEY": canary,
    }


@pytest.fixture
def bucket(s3_endpoint: str) -> str:
    """A fresh bucket on the server, made the way an operator would (the store never creates
    one)."""
    name = f"treadle-{uuid.uuid4().hex[:12]}"
    admin(s3_endpoint).create_bucket(Bucket=name)
    return name


def admin(endpoint: str) -> Any:
    return boto3.session.Session(
        aws_access_key_id="admin", aws_secret_access_key="admin", region_name="us-east-1"
    ).client("s3", endpoint_url=endpoint)


def object_keys(endpoint: str, bucket: str) -> list[str]:
    listing = admin(endpoint).list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in listing.get("Contents", []))


def read_object(endpoint: str, bucket: str, key: str) -> bytes:
    body: bytes = admin(endpoint).get_object(Bucket=bucket, Key=key)["Body"].read()
    return body


async def answered(handle: Any, answer: str) -> None:
    """Wait until the thread's last answer is ``answer``; fail at once if the run errs."""
    while True:
        status: AgentStatus = await handle.query(AgentWorkflow.state)
        if status.final_answer == answer:
            return
        assert status.state is not State.ERROR, status.error
        await asyncio.sleep(0.05)


def s3_store(url: str, env: dict[str, str]) -> S3BlobStore:
    store = open_blob_store(parse_store(url), env)
    assert isinstance(store, S3BlobStore)
    return store


async def test_a_blob_round_trips_under_its_key_and_the_prefix(
    aws_env: dict[str, str], bucket: str, s3_endpoint: str
) -> None:
    """put() returns the SHA-256 of the bytes, the object sits at PREFIX/ab/cdef..., and get()
    returns the same bytes."""
    store = s3_store(f"s3://{bucket}/team/a", aws_env)
    data = "réponse\n".encode() * 1000
    key = await store.put(data)
    assert key == key_of(data)
    assert await store.get(key) == data
    assert object_keys(s3_endpoint, bucket) == [f"team/a/{key[:2]}/{key[2:]}"]


async def test_a_missing_key_is_blob_missing_naming_the_store(
    aws_env: dict[str, str], bucket: str
) -> None:
    """A key the bucket does not hold is BlobMissing with the key and the s3:// store."""
    store = s3_store(f"s3://{bucket}/p", aws_env)
    key = key_of(b"never written")
    with pytest.raises(BlobMissing, match=f"{key} is missing from the S3 store s3://{bucket}/p/"):
        await store.get(key)


async def test_putting_the_same_content_twice_stores_one_object(
    aws_env: dict[str, str], bucket: str, s3_endpoint: str
) -> None:
    """Content addressing: the same bytes put twice (by two stores) give one key, one object."""
    first = await s3_store(f"s3://{bucket}", aws_env).put(b"same bytes")
    second = await s3_store(f"s3://{bucket}/", aws_env).put(b"same bytes")
    assert first == second
    assert object_keys(s3_endpoint, bucket) == [f"{first[:2]}/{first[2:]}"]


async def test_with_encryption_keys_blobs_are_encrypted_at_rest(
    aws_env: dict[str, str], bucket: str, s3_endpoint: str
) -> None:
    """TREADLE_ENCRYPTION_KEYS seals S3 blobs as it seals files: the object holds no plain
    text, and the store reads it back."""
    keys = "k1:" + "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="
    store = s3_store(f"s3://{bucket}/sealed", {**aws_env, KEYS_ENV: keys})
    key = await store.put(b"the launch code is 0000")
    [name] = object_keys(s3_endpoint, bucket)
    assert b"launch code" not in read_object(s3_endpoint, bucket, name)
    assert await store.get(key) == b"the launch code is 0000"


async def test_a_conversation_is_written_and_read_back_over_s3(
    aws_env: dict[str, str], bucket: str
) -> None:
    """Segments and long contents written by one ConversationStore are read back whole by
    another with nothing cached (another worker on another machine)."""
    url = f"s3://{bucket}/conv"
    writer = ConversationStore(s3_store(url, aws_env))
    long_text = "line of output\n" * 5_000
    ref = await writer.put_text(long_text)
    head = await writer.extend(None, (ChatMessage(role="user", content="hello"),))
    head = await writer.extend(
        head,
        (
            ChatMessage(role="tool", content="(preview)", content_ref=ref, tool_call_id="t1"),
            ChatMessage(role="assistant", content="done"),
        ),
    )
    reader = ConversationStore(s3_store(url, aws_env))
    messages = await reader.messages(head)
    assert [m.role for m in messages] == ["user", "tool", "assistant"]
    assert messages[1].content == long_text and messages[1].content_ref is None
    assert messages[2].content == "done"


async def test_a_long_conversations_view_is_read_from_its_end_over_s3(
    aws_env: dict[str, str], bucket: str
) -> None:
    """A worker on another machine (nothing cached) shows a long conversation kept in S3 as
    the view of its whole record, reading its first segment, the segments back to the view's
    summary and the outputs it shows: not the rest of the record."""
    url = f"s3://{bucket}/long"
    written = await write_conversation(ConversationStore(s3_store(url, aws_env)), 120, 2_000)
    counted = CountingBlobs(s3_store(url, aws_env))
    added = (ChatMessage(role="user", content="and now?"),)
    shown = await view_of(
        ConversationStore(counted), written.heads[120], written.count(120), added, 5_000
    )
    assert shown == view((*written.record, *added), 5_000)
    assert shown.left_out > 150
    assert written.heads[0] in counted.reads
    assert not set(written.heads[1:80]) & set(counted.reads)
    assert len(counted.reads) < 80


async def test_an_agent_run_keeps_its_conversation_and_large_payloads_in_s3(
    temporal_address: str,
    model_server: ScriptedModelServer,
    aws_env: dict[str, str],
    bucket: str,
    s3_endpoint: str,
    tmp_path: Path,
) -> None:
    """A worker and a client configured with TREADLE_STORE=s3://...: an imported thread
    (300 KB) goes through External Storage (the SDK's S3 driver), its next turn's long tool
    output and conversation into the same bucket and prefix; a client with only the same
    settings reads the stored input back, and the history replays."""
    url = f"s3://{bucket}/runs"
    env = {**os.environ, **aws_env, STORE_ENV: url}
    client = await connect(address=temporal_address, namespace="default", environ=env)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    report = "".join(f"row {i:05d} of the report\n" for i in range(400))
    (workspace / "report.txt").write_text(report)
    name = f"s3-{uuid.uuid4().hex[:8]}"
    model_server.add_model(
        name,
        [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "report.txt"}}]},
            {"content": "The report has 400 rows."},
        ],
        order="arrival",  # the imported conversation already holds assistant messages
    )
    agent_input = imported_thread(f"openai:{name}", workspace, IMPORTED_SIZES)
    assert len(agent_input.model_dump_json()) > PAYLOAD_SIZE_THRESHOLD
    task_queue = f"s3-{uuid.uuid4().hex[:12]}"
    async with (
        http_client() as http,
        scripted_worker(client, task_queue, model_server, http, store=s3_store(url, env)),
    ):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            agent_input,
            id=f"s3-{uuid.uuid4().hex[:12]}",
            task_queue=task_queue,
            execution_timeout=timedelta(minutes=5),
        )
        await handle.execute_update(AgentWorkflow.send, UserMessage(text="Count the rows."))
        await answered(handle, "The report has 400 rows.")
        await handle.execute_update(AgentWorkflow.close)
        result: AgentResult = await handle.result()
    assert result.status is RunStatus.DONE, result
    # The model saw the whole file, read back from S3 by the model activity.
    tools = [
        m["content"]
        for request in model_server.requests_for(name)
        for m in request.body["messages"]
        if m["role"] == "tool"
    ]
    assert tools and all(report in t for t in tools), [len(t) for t in tools]

    keys = object_keys(s3_endpoint, bucket)
    assert keys and all(k.startswith("runs/") for k in keys)
    assert any(k.startswith("runs/v0/") for k in keys), keys  # External Storage
    output_key = key_of(report.encode())
    assert f"runs/{output_key[:2]}/{output_key[2:]}" in keys  # the long tool output

    history = await handle.fetch_history()
    [started] = history.events[0].workflow_execution_started_event_attributes.input.payloads
    assert started.metadata["messageType"] == REFERENCE_TYPE
    assert json.loads(started.data)["driverName"] == "aws.s3driver"
    assert sum(event.ByteSize() for event in history.events) < 1_000_000
    # What starter.py does: a converter from the environment alone reads the stored input.
    [decoded] = await data_converter(env).decode([started], [AgentInput])
    assert decoded == agent_input
    replayer = Replayer(
        workflows=WORKFLOWS, data_converter=client.data_converter, workflow_runner=workflow_runner()
    )
    await replayer.replay_workflow(history)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("s3://", "names no bucket"),
        ("s3:///prefix", "names no bucket"),
        ("s3://Bad_Bucket/p", "is not an S3 bucket name"),
        ("s3://b/p", "is not an S3 bucket name"),
        ("s3://bucket/a//b", "empty segment"),
        ("gs://bucket/p", "unknown scheme 'gs'"),
        ("s3://key:hunter2@bucket/p", "must be s3://BUCKET/PREFIX alone"),
    ],
)
def test_a_malformed_store_url_is_refused_in_one_line(url: str, says: str) -> None:
    """A store URL that cannot work is a one-line ConnectionSettingsError naming the problem,
    never taken for a directory; a password in it is not repeated."""
    with pytest.raises(ConnectionSettingsError, match=says) as caught:
        data_converter({STORE_ENV: url})
    assert "\n" not in str(caught.value)
    assert "hunter2" not in str(caught.value)


async def test_a_worker_with_a_missing_bucket_is_refused_before_it_starts(
    aws_env: dict[str, str], canary: str
) -> None:
    """worker.py --store s3://BUCKET where the bucket does not exist exits 2 with one line
    naming the bucket, before any dev server starts, and never prints the secret key."""
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    process = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            str(ROOT / "worker.py"),
            "--dev-server",
            "--store",
            f"s3://{missing}/p",
        ],
        env=clean_env(**aws_env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 2, process.stderr
    [line] = process.stderr.strip().splitlines()
    assert line.startswith("error: the S3 store ")
    assert f"bucket {missing!r} does not exist" in line
    assert canary not in process.stdout + process.stderr
    assert "Temporal dev server" not in process.stdout


def test_a_worker_with_a_malformed_store_url_is_refused() -> None:
    """worker.py --store with a bad s3:// URL exits 2 with one line."""
    process = subprocess.run(
        [sys.executable, str(ROOT / "worker.py"), "--store", "s3://UPPER/p"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 2, process.stderr
    assert process.stderr.strip().splitlines() == [
        "error: store 's3://UPPER/p': 'UPPER' is not an S3 bucket name (3 to 63 lowercase "
        "letters, digits, dots and hyphens)"
    ]


async def test_the_secret_key_appears_in_no_error(
    aws_env: dict[str, str], canary: str, bucket: str, s3_endpoint: str
) -> None:
    """Missing bucket, unreachable endpoint, missing blob, a failed External Storage read: the
    secret key (and an endpoint's password) is in none of their messages or reprs."""
    texts: list[str] = []

    def collect(exc: BaseException) -> None:
        while exc is not None:
            texts.extend([str(exc), repr(exc)])
            exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]

    with pytest.raises(StoreSettingsError) as missing_bucket:
        check_store(f"s3://no-such-{uuid.uuid4().hex[:8]}", aws_env)
    collect(missing_bucket.value)

    closed = f"http://user:{canary}@127.0.0.1:{free_port()}"
    with pytest.raises(StoreSettingsError, match=re.escape("at http://127.0.0.1:")) as unreachable:
        check_store(f"s3://{bucket}", {**aws_env, "AWS_ENDPOINT_URL": closed})
    collect(unreachable.value)

    with pytest.raises(BlobMissing) as blob_missing:
        await s3_store(f"s3://{bucket}", aws_env).get(key_of(b"nothing"))
    collect(blob_missing.value)

    converter = data_converter({**aws_env, STORE_ENV: f"s3://{bucket}/x"})
    [reference] = await converter.encode(["z" * PAYLOAD_SIZE_THRESHOLD])
    for key in object_keys(s3_endpoint, bucket):
        admin(s3_endpoint).delete_object(Bucket=bucket, Key=key)
    with pytest.raises(RuntimeError, match="S3StorageDriver retrieve failed") as driver_error:
        await converter.decode([reference])
    collect(driver_error.value)

    objects = S3Objects(S3Settings.from_env(bucket, "", aws_env))
    texts.extend([repr(objects.settings), str(objects.describe())])
    with pytest.raises(S3StoreUnavailable) as unavailable:
        S3Objects(
            S3Settings.from_env(bucket, "", {**aws_env, "AWS_ENDPOINT_URL": closed})
        ).check_bucket()
    collect(unavailable.value)

    assert texts
    assert not [t for t in texts if canary in t]


async def test_a_client_with_the_s3_store_reads_what_a_worker_client_stored(
    temporal_address: str, aws_env: dict[str, str], bucket: str
) -> None:
    """Two clients built from the same environment (a worker's and starter.py's) share large
    payloads through the bucket; a client pointed at another prefix cannot read them."""
    env = {**aws_env, STORE_ENV: f"s3://{bucket}/shared"}
    writer: Client = await connect(address=temporal_address, namespace="default", environ=env)
    big = "payload " * (PAYLOAD_SIZE_THRESHOLD // 4)
    [reference] = await writer.data_converter.encode([big])
    assert reference.metadata["messageType"] == REFERENCE_TYPE
    assert await data_converter(env).decode([reference]) == [big]
    elsewhere = {**env, STORE_ENV: f"s3://{bucket}/other"}
    with pytest.raises(RuntimeError, match="S3StorageDriver retrieve failed"):
        await data_converter(elsewhere).decode([reference])
