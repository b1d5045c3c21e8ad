"""``treadle api`` as a user runs it: the connection options of every command, loopback, its
address and document printed, a run started and approved over it by a program with nothing but
an HTTP client, and Ctrl-C stops it cleanly."""

from __future__ import annotations

import asyncio
import signal

import httpx

from tests.support.harness import Harness
from tests.support.http_api import run_body, until_state
from tests.support.processes import start_service

WRITE = {"name": "write_file", "arguments": {"path": "notes.md", "content": "via the command"}}


async def test_the_api_command_serves_a_run_from_start_to_approval(harness: Harness) -> None:
    """The first line names the API's loopback address and its document; a run started there
    waits for approval, is approved there, and ends; SIGINT ends the command with 0."""
    process, line = await start_service(*harness.cli_args(), "api", "--port", "0")
    try:
        assert line.startswith("Treadle's API on http://127.0.0.1:"), line
        assert "token" not in line
        base = line.split()[3].removesuffix("/v1")
        model = harness.script({"tool_calls": [WRITE]}, {"content": "Done."})
        body = run_body(harness, model, config={"require_approval": "write_file"})
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            document = (await http.get("/v1/openapi.json")).json()
            assert "/v1/runs/{id}/approve" in document["paths"]
            started = await http.post("/v1/runs", json=body)
            assert started.status_code == 201, started.text
            run_id = started.json()["id"]
            harness.handles.append(harness.client.get_workflow_handle(run_id))
            await until_state(http, run_id, "WaitingForHuman")
            approved = await http.post(f"/v1/runs/{run_id}/approve", json={})
            assert approved.json()["done"] == "approved"
            await until_state(http, run_id, "Done")
        assert (harness.workspace / "notes.md").read_text() == "via the command"
    finally:
        process.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    assert "stopped" in out.decode()
