"""Commands that run until Ctrl-C (codec-server, monitors serve, ui, demo): one way to listen,
to catch SIGINT and SIGTERM, and to stop in order."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

from treadle.cli.exits import UsageError

__all__ = ["interrupted", "listening", "serve_until_interrupted"]

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def listening(start: Awaitable[T], host: str, port: int) -> T:
    """``start`` awaited; an address that cannot be listened on is one usage line."""
    try:
        return await start
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc


@contextlib.contextmanager
def interrupted() -> Iterator[asyncio.Event]:
    """Within the block, Ctrl-C and SIGTERM set the event yielded instead of ending the process:
    the command stops what it started, in order."""
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in SIGNALS:
        loop.add_signal_handler(signum, event.set)
    try:
        yield event
    finally:
        for signum in SIGNALS:
            loop.remove_signal_handler(signum)


async def serve_until_interrupted(
    banner: str, stop: Callable[[], Awaitable[None]], stopped: str
) -> int:
    """Print ``banner`` once Ctrl-C and SIGTERM are caught, wait for one, ``stop`` the service
    and print ``stopped``: exit code 0."""
    with interrupted() as stopping:
        print(banner, flush=True)
        try:
            await stopping.wait()
        finally:
            await stop()
    print(stopped, flush=True)
    return 0
