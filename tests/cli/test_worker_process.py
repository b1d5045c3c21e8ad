"""worker.py as operators run it: --dev-server brings its own server and takes it down again."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

from tests.support.processes import ROOT, clean_env, free_port, refusal, run_cli


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_dev_server_flag_starts_and_stops_the_server(tmp_path: Path) -> None:
    """--dev-server starts the server from the YAML (its database in the data directory), runs a
    worker, and stops both on SIGTERM."""
    port, ui_port = free_port(), free_port()
    config = tmp_path / "dev.yaml"
    config.write_text(
        f"port: {port}\nui_port: {ui_port}\ndb_filename: dev.sqlite\n"
        "search_attributes: {AgentState: Keyword, AgentStep: Int, AgentModel: Keyword}\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "worker.py"), "--dev-server", "--dev-config", str(config),
        cwd=ROOT, env=clean_env(TREADLE_HOME=str(tmp_path)), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    lines: list[str] = []
    while not any(line.startswith("Worker polling") for line in lines):
        raw = await asyncio.wait_for(process.stdout.readline(), 60)
        assert raw, "worker.py exited early:\n" + "\n".join(lines)
        lines.append(raw.decode().rstrip())
    assert lines[0].startswith(f"Temporal dev server started at 127.0.0.1:{port}")
    assert f"Web UI: http://127.0.0.1:{ui_port}" in lines[0]
    assert _listening(port)
    assert (tmp_path / "dev.sqlite").exists()

    process.terminate()
    rest = (await asyncio.wait_for(process.stdout.read(), 60)).decode()
    assert await process.wait() == 0
    assert rest.strip().splitlines()[-1] == "Worker stopped."
    assert not _listening(port)


async def test_invalid_dev_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A broken temporal-dev.yaml stops worker.py with one clear line, not a traceback."""
    config = tmp_path / "dev.yaml"
    config.write_text("port: [unclosed\n")
    done = await run_cli("--dev-server", "--dev-config", str(config), program="worker.py")
    line = refusal(done)
    assert "dev.yaml" in line
    assert "line" in line
