"""Payload encryption: nothing readable in history, restarts and key rotation survive it, the
codec server decodes for the Web UI, and a missing or wrong key is one clear error."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History, HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.support.harness import scripted_worker, start_agent
from tests.support.processes import (
    ROOT,
    clean_env,
    free_port,
    refusal,
    run_cli,
    start_service,
    start_worker,
)
from treadle.activities.model.activity import http_client
from treadle.codec import (
    ENCODING,
    ENV_VAR,
    KEY_ID_METADATA,
    DecryptionFailed,
    EncryptionCodec,
    EncryptionSettingsError,
    Keyring,
    KeysNotSet,
    Sealed,
    UnknownKeyError,
)
from treadle.connection import ConnectionSettingsError, connect, data_converter
from treadle.scripted_model import ScriptedModelServer
from treadle.web.codec import codec_app
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentInput,
    AgentResult,
    ApproveSignal,
    RunStatus,
)
from treadle.workflows.agent.messages.state_machine import State
from treadle.workflows.agent.workflow import AgentWorkflow


def _key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


OLD = f"old:{_key()}"
NEW = f"new:{_key()}"
OTHER = f"other:{_key()}"
OLD_ID_OTHER_KEY = f"old:{_key()}"
UI_ORIGIN = "http://127.0.0.1:8233"
LACKS_OLD_KEY = "error: the worker cannot read the run: data encrypted with key id 'old'"


LOCAL_ACTIVITY_MARKER = "core_local_activity"
"""The marker of a local activity (the listing of its worker's loaded tools, in a run started
without ``treadle.start_attributes``). Its
``result`` is the activity's result, encoded like any payload; its ``data`` is the core's own
record (activity id and type, attempt, time): code, not data, written unencoded."""


def _payloads(message: Message) -> Iterator[Payload]:
    """Every payload inside a history event, except search attributes (indexed by the server,
    so never encoded: they hold the run's state, step and model name), headers (trace context)
    and a local activity marker's own ``data``."""
    if isinstance(message, Payload):
        yield message
        return
    if isinstance(message, HistoryEvent) and (
        message.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY_MARKER
    ):
        details = message.marker_recorded_event_attributes.details
        for key, payloads in details.items():
            if key != "data":
                yield from payloads.payloads
        return
    for field, value in message.ListFields():
        if field.name == "search_attributes" or field.message_type is None:
            continue
        if field.name == "header":
            # Trace context (``traceparent``) that the tracing interceptor puts in headers when
            # an earlier test of the session set tracing up: trace ids, not data, and unencoded.
            continue
        if isinstance(value, Message):
            values: Any = [value]
        elif field.message_type.GetOptions().map_entry:
            values = value.values()
        else:
            values = value
        for item in values:
            if isinstance(item, Message):
                yield from _payloads(item)


def _key_ids(history_events: list[Any]) -> list[str]:
    return [p.metadata[KEY_ID_METADATA].decode() for e in history_events for p in _payloads(e)]


def _model(models: ScriptedModelServer, *turns: dict[str, Any]) -> str:
    name = f"enc-{uuid.uuid4().hex[:10]}"
    models.add_model(name, list(turns))
    return f"openai:{name}"


async def _encrypted_client(address: str, keys: str) -> Client:
    return await connect(address=address, namespace="default", environ={ENV_VAR: keys})


@asynccontextmanager
async def _worker(
    client: Client, task_queue: str, models: ScriptedModelServer
) -> AsyncIterator[None]:
    async with http_client() as http, scripted_worker(client, task_queue, models, http):
        yield


async def _wait_for(handle: WorkflowHandle[Any, Any], state: State) -> None:
    for _ in range(600):
        if (await handle.query(AgentWorkflow.state)).state == state:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {handle.id} never reached {state}")


@asynccontextmanager
async def _codec_server(keys: str, *args: str) -> AsyncIterator[str]:
    """``starter.py codec-server`` as a real process on a free port; yields its URL."""
    process, line = await start_service(
        "codec-server", "--port", "0", *args, env=clean_env(**{ENV_VAR: keys})
    )
    try:
        assert line.startswith("Codec server on http://127.0.0.1:"), line
        yield line.split()[3]
    finally:
        process.send_signal(signal.SIGTERM)
        rest, errors = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0
        assert rest.decode().strip().endswith("Codec server stopped.")
        assert b"Traceback" not in errors, errors.decode()


def _body(*payloads: Payload) -> dict[str, Any]:
    return json_format.MessageToDict(Payloads(payloads=list(payloads)))


def _parse(body: dict[str, Any]) -> list[Payload]:
    return list(json_format.ParseDict(body, Payloads()).payloads)


# The keyring and the codec


def test_keyring_encrypts_with_the_first_key_and_decrypts_with_any() -> None:
    """The first key encrypts with a fresh nonce each time; each listed key decrypts its own."""
    old = Keyring.parse(OLD)
    rotated = Keyring.parse(f"{NEW}, {OLD}")
    assert rotated.key_ids == ["new", "old"]
    first, second = rotated.encrypt(b"secret"), rotated.encrypt(b"secret")
    assert first.key_id == "new"
    assert first.data != second.data  # a fresh nonce per encryption
    assert first.data[:12] != second.data[:12]
    assert rotated.decrypt(first) == b"secret"
    assert rotated.decrypt(old.encrypt(b"from before")) == b"from before"
    with pytest.raises(UnknownKeyError, match="key id 'new'"):
        old.decrypt(first)


async def test_codec_round_trips_payloads_and_leaves_plain_ones_alone() -> None:
    """An encrypted payload hides data and encoding, carries its key id, and decodes to the
    original; a payload that was never encrypted decodes unchanged."""
    codec = EncryptionCodec(Keyring.parse(OLD))
    original = Payload(metadata={"encoding": b"json/plain"}, data=b'"secret words"')
    (encrypted,) = await codec.encode([original])
    assert dict(encrypted.metadata) == {"encoding": ENCODING, KEY_ID_METADATA: b"old"}
    assert b"secret" not in encrypted.SerializeToString()
    assert b"json/plain" not in encrypted.SerializeToString()
    assert await codec.decode([encrypted]) == [original]
    assert await codec.decode([original]) == [original]


async def test_relabelled_or_altered_payloads_do_not_decrypt() -> None:
    """The key id is authenticated and so is the data: changing either is a clear error."""
    keyring = Keyring.parse(f"{NEW},{OLD}")
    codec = EncryptionCodec(keyring)
    (encrypted,) = await codec.encode([Payload(metadata={"encoding": b"json/plain"}, data=b"1")])
    relabelled = Payload()
    relabelled.CopyFrom(encrypted)
    relabelled.metadata[KEY_ID_METADATA] = b"old"
    with pytest.raises(DecryptionFailed, match="key id 'old' does not decrypt"):
        await codec.decode([relabelled])
    altered = Sealed("new", encrypted.data[:-1] + bytes([encrypted.data[-1] ^ 1]))
    with pytest.raises(DecryptionFailed):
        keyring.decrypt(altered)
    unlabelled = Payload(metadata={"encoding": ENCODING}, data=encrypted.data)
    with pytest.raises(DecryptionFailed, match="no 'encryption-key-id'"):
        await codec.decode([unlabelled])


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ("", "is set but empty; unset it to turn encryption off"),
        ("nocolon", "entry 1 is not keyid:base64key"),
        (f"{OLD},", "entry 2 is not keyid:base64key"),
        ("k1:not*base64", "the key for 'k1' is not valid base64"),
        (f"k1:{base64.b64encode(b'short').decode()}", "key 'k1' is 5 bytes; AES-GCM keys are"),
        (f"{OLD},{OLD_ID_OTHER_KEY}", "key id 'old' is listed twice"),
        (f"bad id:{_key()}", "key id 'bad id' must be"),
    ],
    # Ids without the keys (random per process): every xdist worker collects the same tests.
    ids=["empty", "no-colon", "trailing-comma", "not-base64", "short-key", "twice", "bad-id"],
)
def test_a_bad_key_setting_is_one_line_without_key_material(setting: str, problem: str) -> None:
    """Each malformed setting is refused with one line saying what is wrong, and no key bytes."""
    with pytest.raises(EncryptionSettingsError) as caught:
        Keyring.from_env({ENV_VAR: setting})
    message = str(caught.value)
    assert problem in message
    assert message.startswith(ENV_VAR)
    assert "\n" not in message
    for entry in setting.split(","):
        secret = entry.partition(":")[2]
        if len(secret) > 8:
            assert secret not in message


async def test_no_setting_means_no_encryption() -> None:
    """Without the variable there is no keyring (not an error), and connections write payloads
    exactly as the plain pydantic converter does."""
    assert Keyring.from_env({}) is None
    (stored,) = await data_converter({}).encode(["words"])
    assert stored == pydantic_data_converter.payload_converter.to_payloads(["words"])[0]
    assert await data_converter({}).decode([stored]) == ["words"]


# The codec server's app, through the ASGI transport (no server, no Temporal)


@asynccontextmanager
async def _codec_app(keys: str = OLD) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=codec_app(Keyring.parse(keys), UI_ORIGIN))
    async with httpx.AsyncClient(transport=transport, base_url="http://codec") as http:
        yield http


async def test_codec_app_encodes_and_decodes_for_the_web_ui_only() -> None:
    """POST /encode then /decode gives the payload back; the Web UI's preflight is a 204 with
    CORS headers, which every answer carries; another origin is refused (403)."""
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'"secret words"')
    async with _codec_app() as http:
        encoded = await http.post("/encode", json=_body(plain), headers={"Origin": UI_ORIGIN})
        assert encoded.status_code == 200
        assert encoded.headers["access-control-allow-origin"] == UI_ORIGIN
        (sealed,) = _parse(encoded.json())
        assert sealed.metadata[KEY_ID_METADATA] == b"old"
        assert _parse((await http.post("/decode", json=_body(sealed))).json()) == [plain]
        preflight = await http.options("/decode", headers={"Origin": UI_ORIGIN})
        assert (preflight.status_code, preflight.content) == (204, b"")
        assert preflight.headers["access-control-allow-methods"] == "POST, OPTIONS"
        elsewhere = await http.post(
            "/decode", json=_body(sealed), headers={"Origin": "http://evil.example"}
        )
        assert (elsewhere.status_code, elsewhere.json()) == (
            403,
            {"error": "origin http://evil.example is not allowed; see --origin"},
        )


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        pytest.param(b"[]", "not a Payloads JSON body: a JSON list", id="a list"),
        pytest.param(b'"payloads"', "not a Payloads JSON body: a JSON str", id="a string"),
        pytest.param(b"{nope", "not a Payloads JSON body: Expecting property name", id="no JSON"),
        pytest.param(b"[" * 100_000, "not a Payloads JSON body: ", id="nested too deeply"),
        pytest.param(
            b'{"payloads": 5}', "not a Payloads JSON body: Failed to parse payloads", id="a number"
        ),
        pytest.param(
            b'{"payloads": [{"data": "not base64!"}]}',
            "not a Payloads JSON body: Failed to parse payloads field: Failed to parse data",
            id="bad base64",
        ),
        pytest.param(
            b'{"payloads": [{"metadata": {"encoding": "\\ud800"}}]}',
            "not a Payloads JSON body: ",
            id="a lone surrogate",
        ),
        pytest.param(
            b'{"payloads": [{"metadata": {"\\udfff": "eA=="}}]}',
            "not a Payloads JSON body: ",
            id="a lone surrogate as a key",
        ),
        pytest.param(
            b'{"payloads": [], "\\ud800": 1}',
            "not a Payloads JSON body: a lone surrogate",
            id="a lone surrogate as a field",
        ),
    ],
)
async def test_codec_app_refuses_a_body_that_is_not_a_payloads_object(
    body: bytes, problem: str
) -> None:
    """Any JSON that is not a Payloads object (a lone surrogate anywhere), or no JSON at all,
    is a 400 saying so in one line, never a 500."""
    async with _codec_app() as http:
        for path in ("/decode", "/encode"):
            response = await http.post(path, content=body)
            assert response.status_code == 400, response.text
            assert response.json()["error"].startswith(problem)


async def test_codec_app_answers_wrong_methods_paths_and_sizes_as_json() -> None:
    """GET /decode is a 405 naming POST, another path a 404, a chunked or missing body a 411, an
    oversized one a 413; all JSON with the CORS headers."""

    async def chunks() -> AsyncIterator[bytes]:
        yield b"{}"

    async with _codec_app() as http:
        answers = [
            await http.get("/decode"),
            await http.post("/history", json={}),
            await http.post("/decode", content=chunks()),
            await http.post("/decode", headers={"content-length": str(16 * 1024 * 1024 + 1)}),
        ]
        assert [(r.status_code, r.json()["error"]) for r in answers] == [
            (405, "GET is not allowed here (use POST)"),
            (404, "no /history; POST /encode or /decode"),
            (411, "send the body with a Content-Length (curl --data-binary @file)"),
            (413, "body larger than 16777216 bytes"),
        ]
        assert answers[0].headers["allow"] == "POST"
        assert {r.headers["access-control-allow-origin"] for r in answers} == {UI_ORIGIN}


async def test_codec_server_prints_no_traceback_when_a_client_leaves_early() -> None:
    """Clients that hang up inside a request's body, inside its head, or before sending anything
    leave no traceback on the real server's stderr (checked as it stops), and it still answers."""
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b"1")
    async with _codec_server(OLD) as url, httpx.AsyncClient(timeout=30) as http:
        host, port = url.removeprefix("http://").split(":")
        for request in (
            b'POST /decode HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"payl',
            b"POST /decode HTTP/1.1\r\nHost: x\r\nContent-Le",
            b"",
        ):
            _, writer = await asyncio.open_connection(host, int(port))
            writer.write(request)
            await writer.drain()
            writer.close()
            await writer.wait_closed()
        decoded = await http.post(f"{url}/decode", json=_body(plain))
        assert _parse(decoded.json()) == [plain]


# Through real runs


async def test_history_holds_no_plaintext_when_encryption_is_on(
    client: Client, temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """A run started by starter.py and worked by worker.py, both with keys set, leaves nothing
    readable in history: the canary in the task, the tool's arguments, the answer and a provider
    error are absent from the events' bytes, and every payload is binary/encrypted."""
    canary = f"canary-{uuid.uuid4().hex}"
    overloaded = {"status": 500, "body": {"error": {"message": f"overloaded by {canary}"}}}
    write = {"name": "write_file", "arguments": {"path": "note.md", "content": canary}}
    model = _model(
        model_server,
        {"tool_calls": [write], "errors": [overloaded]},
        {"content": f"wrote {canary}"},
    )
    task_queue = f"enc-{uuid.uuid4().hex[:12]}"
    workflow_id = f"enc-{uuid.uuid4().hex[:12]}"
    env = clean_env(**{ENV_VAR: OLD, "OPENAI_BASE_URL": model_server.base_url})
    worker = await start_worker(temporal_address, task_queue, env)
    try:
        done = await run_cli(
            "--address", temporal_address, "--task-queue", task_queue, "run", f"Note {canary}",
            "--model", model, "--workspace", str(tmp_path), "--id", workflow_id, "--wait", "--json",
            env=env,
        )  # fmt: skip
    finally:
        await worker.terminate()
    assert done.returncode == 0, done.stderr
    assert AgentResult.model_validate_json(done.stdout).answer == f"wrote {canary}"
    assert (tmp_path / "note.md").read_text() == canary

    history = await client.get_workflow_handle(workflow_id).fetch_history()
    assert canary.encode() not in History(events=history.events).SerializeToString()
    markers = [e.marker_recorded_event_attributes.marker_name for e in history.events]
    # A run started by the CLI lists its worker's loaded tools with its first model call (in
    # that call's encrypted payloads), not in a local activity's marker; the marker exemption
    # in _payloads is for runs started without start attributes.
    assert LOCAL_ACTIVITY_MARKER not in markers
    payloads = [p for e in history.events for p in _payloads(e)]
    assert len(payloads) > 5
    assert {p.metadata["encoding"] for p in payloads} == {ENCODING}
    assert set(_key_ids(history.events)) == {"old"}
    # A model call's tries are activities of one attempt each: the provider's error is the
    # failure of the first, and a second try follows it.
    retried = [
        e.activity_task_failed_event_attributes.failure
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    assert retried, "the provider error was not retried"
    # Failure messages move into an encrypted attribute; the server keeps only a placeholder.
    assert [f.message for f in retried] == ["Encoded failure"]
    assert retried[0].encoded_attributes.metadata["encoding"] == ENCODING


async def test_encrypted_run_survives_a_worker_restart(
    temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Killed while the run waits for an approval, the worker is replaced by a new process; the
    approval from starter.py and the rest of the run go through the codec on both sides."""
    write = {"name": "write_file", "arguments": {"path": "note.md", "content": "approved"}}
    model = _model(model_server, {"tool_calls": [write]}, {"content": "done"})
    task_queue = f"enc-{uuid.uuid4().hex[:12]}"
    workflow_id = f"enc-{uuid.uuid4().hex[:12]}"
    env = clean_env(**{ENV_VAR: OLD, "OPENAI_BASE_URL": model_server.base_url})
    common = ("--address", temporal_address, "--task-queue", task_queue)
    encrypted = await _encrypted_client(temporal_address, OLD)
    handle = encrypted.get_workflow_handle_for(AgentWorkflow.run, workflow_id)

    first = await start_worker(temporal_address, task_queue, env)
    try:
        started = await run_cli(
            *common, "run", "Write", "--model", model, "--workspace", str(tmp_path),
            "--require-approval", "write_file", "--id", workflow_id, env=env,
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        await _wait_for(handle, State.WAITING_FOR_HUMAN)
    finally:
        await first.kill()

    second = await start_worker(temporal_address, task_queue, env)
    try:
        # Answered by the new worker: the server stops waiting for the dead one's sticky queue.
        await _wait_for(handle, State.WAITING_FOR_HUMAN)
        approved = await run_cli(*common, "approve", workflow_id, env=env)
        assert approved.returncode == 0, approved.stderr
        result = await handle.result()
    finally:
        await second.terminate()
    assert result.status is RunStatus.DONE
    assert result.answer == "done"
    assert (tmp_path / "note.md").read_text() == "approved"


async def test_codec_server_decodes_a_payload_from_history(
    temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """starter.py codec-server, on loopback, answers the Web UI's CORS preflight, decodes the
    run's input taken from history back to its JSON, encodes with the first key, and refuses
    other origins and undecodable payloads."""
    canary = f"canary-{uuid.uuid4().hex}"
    encrypted = await _encrypted_client(temporal_address, OLD)
    task_queue = f"enc-{uuid.uuid4().hex[:12]}"
    async with _worker(encrypted, task_queue, model_server):
        model = _model(model_server, {"content": "ok"})
        handle = await start_agent(
            encrypted, task_queue, model, tmp_path, canary, id_prefix="enc", static_summary=canary
        )
        await handle.result()
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    (stored,) = started.input.payloads
    assert stored.metadata["encoding"] == ENCODING

    async with _codec_server(f"{NEW},{OLD}") as url, httpx.AsyncClient(timeout=30) as http:
        preflight = await http.options(
            f"{url}/decode",
            headers={
                "Origin": UI_ORIGIN,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace",
            },
        )
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == UI_ORIGIN
        assert set(preflight.headers["access-control-allow-methods"].split(", ")) == {
            "POST",
            "OPTIONS",
        }
        allowed = {h.strip() for h in preflight.headers["access-control-allow-headers"].split(",")}
        assert {"content-type", "x-namespace"} <= allowed

        ui = {"Origin": UI_ORIGIN, "X-Namespace": "default"}
        decoded = await http.post(f"{url}/decode", json=_body(stored), headers=ui)
        assert decoded.status_code == 200, decoded.text
        assert decoded.headers["access-control-allow-origin"] == UI_ORIGIN
        (plain,) = _parse(decoded.json())
        assert plain.metadata["encoding"] == b"json/plain"
        assert AgentInput.model_validate_json(plain.data).task == canary

        encoded = await http.post(f"{url}/encode", json=_body(plain), headers=ui)
        (again,) = _parse(encoded.json())
        assert again.metadata[KEY_ID_METADATA] == b"new"
        assert canary.encode() not in again.data
        round_trip = await http.post(f"{url}/decode", json=_body(again))
        assert _parse(round_trip.json()) == [plain]

        elsewhere = await http.post(
            f"{url}/decode", json=_body(stored), headers={"Origin": "http://evil.example"}
        )
        assert elsewhere.status_code == 403
        assert canary not in elsewhere.text
        not_json = await http.post(f"{url}/decode", content=b"{nope")
        assert not_json.status_code == 400
        assert "not a Payloads JSON body" in not_json.json()["error"]
        missing = await http.post(f"{url}/history", json=_body(stored))
        assert missing.status_code == 404

    async with _codec_server(OTHER) as url, httpx.AsyncClient(timeout=30) as http:
        unknown = await http.post(f"{url}/decode", json=_body(stored))
        assert unknown.status_code == 400
        assert "key id 'old'" in unknown.json()["error"]


async def _waiting_under_the_old_key(
    temporal_address: str,
    model_server: ScriptedModelServer,
    tmp_path: Path,
    content: str,
    answer: str,
) -> tuple[WorkflowHandle[Any, Any], str]:
    """A run started under the old key, left waiting for approval of a write of ``content``
    (``answer`` follows it); its worker gone. Returns the run and its task queue."""
    write = {"name": "write_file", "arguments": {"path": "note.md", "content": content}}
    model = _model(model_server, {"tool_calls": [write]}, {"content": answer})
    task_queue = f"enc-{uuid.uuid4().hex[:12]}"
    before = await _encrypted_client(temporal_address, OLD)
    async with _worker(before, task_queue, model_server):
        handle = await start_agent(
            before, task_queue, model, tmp_path, "Write", id_prefix="enc", static_summary="Write",
            config=AgentConfig(require_approval=("write_file",)),
        )  # fmt: skip
        await _wait_for(handle, State.WAITING_FOR_HUMAN)
    return handle, task_queue


async def test_history_written_with_an_old_key_decodes_when_it_is_listed_second(
    temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """A run started under the old key, waiting for approval, is finished by a worker and client
    whose keys were rotated (new first, old second): old payloads still decode, new ones use the
    new key."""
    handle, task_queue = await _waiting_under_the_old_key(
        temporal_address, model_server, tmp_path, "rotated", "after rotation"
    )

    after = await _encrypted_client(temporal_address, f"{NEW},{OLD}")
    rotated = after.get_workflow_handle_for(AgentWorkflow.run, handle.id)
    async with _worker(after, task_queue, model_server):
        status = await rotated.query(AgentWorkflow.state)
        (pending,) = status.pending_approvals
        await rotated.signal(AgentWorkflow.approve, ApproveSignal(call_id=pending.call_id))
        result = await rotated.result()
    assert result.answer == "after rotation"
    assert (tmp_path / "note.md").read_text() == "rotated"

    key_ids = _key_ids((await rotated.fetch_history()).events)
    assert key_ids[0] == "old"  # the run's input
    assert key_ids[-1] == "new"  # its result
    assert set(key_ids) == {"old", "new"}


async def test_an_unknown_or_wrong_key_fails_clearly(
    client: Client, temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """Reading payloads written under a key id the reader lacks, or with no keys at all, fails
    naming that id, in the client and through starter.py (one line, exit 2); the right id with
    the wrong key fails to decrypt instead of yielding garbage."""
    task_queue = f"enc-{uuid.uuid4().hex[:12]}"
    writer = await _encrypted_client(temporal_address, OLD)
    async with _worker(writer, task_queue, model_server):
        model = _model(model_server, {"content": "ok"})
        handle = await start_agent(
            writer, task_queue, model, tmp_path, "Answer", id_prefix="enc", static_summary="Answer"
        )
        assert (await handle.result()).answer == "ok"

        other = await _encrypted_client(temporal_address, OTHER)
        with pytest.raises(UnknownKeyError, match=r"key id 'old'.*it has 'other'"):
            await other.get_workflow_handle(handle.id, result_type=AgentResult).result()
        wrong = await _encrypted_client(temporal_address, OLD_ID_OTHER_KEY)
        with pytest.raises(DecryptionFailed, match="key id 'old' does not decrypt"):
            await wrong.get_workflow_handle(handle.id, result_type=AgentResult).result()
        with pytest.raises(KeysNotSet, match=f"key id 'old', but {ENV_VAR} is not set"):
            await client.get_workflow_handle(handle.id, result_type=AgentResult).result()

        common = ("--address", temporal_address, "--task-queue", task_queue)
        shown, keyless = await asyncio.gather(
            run_cli(*common, "status", handle.id, env=clean_env(**{ENV_VAR: OTHER})),
            run_cli(*common, "trace", handle.id, env=clean_env()),
        )
    for done in (shown, keyless):
        assert refusal(done).startswith("error: data encrypted with key id 'old'")
    assert f"{ENV_VAR} is not set" in keyless.stderr


async def test_a_bad_key_setting_stops_the_cli_and_the_worker_before_anything_starts(
    tmp_path: Path,
) -> None:
    """starter.py and worker.py refuse a malformed key setting with one line and exit 2; the
    worker's --dev-server is never started."""
    bad = clean_env(**{ENV_VAR: "k1:not*base64"})
    shown = await run_cli("--address", f"127.0.0.1:{free_port()}", "status", "x", env=bad)
    assert shown.returncode == 2
    assert shown.stderr.strip() == f"error: {ENV_VAR}: the key for 'k1' is not valid base64"

    port = free_port()
    config = tmp_path / "dev.yaml"
    config.write_text(f"port: {port}\nui_port: {free_port()}\ndb_filename: dev.sqlite\n")
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "worker.py"), "--dev-server", "--dev-config", str(config),
        cwd=ROOT, env=bad, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert err.decode().strip() == f"error: {ENV_VAR}: the key for 'k1' is not valid base64"
    assert out == b""  # no "Temporal dev server started"
    assert not (tmp_path / "dev.sqlite").exists()


async def test_connect_refuses_a_bad_key_setting() -> None:
    """connect() reads the keys where the connection is made and reports a bad setting as a
    connection settings error, before dialling anything."""
    with pytest.raises(ConnectionSettingsError, match="is set but empty"):
        await connect(address=f"127.0.0.1:{free_port()}", environ={ENV_VAR: " "})


async def test_a_worker_missing_the_old_key_fails_a_query_with_the_key_id(
    temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """A run written under the old key, then served by a worker and read by a client that hold
    only the new one: ``status``, ``trace`` and ``approve`` say which key id is missing (one
    line, exit 2), not ``WorkflowQueryFailedError: Encoded failure``."""
    handle, task_queue = await _waiting_under_the_old_key(
        temporal_address, model_server, tmp_path, "old", "unreached"
    )

    rotated = await _encrypted_client(temporal_address, NEW)  # the old key left out
    common = ("--address", temporal_address, "--task-queue", task_queue)
    async with _worker(rotated, task_queue, model_server):
        shown = await run_cli(*common, "status", handle.id, env=clean_env(**{ENV_VAR: NEW}))
        traced = await run_cli(*common, "trace", handle.id, env=clean_env(**{ENV_VAR: NEW}))
        approved = await run_cli(*common, "approve", handle.id, env=clean_env(**{ENV_VAR: NEW}))
    for done in (shown, traced, approved):
        assert refusal(done).startswith(LACKS_OLD_KEY), done.stderr


async def test_a_thread_whose_worker_lacks_the_old_key_is_refused_naming_it(
    temporal_address: str, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """A thread written under the old key whose worker holds only the new one fails its
    workflow task; Temporal then answers ``Workflow Task in failed state``: ``send``, ``close``,
    ``export`` and ``status`` say instead which key id the worker lacks (one line, exit 2)."""
    model = _model(model_server, {"content": "hi"}, {"content": "unreached"})
    task_queue = f"enc-{uuid.uuid4().hex[:12]}"
    before = await _encrypted_client(temporal_address, OLD)
    async with _worker(before, task_queue, model_server):
        handle = await before.start_workflow(
            AgentWorkflow.run,
            AgentInput(task="hello", model=model, workspace=str(tmp_path), thread=True),
            id=f"enc-{uuid.uuid4().hex[:12]}",
            task_queue=task_queue,
        )
        await _wait_for(handle, State.WAITING_FOR_USER_INPUT)

    rotated = await _encrypted_client(temporal_address, NEW)  # the old key left out
    common = ("--address", temporal_address, "--task-queue", task_queue)
    env = clean_env(**{ENV_VAR: NEW})
    async with _worker(rotated, task_queue, model_server):
        done = [
            await run_cli(*common, *command, env=env)
            for command in (
                ("send", handle.id, "more"),
                ("close", handle.id),
                ("export", handle.id),
                ("status", handle.id),
            )
        ]
    for shown in done:
        assert refusal(shown).startswith(LACKS_OLD_KEY), shown.stderr
