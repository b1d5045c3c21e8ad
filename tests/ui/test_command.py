"""``starter.py ui`` as a user runs it: the same connection options as every command, loopback
and a URL printed, the page served there, Ctrl-C stops it cleanly."""

from __future__ import annotations

import asyncio
import html
import re
import signal
import uuid

import httpx

from tests.support.harness import Harness
from tests.support.processes import start_service
from treadle.cli.demo import DEMO_MODEL, DEMO_TASK_QUEUE
from treadle.cli.ui import is_loopback
from treadle.workflows.agent.messages.models import AgentInput
from treadle.workflows.agent.workflow import AgentWorkflow


async def test_ui_prints_its_loopback_url_serves_the_page_and_stops_on_ctrl_c(
    harness: Harness,
) -> None:
    """The first line names the URL (on 127.0.0.1, no token there); the page and the runs
    list answer at it, the list naming a run no worker answers for; SIGINT ends the command
    with 0."""
    orphan = await harness.client.start_workflow(
        AgentWorkflow.run,
        AgentInput(task="Nobody runs this.", model="openai:none", workspace=str(harness.workspace)),
        id=f"ui-list-orphan-{uuid.uuid4().hex[:8]}",
        task_queue=f"nobody-{uuid.uuid4().hex[:8]}",
    )
    process, line = await start_service(*harness.cli_args(), "ui", "--port", "0")
    try:
        assert line.startswith("Treadle's page on http://127.0.0.1:"), line
        url = line.split()[3]
        assert "token" not in url
        # The list asks each running run its state with a 3 s deadline; on the suite's shared
        # server many runs have lost their workers, so the list may take that long and more on
        # a busy machine. The test waits for the answer, it does not time it.
        async with httpx.AsyncClient(timeout=60) as http:
            page = await http.get(url)
            assert page.status_code == 200
            assert "runs and threads" in page.text
            for _ in range(100):  # visibility may lag the start a little; a watchdog
                listed = await http.get(url.rstrip("/") + "/v1/runs")
                assert listed.status_code == 200
                rows = {row["id"]: row for row in listed.json()["runs"]}
                if orphan.id in rows:
                    break
                await asyncio.sleep(0.1)
            assert orphan.id in rows, rows
            assert rows[orphan.id]["execution"] == "running"
            assert rows[orphan.id]["answered"] is False
    finally:
        process.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(process.communicate(), 60)
        await orphan.terminate("the test is over")
    assert process.returncode == 0, err.decode()
    assert "stopped" in out.decode()


def test_only_loopback_addresses_go_without_a_token() -> None:
    """127.0.0.0/8, ::1 and localhost are loopback; any other address needs the token."""
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "192.168.1.2", "::", "example.com"))


async def _served_model(harness: Harness, *options: str, queue: str | None = None) -> str:
    """The model the Start form of ``ui`` (with ``options``, serving ``queue``, default the
    harness's) offers, as the page is served."""
    queued = ["--task-queue", queue] if queue else []
    process, line = await start_service(*harness.cli_args(), *queued, "ui", "--port", "0", *options)
    try:
        url = line.split()[3]
        async with httpx.AsyncClient(timeout=60) as http:
            page = await http.get(url)
        field = re.search(r'<input name="model" value="([^"]*)">', page.text)
        assert field is not None, page.text
        return html.unescape(field.group(1))
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.communicate(), 60)


async def test_the_start_form_offers_the_demo_model_on_the_demos_queue(harness: Harness) -> None:
    """On the demo's queue the Start form offers the demo's scripted model (the only one its
    worker answers); elsewhere openai:gpt-4o; ``--model`` names another, escaped in the page."""
    assert await _served_model(harness, queue=DEMO_TASK_QUEUE) == DEMO_MODEL
    assert await _served_model(harness) == "openai:gpt-4o"
    assert await _served_model(harness, "--model", 'ollama:"x"<y>') == 'ollama:"x"<y>'


async def test_a_run_started_without_a_model_gets_the_servers(harness: Harness) -> None:
    """A run the page's API starts without a model runs with ``ui --model``'s."""
    model = harness.script({"content": "Done by the server's model."})
    process, line = await start_service(*harness.cli_args(), "ui", "--port", "0", "--model", model)
    try:
        url = line.split()[3].rstrip("/")
        async with httpx.AsyncClient(timeout=60) as http:
            started = await http.post(f"{url}/v1/runs", json={"task": "Say it."})
            assert started.status_code == 201, started.text
        handle = harness.client.get_workflow_handle_for(AgentWorkflow.run, started.json()["id"])
        result = await handle.result()
        assert result.answer == "Done by the server's model."
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.communicate(), 60)
