"""moto's S3 server as a real process on a free loopback port, for the tests that need S3."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import free_port


@contextlib.contextmanager
def moto_server(log_dir: Path) -> Iterator[str]:
    """Start ``python -m moto.server`` on 127.0.0.1, wait until it answers, yield its endpoint;
    stop it on exit. Its output goes to ``log_dir/moto.log``, quoted if it never answers."""
    port = free_port()
    log = log_dir / "moto.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if process.poll() is not None:
                pytest.fail(f"moto server exited: {log.read_text()}")
            try:
                httpx.get(f"{endpoint}/moto-api/", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            pytest.fail(f"moto server never answered on {endpoint}: {log.read_text()}")
        yield endpoint
    finally:
        process.terminate()
        process.wait(30)
