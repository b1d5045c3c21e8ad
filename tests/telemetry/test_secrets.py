"""API keys stay in the worker's environment: never in a run's history, trace, status or the
worker's log, even via a tool, and even when a provider echoes one back in another letter case
or in pieces."""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from tests.support.canary import canary_key, decoded_payloads, leaks
from tests.support.harness import replayer, start_agent, temporal_cli
from treadle.activities.errors import ModelHTTPError
from treadle.activities.model.activity import ModelActivities, ProviderSettings, http_client
from treadle.activities.model.http_errors import MIN_FRAGMENT, REDACTED, Redactor
from treadle.cli.worker import build_worker
from treadle.scripted_model import ScriptedModelServer
from treadle.workflows.agent.messages.models import (
    AgentConfig,
    AgentResult,
    AgentStatus,
    ChatMessage,
    ModelRequest,
    RunStatus,
    Trace,
)
from treadle.workflows.agent.workflow import AgentWorkflow

# A fake canary key, split so secret scanners do not mistake the source for a real one.
KEY = "sk-" + "treadle-canary-7f3a9c2e51d04b86a1"


@pytest.mark.parametrize(
    ("provider", "key_env", "url_env", "header"),
    [
        ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", "authorization"),
        ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "x-api-key"),
    ],
)
async def test_key_never_enters_the_exported_history(
    client: Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
    key_env: str,
    url_env: str,
    header: str,
) -> None:
    """A run whose worker holds a recognisable key, and whose tool prints the environment,
    leaves no trace of the key in `temporal workflow show -o json`."""
    monkeypatch.setenv(key_env, KEY)  # as a worker would have it
    with ScriptedModelServer(api_key=KEY) as models:
        models.add_model(
            "m",
            [
                {"tool_calls": [{"name": "run_command", "arguments": {"command": "env"}}]},
                {"content": "printed the environment"},
            ],
        )
        task_queue = f"test-{uuid.uuid4().hex[:12]}"
        settings = ProviderSettings.from_env(
            {url_env: models.base_url, key_env: os.environ[key_env]}
        )
        async with (
            http_client() as http,
            build_worker(client, task_queue=task_queue, settings=settings, http=http),
        ):
            handle = await start_agent(
                client, task_queue, f"{provider}:m", tmp_path, "print the environment",
                config=AgentConfig(allow_run_command=True, command_allowlist=("env",)),
                id_prefix="secret",
            )  # fmt: skip
            result: AgentResult = await handle.result()
            await replayer().replay_workflow(await handle.fetch_history())
        assert KEY in models.requests[0].headers[header]  # the key did reach the provider

    assert result.status is RunStatus.DONE
    exported = await _exported_history(client, handle.id)
    assert "PATH=" in exported  # the tool's output is in there...
    assert KEY not in exported  # ...but not the key
    assert key_env not in exported


async def _exported_history(client: Client, workflow_id: str) -> str:
    """`temporal workflow show -o json`, with every payload decoded and appended."""
    shown = await temporal_cli(
        client, "workflow", "show", "--workflow-id", workflow_id, "-o", "json"
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout + "\n".join(decoded_payloads(json.loads(shown.stdout)))


# ------------------------------------------------------------------------------------------
# Redaction by value: any letter case, whole or in pieces, every configured key
# ------------------------------------------------------------------------------------------


def test_a_key_is_redacted_in_any_case_and_in_fragments() -> None:
    """Exact, lower- and upper-cased, its first 20 characters, any 8 in a row, and the key cut
    by quotes and whitespace are all redacted; 7 characters in a row are not a leak."""
    key = canary_key(40)
    redact = Redactor([key])
    for echoed in (
        key,
        key.lower(),
        key.upper(),
        key.swapcase(),
        key[:20],
        key[13 : 13 + MIN_FRAGMENT],
        f'{key[:5]}" "{key[5:11]}\n  {key[11:]}',
        f"'{key[:6]}''{key[6:12]}'\\'{key[12:18]}'",
    ):
        text = f"proxy said: {echoed}; retry later"
        redacted = redact(text)
        assert redacted.startswith("proxy said: ")
        assert redacted.endswith("; retry later")
        assert REDACTED in redacted, echoed
        assert not leaks(redacted, key), (echoed, redacted)
    below_the_minimum = f"ends in ({key[3 : 3 + MIN_FRAGMENT - 1]})"
    assert redact(below_the_minimum) == below_the_minimum
    assert redact("nothing to see here") == "nothing to see here"
    assert key not in repr(redact) and key[:MIN_FRAGMENT] not in repr(redact)


def test_a_short_key_is_redacted_only_whole_and_key_shapes_still_are() -> None:
    """A key under 16 characters is redacted whole (in any case, even cut by a quote) but not
    in fragments; anything key-shaped (``sk-...``) is redacted whether configured or not."""
    short = "Shrt" + "Key12345"  # 12 characters
    redact = Redactor([short, None, ""])
    assert redact(f'got {short.upper()} and {short[:4]}"{short[4:]}') == (
        f"got {REDACTED} and {REDACTED}"
    )
    assert redact(f"got {short[:8]}") == f"got {short[:8]}"
    shaped = "sk-" + "proj-abcdef123456"
    assert Redactor()(f"bad key {shaped}!") == f"bad key {REDACTED}!"


async def test_every_configured_key_is_redacted_not_only_the_providers_own() -> None:
    """A proxy in front of OpenAI that echoes the worker's Anthropic key (lower-cased) in its
    error: the key is still redacted, though this call never sent it."""
    openai_key, anthropic_key = canary_key(), canary_key()
    echo = {"error": {"message": f"upstream rejected {anthropic_key.lower()} and {openai_key}"}}
    with ScriptedModelServer() as server:
        server.add_model("m", [{"content": "x", "errors": [{"status": 502, "body": echo}]}])
        settings = ProviderSettings.from_env(
            {
                "OPENAI_BASE_URL": server.base_url,
                "OPENAI_API_KEY": openai_key,
                "ANTHROPIC_API_KEY": anthropic_key,
            }
        )
        async with httpx.AsyncClient() as http:
            models = ModelActivities(settings, http)
            request = ModelRequest(
                model="openai:m", messages=(ChatMessage(role="user", content="hi"),)
            )
            with pytest.raises(ModelHTTPError) as caught:
                await models.complete(request, read_timeout=5)
    message = str(caught.value)
    assert message == f"openai returned HTTP 502: upstream rejected {REDACTED} and {REDACTED}"
    assert not leaks(message, openai_key) and not leaks(message, anthropic_key)


@pytest.mark.parametrize(
    ("provider", "key_env", "url_env", "other_key_env"),
    [
        ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"),
        ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENROUTER_API_KEY"),
    ],
)
async def test_an_echoed_key_appears_nowhere_a_run_leaves_text(
    client: Client,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    provider: str,
    key_env: str,
    url_env: str,
    other_key_env: str,
) -> None:
    """Canary: the provider answers 503, 503 and then 401, echoing the key it received exactly,
    lower-cased, upper-cased, its first 20 characters and cut by quotes and whitespace (and the
    worker's other key, lower-cased). The run ends with the 401, and no 8 characters of either
    key are in the exported history, the trace or status queries, the result, or the worker's
    log."""
    caplog.set_level(logging.DEBUG)
    key, other = canary_key(), canary_key()
    every_form = ["exact", "lower", "upper", "prefix", "split"]
    with ScriptedModelServer(api_key=key) as models:
        models.add_model(
            "m",
            [
                {
                    "content": "never reached",
                    "errors": [
                        {"status": 503, "echo_key": ["exact", "lower", "upper"]},
                        {
                            "status": 503,
                            "body": {"error": {"message": f"also saw {other.lower()}"}},
                            "echo_key": ["prefix", "split"],
                        },
                        {"status": 401, "echo_key": every_form},
                    ],
                }
            ],
        )
        task_queue = f"test-{uuid.uuid4().hex[:12]}"
        settings = ProviderSettings.from_env(
            {url_env: models.base_url, key_env: key, other_key_env: other}
        )
        async with (
            http_client() as http,
            build_worker(client, task_queue=task_queue, settings=settings, http=http),
        ):
            handle = await start_agent(
                client, task_queue, f"{provider}:m", tmp_path, "say hello",
                config=AgentConfig(model_max_attempts=5), id_prefix="canary",
            )  # fmt: skip
            result: AgentResult = await handle.result()
            status: AgentStatus = await handle.query(AgentWorkflow.state)
            trace: Trace = await handle.query(AgentWorkflow.trace)
            await replayer().replay_workflow(await handle.fetch_history())
        assert len(models.requests) == 3  # 503, 503, then the 401 that ends the run
        assert all(key in str(r.headers) for r in models.requests)  # the key was sent each time

    assert result.status is RunStatus.ERROR
    assert result.error is not None and "HTTP 401" in result.error
    assert result.error.count(REDACTED) == len(every_form), result.error
    exported = await _exported_history(client, handle.id)
    assert f"also saw {REDACTED}" in exported and "HTTP 503" in exported
    worker_log = caplog.text + "\n".join(str(vars(record)) for record in caplog.records)
    assert "HTTP 401" in worker_log  # the failures were logged...
    for where, text in {
        "history": exported,
        "trace": trace.model_dump_json(),
        "status": status.model_dump_json(),
        "result": result.model_dump_json(),
        "worker log": worker_log,
    }.items():
        assert not leaks(text, key), where  # ...but no piece of either key
        assert not leaks(text, other), where
