"""``starter.py ui`` as a user runs it: the same connection options as every command, loopback
and a URL printed, the page served there, Ctrl-C stops it cleanly."""

from __future__ import annotations

import asyncio
import signal

import httpx

from tests.support.harness import Harness
from tests.support.processes import start_service
from treadle.cli.ui import is_loopback


async def test_ui_prints_its_loopback_url_serves_the_page_and_stops_on_ctrl_c(
    harness: Harness,
) -> None:
    """The first line names the URL (on 127.0.0.1, no token there); the page and the runs
    list answer at it; SIGINT ends the command with 0."""
    process, line = await start_service(*harness.cli_args(), "ui", "--port", "0")
    try:
        assert line.startswith("Treadle's page on http://127.0.0.1:"), line
        url = line.split()[3]
        assert "token" not in url
        async with httpx.AsyncClient() as http:
            page = await http.get(url)
            assert page.status_code == 200
            assert "runs and threads" in page.text
            listed = await http.get(url.rstrip("/") + "/api/runs")
            assert listed.status_code == 200
            assert isinstance(listed.json()["runs"], list)
    finally:
        process.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    assert "stopped" in out.decode()


def test_only_loopback_addresses_go_without_a_token() -> None:
    """127.0.0.0/8, ::1 and localhost are loopback; any other address needs the token."""
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "192.168.1.2", "::", "example.com"))
